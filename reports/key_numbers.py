"""The report's first screen, beside the verdict: the 3–5 numbers that say why, each with its unit.

Presentation only: the answer itself ("is the network the bottleneck?") is judged once, in analyze.verdict, and
rendered from `Result.verdict`; the link statistics come from there too (analyze.verdict.link_stats), so the
numbers shown are the numbers judged. The formatters here (pct, rate, size, duration) show a missing or
non-finite value as "—".
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from analyze.confidence.thresholds import CONFIDENT  # an inferred count below it is a guess
from analyze.model.result import Result
from analyze.verdict import link_stats, link_text
from capture.units import format_rate


# a value this close below a thousandfold unit shows in that unit: 999,999,999 ns is "1 s", not "1e+03 ms" (3 digits)
ROUNDS_UP = 0.9995


@dataclass
class KeyNumber:
    label: str
    value: str
    detail: str = ""
    key: str = ""


def num(value: object) -> float | None:
    """VALUE as a finite float; None for None, NaN, infinities and anything that is not a number."""
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def pct(x: float | None) -> str:
    x = num(x)
    return "—" if x is None else f"{x * 100:.1f} %"


def rate(bps: float | None) -> str:
    bps = num(bps)
    return "—" if bps is None else format_rate(bps)


def size(nbytes: float | None) -> str:
    nbytes = num(nbytes)
    if nbytes is None:
        return "—"
    for factor, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(nbytes) >= factor * ROUNDS_UP:
            return f"{nbytes / factor:.3g} {unit}"
    return f"{nbytes:.0f} B"


def duration(ns: float | None) -> str:
    ns = num(ns)
    if ns is None:
        return "—"
    for factor, unit, up in (
        (3600e9, "h", 1.0),
        (60e9, "min", 1.0),
        (1e9, "s", ROUNDS_UP),
        (1e6, "ms", ROUNDS_UP),
        (1e3, "µs", ROUNDS_UP),
    ):
        if abs(ns) >= factor * up:
            return f"{ns / factor:.3g} {unit}"
    return f"{ns:.0f} ns"


def key_numbers(result: Result) -> list[KeyNumber]:
    """Utilization while communicating, time communicating, the scaling factor (or the peak), bytes per
    iteration and the iteration time (or the data sent per host): at most five."""
    s = link_stats(result)
    numbers = [
        KeyNumber(
            "utilization while communicating",
            pct(s.while_busy),
            f"of {link_text(s)} line rate (tx, mean over hosts, busy bins only)",
            "while_busy",
        ),
        KeyNumber(
            "time communicating",
            pct(s.busy_fraction),
            f"of the capture's bins at ≥ {float(result.busy_threshold or 0):.0%} of line rate",
            "busy_fraction",
        ),
    ]
    scaling = result.scaling
    measured = scaling.measured if scaling is not None else None
    sf_full = num(measured.full_utilization_scaling_factor) if measured is not None else None
    if scaling is not None and measured is not None and sf_full is not None:
        sf_eff = num(measured.scaling_factor_at_measured_efficiency)
        sf_meas = num(measured.measured_scaling_factor)
        shown = sf_meas if sf_meas is not None else sf_eff
        what = "measured" if sf_meas is not None else "at measured efficiency"
        detail = (
            f"{what} → with the link fully used (N = {measured.workers}, {rate(measured.link_speed_bps)})"
            if shown is not None
            else "with the link fully used"
        )
        if scaling.unsure:
            detail += " — a guess: it rests on an unsure inference (see above)"
        numbers.append(
            KeyNumber(
                "scaling factor",
                f"{shown:.3f} → {sf_full:.3f}" if shown is not None else f"{sf_full:.3f}",
                detail,
                "scaling_factor",
            )
        )
    else:
        numbers.append(
            KeyNumber(
                "peak utilization",
                pct(s.peak),
                f"highest {float(result.bin_ns or 0) / 1e6:g} ms bin, any host (tx)",
                "peak",
            )
        )
    iterations = result.iterations
    median = num(iterations.bytes_per_iteration_per_host.median) if iterations is not None else None
    if iterations is not None and median is not None:
        ratio = num(iterations.theory_ratio)
        confidence = num(iterations.confidence) or 0.0
        guess = iterations.source == "inferred" and confidence < CONFIDENT
        guessed = f" — a guess: iterations inferred at confidence {confidence:.2f}" if guess else ""
        numbers.append(
            KeyNumber(
                "sent per host per iteration",
                size(median),
                (f"median; {ratio:.3f}× the ring's 2(N−1)/N·S" if ratio is not None else "median") + guessed,
                "bytes_per_iteration",
            )
        )
        period = num(iterations.period_ns)
        if period is not None:
            comms = [c for c in (num(it.comm_ns) for it in iterations.per_iteration or []) if c is not None]
            numbers.append(
                KeyNumber(
                    "iteration time",
                    duration(period),
                    f"communication {duration(statistics.median(comms))} (median)" if comms else "",
                    "iteration_time",
                )
            )
    else:
        numbers.append(
            KeyNumber(
                "data sent per host",
                size(s.tx_bytes_mean),
                f"mean over {s.hosts} hosts in {duration(s.duration_ns)}",
                "tx_bytes",
            )
        )
    return numbers[:5]

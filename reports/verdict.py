"""The report's first screen: is the network the bottleneck, and the few numbers that say why.

With a what-if (`scaling` key) whose inputs are sure, the answer is the model's: the full-utilization
scaling factor at the link's speed against BOTTLENECK_SF, and how much the measured transport efficiency
costs. Without one the report can only judge from utilization, and says so: a link that runs near line rate
while the job
communicates and is busy most of the time points at the network; a transport that fills a small share of
the link while busy points at the transport, not the link's capacity. A what-if resting on an inferred
iteration count or ring below the confidence stated as fact (its `unsure` key), or captures that missed the job
(`capture_problems`), answers "unclear" and says why.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from analyze.coverage import CAPTURE_PROBLEMS  # hosts whose capture missed the job: no answer from them
from analyze.staircase import CONFIDENT  # an inferred count below it is a guess
from analyze.whatif.verdict import BOTTLENECK_SF  # one threshold for the summary's verdict and the report's

NEAR_LINE_RATE = 0.7
LOW_FILL = 0.5
MOSTLY_BUSY = 0.5


@dataclass
class KeyNumber:
    label: str
    value: str
    detail: str = ""
    key: str = ""


@dataclass
class Verdict:
    answer: str  # "yes" | "no" | "transport" | "unclear"
    headline: str
    text: str
    numbers: list[KeyNumber] = field(default_factory=list)


def num(value: Any) -> Optional[float]:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out and abs(out) != float("inf") else None


def pct(x: Optional[float]) -> str:
    return "—" if x is None else f"{x * 100:.1f} %"


def rate(bps: Optional[float]) -> str:
    from capture.units import format_rate

    return "—" if bps is None else format_rate(bps)


def size(nbytes: Optional[float]) -> str:
    if nbytes is None:
        return "—"
    for factor, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(nbytes) >= factor:
            return f"{nbytes / factor:.3g} {unit}"
    return f"{nbytes:.0f} B"


def duration(ns: Optional[float]) -> str:
    if ns is None:
        return "—"
    for factor, unit in ((3600e9, "h"), (60e9, "min"), (1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= factor:
            return f"{ns / factor:.3g} {unit}"
    return f"{ns:.0f} ns"


def _mean(values: list[Optional[float]]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def link_stats(doc: Mapping[str, Any]) -> dict[str, Optional[float]]:
    """Across hosts: tx utilization while busy (mean), busy share (mean), peak, mean; link speed; tx bytes."""
    hosts = [h for h in doc.get("hosts") or [] if isinstance(h, Mapping)]
    tx = [h.get("tx_utilization") or {} for h in hosts]
    speeds = [num(h.get("link_speed_bps")) for h in hosts]
    speeds = [s for s in speeds if s]
    firsts = [num(h.get("first_ns")) for h in hosts if num(h.get("last_ns"))]
    lasts = [num(h.get("last_ns")) for h in hosts if num(h.get("last_ns"))]
    return {
        "hosts": float(len(hosts)),
        "while_busy": _mean([num(u.get("while_busy")) for u in tx]),
        "busy_fraction": _mean([num(u.get("busy_fraction")) for u in tx]),
        "peak": max((v for v in (num(u.get("peak")) for u in tx) if v is not None), default=None),
        "mean": _mean([num(u.get("mean")) for u in tx]),
        "link_min_bps": min(speeds) if speeds else None,
        "link_max_bps": max(speeds) if speeds else None,
        "tx_bytes_mean": _mean([num(h.get("tx_bytes")) for h in hosts]),
        "duration_ns": (max(lasts) - min(firsts)) if firsts and lasts else None,
    }


def verdict(doc: Mapping[str, Any]) -> Verdict:
    """The answer, a paragraph, and 3–5 key numbers (each with its unit)."""
    s = link_stats(doc)
    scaling = doc.get("scaling") if isinstance(doc.get("scaling"), Mapping) else None
    iterations = doc.get("iterations") if isinstance(doc.get("iterations"), Mapping) else None
    link_txt = rate(s["link_min_bps"]) + (
        "" if s["link_min_bps"] == s["link_max_bps"] else f"–{rate(s['link_max_bps'])}"
    )
    numbers = [
        KeyNumber(
            "utilization while communicating",
            pct(s["while_busy"]),
            f"of {link_txt} line rate (tx, mean over hosts, busy bins only)",
            "while_busy",
        ),
        KeyNumber(
            "time communicating",
            pct(s["busy_fraction"]),
            f"of the capture's bins at ≥ {float(doc.get('busy_threshold') or 0):.0%} of line rate",
            "busy_fraction",
        ),
    ]
    measured = (scaling or {}).get("measured") or {}
    sf_full = num(measured.get("full_utilization_scaling_factor"))
    sf_eff = num(measured.get("scaling_factor_at_measured_efficiency"))
    sf_meas = num(measured.get("measured_scaling_factor"))
    if scaling is not None and sf_full is not None:
        shown = sf_meas if sf_meas is not None else sf_eff
        what = "measured" if sf_meas is not None else "at measured efficiency"
        detail = (
            f"{what} → with the link fully used (N = {measured.get('workers')}, "
            f"{rate(num(measured.get('link_speed_bps')))})"
            if shown is not None
            else "with the link fully used"
        )
        if scaling.get("unsure"):
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
                pct(s["peak"]),
                f"highest {float(doc.get('bin_ns') or 0) / 1e6:g} ms bin, any host (tx)",
                "peak",
            )
        )
    if iterations is not None and num((iterations.get("bytes_per_iteration_per_host") or {}).get("median")) is not None:
        med = num(iterations["bytes_per_iteration_per_host"]["median"])
        ratio = num(iterations.get("theory_ratio"))
        guess = iterations.get("source") == "inferred" and (num(iterations.get("confidence")) or 0.0) < CONFIDENT
        guessed = (
            f" — a guess: iterations inferred at confidence {num(iterations.get('confidence')) or 0:.2f}"
            if guess
            else ""
        )
        numbers.append(
            KeyNumber(
                "sent per host per iteration",
                size(med),
                (f"median; {ratio:.3f}× the ring's 2(N−1)/N·S" if ratio is not None else "median") + guessed,
                "bytes_per_iteration",
            )
        )
        period = num(iterations.get("period_ns"))
        if period is not None:
            comms = [num(it.get("comm_ns")) for it in iterations.get("per_iteration") or [] if isinstance(it, Mapping)]
            comms = [c for c in comms if c is not None]
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
                size(s["tx_bytes_mean"]),
                f"mean over {int(s['hosts'] or 0)} hosts in {duration(s['duration_ns'])}",
                "tx_bytes",
            )
        )

    unsure = (scaling or {}).get("unsure")
    missed = [str(p) for p in doc.get(CAPTURE_PROBLEMS) or []]
    if missed:
        answer = "unclear"
        head = f"Unsure — the captures of {len(missed)} host(s) missed the job's traffic."
        text = " ".join(missed) + " Every number below rests on those captures."
    elif scaling is not None and sf_full is not None and unsure:
        answer = "unclear"
        head = (
            f"Unsure — the what-if rests on an inferred iteration count or ring "
            f"(confidence {num(unsure.get('confidence')) or 0:.2f})."
        )
        text = str(scaling.get("verdict") or "")
    elif scaling is not None and sf_full is not None:
        if sf_full < BOTTLENECK_SF:
            answer, head = "yes", "Yes — the network is the bottleneck."
        elif sf_eff is not None and sf_eff < sf_full - 0.02:
            answer, head = "transport", "The link is fast enough; the transport does not fill it."
        else:
            answer, head = "no", "No — the network is not the bottleneck."
        text = str(scaling.get("verdict") or "")
    elif s["while_busy"] is None:
        answer, head = "unclear", "No traffic to judge."
        text = "The captures hold no traffic from the hosts' own addresses."
    else:
        wb, bf = s["while_busy"], s["busy_fraction"] or 0.0
        if wb >= NEAR_LINE_RATE and bf >= MOSTLY_BUSY:
            answer, head = "yes", "Probably — the links run near line rate most of the time."
        elif wb >= NEAR_LINE_RATE:
            answer, head = "unclear", "Possibly — the links saturate whenever the job communicates."
        elif wb < LOW_FILL:
            answer, head = "transport", "Not the link's capacity — the transport leaves most of the link unused."
        else:
            answer, head = "unclear", "Unclear from utilization alone."
        text = (
            f"While communicating the hosts sent at {pct(wb)} of line rate ({link_txt}) on average, and were "
            f"communicating in {pct(bf)} of the capture. This is judged from link utilization alone: whether "
            f"communication slows training depends on how much of it overlaps the backward pass — "
            f"`ringscope whatif` with a backward profile gives the measured and full-utilization scaling factor."
        )
    return Verdict(answer, head, text, numbers[:5])

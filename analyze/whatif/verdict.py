"""The what-if in words: the verdict paragraph (the terminal rendering is reports.text).

The verdict answers two questions for the largest N asked: is the network the bottleneck (the
full-utilization scaling factor at the link's speed is below ``BOTTLENECK_SF``), and if the capture measured
how well the transport used its link, whether a faster link would help or the transport must first fill the
link it has. A transport below ``FILLS_LINK`` of line rate "does not fill the link" even where, hidden behind
backward, that costs little (a CPU-bound transport on a fast link is not a slow network). With a measured
scaling factor it says whether the gap is exposed communication (period − T ≈ communication time) or time
lost elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analyze.confidence.doubt import headline
from analyze.confidence.thresholds import FILLS_LINK
from analyze.model.findings import Measured, WireFit
from analyze.whatif.wire_replay import BACKWARD_PER_IDLE
from capture.units import format_rate

if TYPE_CHECKING:
    from analyze.model.findings import WhatIf
    from analyze.whatif.replay import Counterfactual

__all__ = ["verdict_text", "BOTTLENECK_SF"]

BOTTLENECK_SF = 0.95
BUY_TARGETS = (0.9, 0.95)  # scaling factors whose link speed the verdict names: what a user could buy
_NOTABLE_GAP = 0.02
_EXPLAINED = 1.5  # measured time above T up to 1.5× the communication time (10 ms bins): explained by communication
_MOSTLY = 0.5  # ... and at least half of it: most of the communication is exposed


def _needed(replay: "Counterfactual", t: float, workers: int, bandwidth: float, target: float) -> str:
    """'3.1× compression' / 'no compression' / 'no compression ratio' needed to reach ``target``."""
    c = float(replay.needed_compression(t, workers, bandwidth, target)[0])
    return "no compression ratio" if c != c else ("no compression" if c <= 1 else f"{c:.3g}× compression")


def _speeds(replay: "Counterfactual", t: float, workers: int, best: float) -> str:
    """The link speeds a user could buy: 'a link of 9.6 Gbit/s reaches scaling factor 0.9, of 21 Gbit/s 0.95',
    and any target no speed reaches (the model's best, at infinite bandwidth, is below it)."""
    speeds = [(target, float(replay.needed_bandwidth_bps(t, workers, target)[0])) for target in BUY_TARGETS]
    reached = [f"{_range(replay, workers, target, b)} {target}" for target, b in speeds if b == b]
    missed = [target for target, b in speeds if b != b]
    out = "a link of " + ", of ".join(reached).replace(" 0.", " reaches scaling factor 0.", 1) if reached else ""
    if missed:
        out += ("; " if out else "") + f"no link speed reaches {missed[0]} (at most {best:.3f})"
    return out


def _range(replay: "Counterfactual", workers: int, target: float, point: float) -> str:
    """The link speed reaching TARGET, with the interval the capture leaves where the replay has one: '5.6 Gbit/s
    (5.1-6.4 Gbit/s)' (the point alone where no bound reaches the target, or the bounds agree with it)."""
    found = [float(edge.needed_bandwidth_bps(t, workers, target)[0]) for edge, t in replay.bounds]
    found = [b for b in found if b == b]
    lo, hi = min([point, *found]), max([point, *found])
    if not found or hi <= lo * 1.05:
        return format_rate(point)
    return f"{format_rate(point)} ({format_rate(lo)}-{format_rate(hi)})"


def verdict_text(result: "WhatIf", replay: "Counterfactual") -> str:
    """One paragraph: is the network the bottleneck, and would a faster link or a better transport help.
    When the measured inputs are unsure (analyze.confidence.doubt) it says so first and states the rest as
    conditional."""
    text = _verdict(result, replay)
    if result.unsure:
        return (
            f"{headline(result.unsure)}. Nothing below is a finding until that is sure; if those inferences are "
            f"right: {text} To make it sure, give one of: {'; '.join(result.unsure.would_make_sure)}."
        )
    return text


def _verdict(result: "WhatIf", replay: "Counterfactual") -> str:
    t = result.single_iteration_time_ns / 1e9
    n = max(p.workers for p in result.points)
    hide = result.hide_bandwidth_bps or float("nan")
    sf_hide = float(replay.scaling_factor(t, n, hide)[0])
    sf_inf = float(replay.scaling_factor(t, n, 1e18)[0])
    m = result.measured or Measured()
    link = m.link_speed_bps if m.workers == n else None
    overlapped = _overlapped(result)
    parts: list[str] = []
    if link:
        sf = float(replay.scaling_factor(t, n, link / replay.efficiency)[0])  # the link fully used
        parts.append(
            f"With {n} workers and the {format_rate(link)} link fully used, the model ({result.model}) gives "
            f"scaling factor {sf:.3f}."
        )
        ceiling = result.wire.rate_ceiling_bps if result.wire is not None else None
        if sf < BOTTLENECK_SF and ceiling:
            parts.append(
                f"Communication is the bottleneck, but not the link's speed: the transport, not the link, set the "
                f"pace ({format_rate(ceiling)}), and a faster link sends no faster, so the scaling factor stays at "
                f"most {sf_inf:.3f}; {_needed(replay, t, n, link, BOTTLENECK_SF)} would reach {BOTTLENECK_SF}, or "
                f"a transport that fills the link (more sockets/threads per peer, a larger receive window)."
            )
        elif sf < BOTTLENECK_SF:
            parts.append(
                f"The network is the bottleneck: {_speeds(replay, t, n, sf_inf)} (communication hides behind "
                f"{overlapped} "
                f"from about {format_rate(hide)}, scaling factor {sf_hide:.3f}), or "
                f"{_needed(replay, t, n, link, BOTTLENECK_SF)} would reach {BOTTLENECK_SF} on this link."
            )
        else:
            how = "already hides" if link >= hide else "is nearly hidden at this speed (fully"
            parts.append(
                f"The link's capacity is not the bottleneck: communication {how} behind {overlapped} from about "
                f"{format_rate(hide)}{')' if link < hide else ''}, so a faster link would gain at most "
                f"{sf_inf - sf:.3f}."
            )
        eff = m.transport_efficiency
        sf_eff = m.scaling_factor_at_measured_efficiency
        if eff and sf < BOTTLENECK_SF and ceiling:
            pass  # said above: the transport's pace, not the link, is the bottleneck
        elif eff and sf < BOTTLENECK_SF:
            parts.append(
                f"The transport filled {eff:.0%} of line rate while communicating: it uses the link it has; "
                f"the link itself is too slow."
                if eff >= FILLS_LINK
                else f"The transport also reached only {eff:.0%} of line rate while communicating "
                f"(scaling factor {sf_eff:.3f} at that efficiency): filling the link it has comes first."
            )
        elif eff and sf_eff is not None and sf_eff < sf - _NOTABLE_GAP:
            parts.append(
                f"But while communicating the transport reached only {eff:.0%} of line rate, which costs "
                f"scaling factor {sf - sf_eff:.3f} ({sf_eff:.3f} at the measured efficiency): "
                f"the transport needs to use the "
                f"link it has (more sockets/threads per peer, larger buckets, fewer stalls) before a faster "
                f"link would pay off."
            )
        elif eff and eff < FILLS_LINK:
            cost = max(sf - (sf_eff if sf_eff is not None else sf), 0.0)
            parts.append(
                f"The transport used only {eff:.0%} of line rate while communicating "
                f"({format_rate(eff * link)}): it does not fill the link (the transport or the CPU sets the pace, "
                f"not the network), but "
                f"with communication overlapping {overlapped} that costs scaling factor only {cost:.3f} "
                "here."
            )
        elif eff:
            parts.append(
                f"The transport used {eff:.0%} of line rate while communicating, close enough that it is not "
                f"what limits scaling."
            )
        msf = m.measured_scaling_factor
        if msf is not None and msf < min(sf, sf_eff if sf_eff is not None else sf) - 0.05:
            parts.append(_measured_gap(msf, t, m))
    else:
        parts += _without_link(result, replay, t, n, hide, sf_hide)
    if result.wire is not None and result.wire.hidden and result.wire.scaling_factor_low is not None and link:
        parts.append(_hidden(result.wire))
    if sf_inf < BOTTLENECK_SF and not (link and result.wire is not None and result.wire.rate_ceiling_bps):
        rest = "the last bucket after backward" if overlapped == BACKWARD else "the compute the communication hid"
        parts.append(
            f"Even an infinitely fast link leaves scaling factor {sf_inf:.3f}: what remains is per-step latency, "
            f"reduction and {rest}, not bandwidth."
        )
    return " ".join(parts)


def _without_link(
    result: "WhatIf", replay: "Counterfactual", t: float, n: int, hide: float, sf_hide: float
) -> list[str]:
    """The verdict's sentences where no link speed was measured for N: the scaling factor at each speed asked."""
    out: list[str] = []
    overlapped = _overlapped(result)
    rows = sorted((p for p in result.points if p.workers == n and p.compression == 1.0), key=lambda p: p.bandwidth_bps)
    if rows:
        out.append(
            f"With {n} workers and full use of the link, the model ({result.model}) gives scaling factor "
            + ", ".join(f"{p.scaling_factor:.3f} at {format_rate(p.bandwidth_bps)}" for p in rows)
            + "."
        )
        slow = [p for p in rows if p.scaling_factor < BOTTLENECK_SF]
        if slow:
            out.append(
                f"The network is the bottleneck at {', '.join(format_rate(p.bandwidth_bps) for p in slow)}: "
                f"a faster link helps up to about {format_rate(hide)}, where communication hides behind {overlapped} "
                f"(scaling factor {sf_hide:.3f}); "
                f"{_needed(replay, t, n, slow[0].bandwidth_bps, BOTTLENECK_SF)} would reach "
                f"{BOTTLENECK_SF} at {format_rate(slow[0].bandwidth_bps)}."
            )
        else:
            out.append(
                f"The network is not the bottleneck at these speeds: communication hides behind {overlapped} "
                f"from about {format_rate(hide)}, and the transport only needs to use the link it has."
            )
    else:
        out.append(f"Communication hides behind {overlapped} from about {format_rate(hide)} for {n} workers.")
    return out


BACKWARD = "backward"  # what DDP's and Horovod's communication overlaps; a chained job's overlaps all its compute


def _overlapped(result: "WhatIf") -> str:
    """What the communication overlaps, in words: backward, or a chained job's compute."""
    return "the compute" if result.wire is not None and result.wire.readiness == "chained" else BACKWARD


def _hidden(fit: WireFit) -> str:
    """Where the busy link hid when backward ended: how far the scaling factor at this link can move, and why."""
    if fit.readiness == "chained":
        return (
            f"The link was busy through most of the step, which hid how much compute ran under it: the numbers "
            f"above take it as {BACKWARD_PER_IDLE:g}× the compute the link showed; as the wire allows, the scaling "
            f"factor with this link fully used lies between {fit.scaling_factor_low:.3f} and "
            f"{fit.scaling_factor_high:.3f}."
        )
    return (
        f"The link was busy all through backward, which hid when the last bucket became ready: the numbers above "
        f"take the backward after the first bucket as {BACKWARD_PER_IDLE:g}× the link's idle time; as the wire "
        f"allows, the scaling factor "
        f"with this link fully used lies between {fit.scaling_factor_low:.3f} and {fit.scaling_factor_high:.3f}, "
        f"and the ranks' profiles (analyze --trace-beside) or a backward profile (whatif --profile) narrow it."
    )


def _measured_gap(msf: float, t: float, m: Measured) -> str:
    """Why the measured scaling factor is below the model's: exposed communication, or time lost elsewhere."""
    period = m.iteration_time_ns / 1e9 if m.iteration_time_ns is not None else None
    comm = m.comm_time_ns / 1e9 if m.comm_time_ns is not None else None
    exposed = period - t if period else None
    if exposed and comm and 0 < exposed <= _EXPLAINED * comm:
        how = "most" if exposed >= _MOSTLY * comm else "part"
        return (
            f"The measured scaling factor ({msf:.3f}) is well below both: each iteration takes T plus "
            f"{exposed * 1e3:.4g} ms and the all-reduce takes {comm * 1e3:.4g} ms, so {how} of the communication "
            f"is exposed rather than overlapping the computation as the model assumes (wait-free backprop, "
            f"DDP/Horovod buckets)."
        )
    return (
        f"The measured scaling factor ({msf:.3f}) is well below both, so time is lost outside the "
        f"link (stragglers, input pipeline, synchronization) as well."
    )

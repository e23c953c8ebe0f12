"""The one answer to "is the network the bottleneck?", judged once for every face (the JSON's `verdict`, the
report's first screen): the reports render it and never judge again.

With a what-if whose inputs are sure, the answer is the model's: the full-utilization scaling factor at the link's
speed against BOTTLENECK_SF, and how much the measured transport efficiency costs. Without one it can only be
judged from utilization, and says so: a link that runs near line rate while the job communicates and is busy most
of the time points at the network; a transport that fills a small share of the link while busy points at the
transport, not the link's capacity. A what-if resting on an inferred iteration count, ring, world size or gradient
size below the confidence stated as fact (its `unsure`), or captures that missed the job (`capture_problems`),
answers "unclear" and says why.

A sure slow link among the stragglers (analyze.wire.stragglers) answers first, where its fix saves SLOW_LINK_SHARE
of the iteration or more: the ring runs at that link's pace, so no overall link speed or transport says more to a
user than which link to fix and what fixing it saves (the per-link what-if, analyze.whatif.link_fixes). On the real
slow-link ring the what-if's own paragraph read "the transport also reached only 19 % of line rate" and its busy
link made the answer "unclear", while one 200 Mbit/s link among 1 Gbit/s ones cost 533 ms of a 690 ms step.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from analyze.model.findings import Verdict
from analyze.model.result import Result
from analyze.confidence.doubt import UNMODELLED, pacing_link
from analyze.confidence.thresholds import SLOW_LINK_SHARE
from analyze.whatif.link_fixes import fixes_of, interval_words
from analyze.whatif.link_bound import answer as bound_answer
from analyze.whatif.verdict import BOTTLENECK_SF
from capture.units import format_rate

NEAR_LINE_RATE = 0.7  # tx while busy at or above this share of line rate: the links saturate when used
LOW_FILL = 0.5  # below it while busy: the transport leaves most of the link unused
MOSTLY_BUSY = 0.5  # busy in at least this share of the bins: the job communicates most of the time
NOTABLE_GAP = 0.02  # scaling factor lost to the measured transport efficiency that is worth naming


@dataclass
class LinkStats:
    """The hosts' links summed up: means over hosts of their tx utilization, the link speeds, the span."""

    hosts: int
    while_busy: float | None
    busy_fraction: float | None
    peak: float | None
    mean: float | None
    link_min_bps: float | None
    link_max_bps: float | None
    tx_bytes_mean: float | None
    duration_ns: float | None


def _mean(values: list[float]) -> float | None:
    known = [v for v in values if v == v]  # NaN: a host with no bins
    return statistics.fmean(known) if known else None


def link_stats(result: Result) -> LinkStats:
    """Across hosts: tx utilization while busy (mean), busy share (mean), peak, mean; link speeds; tx bytes."""
    hosts = result.hosts
    tx = [h.tx_utilization for h in hosts]
    speeds = [h.link_speed_bps for h in hosts if h.link_speed_bps]
    spans = [(h.first_ns, h.last_ns) for h in hosts if h.last_ns]
    return LinkStats(
        hosts=len(hosts),
        while_busy=_mean([u.while_busy for u in tx]),
        busy_fraction=_mean([u.busy_fraction for u in tx]),
        peak=max((u.peak for u in tx if u.peak == u.peak), default=None),
        mean=_mean([u.mean for u in tx]),
        link_min_bps=min(speeds) if speeds else None,
        link_max_bps=max(speeds) if speeds else None,
        tx_bytes_mean=_mean([float(h.tx_bytes) for h in hosts]),
        duration_ns=float(max(s[1] for s in spans) - min(s[0] for s in spans)) if spans else None,
    )


def link_text(stats: LinkStats) -> str:
    """The line rate in words: one speed, or the range when the hosts' links differ."""
    if stats.link_min_bps is None:
        return "—"
    low = format_rate(stats.link_min_bps)
    if stats.link_max_bps is None or stats.link_max_bps == stats.link_min_bps:
        return low
    return f"{low}–{format_rate(stats.link_max_bps)}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.1f} %"


def _straddles(low: float | None, high: float | None) -> bool:
    """The wire's interval holds scaling factors on both sides of BOTTLENECK_SF: the answer depends on what the
    capture could not see."""
    return low is not None and high is not None and low < BOTTLENECK_SF <= high


def judge(result: Result) -> Verdict:
    """The answer (yes, no, transport, unclear), its headline, and the paragraph that says why."""
    scaling = result.scaling
    measured = scaling.measured if scaling is not None else None
    sf_full = measured.full_utilization_scaling_factor if measured else None
    sf_eff = measured.scaling_factor_at_measured_efficiency if measured else None
    missed = list(result.capture_problems or [])
    if missed:
        return Verdict(
            "unclear",
            f"Unsure — the captures of {len(missed)} host(s) missed the job's traffic.",
            " ".join(missed) + " Every number below rests on those captures.",
        )
    slow = _slow_link(result)
    if slow is not None:
        return slow
    if scaling is not None and sf_full is not None:
        if scaling.unsure:
            return Verdict(
                "unclear",
                f"Unsure — the what-if rests on an inferred iteration count, ring, world size or gradient size "
                f"(confidence {scaling.unsure.confidence:.2f}).",
                scaling.verdict,
            )
        wire = scaling.wire
        if wire is not None and wire.hidden and _straddles(wire.scaling_factor_low, wire.scaling_factor_high):
            hid = "compute runs under it" if wire.readiness == "chained" else "communication overlaps backward"
            return Verdict(
                "unclear",
                f"Unsure — the busy link hid how much {hid}: with the link fully used the "
                f"scaling factor lies between {wire.scaling_factor_low:.3f} and {wire.scaling_factor_high:.3f}.",
                scaling.verdict,
            )
        if sf_full < BOTTLENECK_SF:
            return Verdict("yes", "Yes — the network is the bottleneck.", scaling.verdict)
        if sf_eff is not None and sf_eff < sf_full - NOTABLE_GAP:
            return Verdict("transport", "The link is fast enough; the transport does not fill it.", scaling.verdict)
        return Verdict("no", "No — the network is not the bottleneck.", scaling.verdict)
    stats = link_stats(result)
    its = result.iterations
    kind = its.pattern.kind if its is not None and its.pattern is not None else None
    bound = result.link_bound
    if scaling is None and kind in UNMODELLED and bound is not None:
        return Verdict(*bound_answer(bound), bound.verdict)
    if scaling is None and kind in UNMODELLED:
        return Verdict(
            "unclear",
            "Unsure — the what-if does not model this job's parallelism.",
            f"This job is {UNMODELLED[kind]}; its groups, bytes and transport above stand. While communicating "
            f"the hosts sent at {_pct(stats.while_busy)} of line rate ({link_text(stats)}) on average.",
        )
    if stats.while_busy is None:
        return Verdict("unclear", "No traffic to judge.", "The captures hold no traffic from the hosts' own addresses.")
    wb, bf = stats.while_busy, stats.busy_fraction or 0.0
    if wb >= NEAR_LINE_RATE and bf >= MOSTLY_BUSY:
        answer, head = "yes", "Probably — the links run near line rate most of the time."
    elif wb >= NEAR_LINE_RATE:
        answer, head = "unclear", "Possibly — the links saturate whenever the job communicates."
    elif wb < LOW_FILL:
        answer, head = "transport", "Not the link's capacity — the transport leaves most of the link unused."
    else:
        answer, head = "unclear", "Unclear from utilization alone."
    text = (
        f"While communicating the hosts sent at {_pct(wb)} of line rate ({link_text(stats)}) on average, and were "
        f"communicating in {_pct(bf)} of the capture. This is judged from link utilization alone: whether "
        f"communication slows training depends on how much of it overlaps the backward pass — "
        f"`ringscope whatif` with a backward profile gives the measured and full-utilization scaling factor."
    )
    return Verdict(answer, head, text)


def _slow_link(result: Result) -> Verdict | None:
    """The answer where a sure slow link holds the ring back and its fix saves SLOW_LINK_SHARE or more (module
    docstring); else None."""
    worst = pacing_link(result)
    if worst is None:
        return None
    fix = next((f for f in fixes_of(result) if f.host == worst.host), None)
    if fix is None or fix.saving_share < SLOW_LINK_SHARE:
        return None
    after = (
        result.scaling.verdict if result.scaling is not None else result.link_bound.verdict if result.link_bound else ""
    )
    return Verdict(
        "yes",
        f"Yes — one link holds the ring back: {worst.host}'s.",
        f"{worst.evidence[0]}. Fixed, the per-link what-if ({fix.priced_by}) saves {fix.saving_ns / 1e6:.0f} ms per "
        f"iteration ({fix.saving_share:.0%}{interval_words(fix)}). The what-if below scales every link, that one "
        f"included. {after}",
    )

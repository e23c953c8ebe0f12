"""The what-if for parallelism the ring model does not cover: sharded data parallel and pipeline stages.

Why bounds, not a replay: the ring model (analyze.whatif.calculation) replays DDP's gradient buckets behind the
backward pass. FSDP prefetches its all-gathers under forward and backward and reduce-scatters under backward; a
pipeline sends activations per micro-batch between stages and all-reduces each stage's gradients while other
stages still compute. How much of that overlaps depends on the framework's schedule, which packets do not show.
What they do show is what each host's link must carry per iteration. So, for a link speed B:

    c(B) = the busiest link's bytes per iteration at B
    step(B) between max(T, c(B)) (all communication behind the compute) and T + c(B) (none of it)
    scaling factor T / step(B) between T / (T + c(B)) and T / max(T, c(B))

T, the compute per iteration, is the given single-GPU iteration time, or else bracketed: at least the measured
period less its communication time (all of it exposed) and at most the period itself (all of it hidden). The
pipeline's bubble, (stages − 1) / (micro-batches + stages − 1) of each step, is compute idle time inside T: no
link speed shortens it.

The link speed that reaches a scaling factor x: B ≥ 8·bytes·x / T with full overlap, B ≥ 8·bytes·x / (T(1 − x))
with none. Every input is measured (bytes per iteration and period from sure iterations, link speeds from the
captures), so only the captures and the iteration count can make it unsure (analyze.confidence.doubt.bounds_doubt).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from analyze.confidence.doubt import bounds_doubt, headline
from analyze.model.findings import BuyBound, Group, LinkBound, LinkLoad
from analyze.model.result import Result
from analyze.whatif.verdict import BOTTLENECK_SF, BUY_TARGETS
from capture.units import format_rate

__all__ = ["link_bound", "answer"]

FORMULA = (
    "step(B) between max(T, c(B)) with the communication behind the compute and T + c(B) with none of it; "
    "c(B) = the busiest link's bytes per iteration at B"
)
SHOWN = 3  # links the verdict names


def link_bound(result: Result, given_t_s: Optional[float]) -> Optional[LinkBound]:
    """The bounds for RESULT's job (module doc), or None where its iterations, period or link speeds are missing.
    GIVEN_T_S: the single-GPU iteration time the user gave, else T is bracketed."""
    its = result.iterations
    hosts = {h.name: h for h in result.hosts}
    if its is None or not its.count or not its.period_ns or not its.per_iteration or its.pattern is None:
        return None
    if any(h.link_speed_source == "assumed" for h in hosts.values()):
        return None
    period = float(its.period_ns)
    sent: dict[str, float] = {}
    for record in its.per_iteration:
        for host, nbytes in record.bytes_by_host.items():
            sent[host] = sent.get(host, 0.0) + nbytes
    groups = _groups_of(result.topology.groups if result.topology is not None else None)
    links = [
        LinkLoad(
            host=h,
            bytes_per_iteration=round(total / len(its.per_iteration), 1),
            link_speed_bps=float(hosts[h].link_speed_bps),
            line_rate_ns=round(8e9 * total / len(its.per_iteration) / float(hosts[h].link_speed_bps), 1),
            groups=groups.get(h, []),
        )
        for h, total in sent.items()
        if h in hosts and total > 0
    ]
    if not links:
        return None
    links.sort(key=lambda x: (-x.line_rate_ns, x.host))
    comm = float(np.median([r.comm_ns for r in its.per_iteration]))
    if given_t_s is not None:
        t_lo = t_hi = float(given_t_s) * 1e9
        source, t_note = "given", "T: the single-GPU iteration time given"
    else:
        t_lo, t_hi = max(period - comm, 0.0), period
        source = "bracketed"
        t_note = (
            f"T not given: between the period less its median communication time ({t_lo / 1e6:.1f} ms, all of it "
            f"exposed) and the period ({t_hi / 1e6:.1f} ms, all of it hidden); --single-iteration-time narrows it"
        )
    c = links[0].line_rate_ns
    low = t_lo / (t_lo + c) if t_lo + c > 0 else 0.0
    high = t_hi / max(t_hi, c) if c > 0 else 1.0
    busiest = max(x.bytes_per_iteration for x in links)
    buy = [
        BuyBound(
            target=x,
            full_overlap_bps=round(8e9 * busiest * x / t_hi, 1) if t_hi > 0 else float("inf"),
            no_overlap_bps=round(8e9 * busiest * x / (t_lo * (1 - x)), 1) if t_lo > 0 else float("inf"),
        )
        for x in BUY_TARGETS
    ]
    stages = sum(g.kind == "data_parallel" for g in result.topology.groups or []) if result.topology else 0
    out = LinkBound(
        pattern=its.pattern.kind,
        formula=FORMULA,
        period_ns=round(period, 1),
        compute_ns=[round(t_lo, 1), round(t_hi, 1)],
        compute_source=source,
        links=links,
        scaling_factor=[round(low, 4), round(high, 4)],
        buy=buy,
        stages=stages or None,
        assumptions=[
            t_note,
            f"bytes per iteration: what each host sent inside the {its.count} iterations' windows, over the count, "
            f"counted as {result.byte_mode} bytes",
            "every link at its captured line rate; the busiest one paces the step (a collective waits for its "
            "slowest member)",
        ],
        unsure=bounds_doubt(result),
    )
    if stages:
        out.assumptions.append(
            f"the pipeline's bubble, ({stages} - 1) / (micro-batches + {stages} - 1) of each step, is compute idle "
            "time inside T: no link speed shortens it"
        )
    out.verdict = _verdict(out)
    return out


def _groups_of(groups: Optional[list[Group]]) -> dict[str, list[str]]:
    """Per host, the names of the groups it belongs to: 'data-parallel group 0', 'pipeline boundary 0-1'."""
    out: dict[str, list[str]] = {}
    for i, g in enumerate(groups or []):
        ends = f" {g.between[0]}-{g.between[1]}" if g.between else ""
        name = f"data-parallel group {i}" if g.kind == "data_parallel" else f"pipeline boundary{ends}"
        for h in g.hosts:
            out.setdefault(h, []).append(name)
    return out


def answer(bound: LinkBound) -> tuple[str, str]:
    """The verdict's answer and headline from the bounds: yes where even full overlap stays under BOTTLENECK_SF,
    no where even no overlap reaches it, otherwise it depends on the overlap; unclear while unsure."""
    low, high = bound.scaling_factor
    if bound.unsure is not None:
        sure = bound.unsure.confidence
        return "unclear", f"Unsure — the link bounds rest on inferred iterations (confidence {sure:.2f})."
    if high < BOTTLENECK_SF:
        return "yes", "Yes — the busiest link cannot carry a step's bytes in the step's compute time."
    if low >= BOTTLENECK_SF:
        return "no", "No — even with none of it overlapped, the communication at line rate costs little."
    return "unclear", f"It depends on the overlap: a scaling factor between {low:.2f} and {high:.2f} at line rate."


def _verdict(bound: LinkBound) -> str:
    """The paragraph: what the busiest links carry, the bounds at line rate, and the link speeds to buy."""
    t_lo, t_hi = bound.compute_ns
    t_text = f"{t_lo / 1e6:.1f} ms" if t_lo == t_hi else f"{t_lo / 1e6:.1f}–{t_hi / 1e6:.1f} ms"
    names = ", ".join(
        f"{x.host} {x.bytes_per_iteration / 1e6:.2f} MB ({x.line_rate_ns / 1e6:.1f} ms at "
        f"{format_rate(x.link_speed_bps)})"
        for x in bound.links[:SHOWN]
    )
    low, high = bound.scaling_factor
    buys = "; ".join(
        f"{b.target} needs {format_rate(b.full_overlap_bps)} with full overlap, "
        f"{format_rate(b.no_overlap_bps)} with none"
        for b in bound.buy
    )
    text = (
        f"Modelled as bounds, not replayed ({bound.pattern.replace('_', ' ')}: its overlap is the framework's "
        f"schedule, which packets do not show). Per iteration the busiest links send {names}, against a "
        f"{bound.period_ns / 1e6:.1f} ms step with {t_text} of compute: at line rate the scaling factor lies between "
        f"{low:.3f} (no overlap) and {high:.3f} (full overlap). Scaling factor {buys}."
    )
    if bound.stages:
        text += f" The bubble of {bound.stages} stages is inside the compute time: no link speed shortens it."
    if bound.unsure is not None:
        return f"{headline(bound.unsure)}. If those iterations are right: {text}"
    return text

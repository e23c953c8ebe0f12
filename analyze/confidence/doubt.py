"""What leaves a conclusion unsure: captures that missed the job, or inferred inputs below the confidence
at which they are stated as fact.

The what-if divides by the iteration count (bytes per iteration, the period, the communication time per
iteration) and assumes the ring the packets showed. When either was inferred from the traffic with a
confidence under CONFIDENT, every number built on it is a guess, and the summary, the JSON and the report
say so before the numbers and name what would make them sure. Read from the typed Result, which
`ringscope whatif RESULT.json` reads back from its JSON, so it obeys it as `ringscope analyze` does.
"""

from __future__ import annotations

from typing import Optional

from analyze.confidence.coverage import FIX
from analyze.confidence.thresholds import CONFIDENT, SLOW_LINK_SHARE, SURE_STEP_BINS
from analyze.model.findings import Straggler, Unsure
from analyze.model.result import Result

MAKE_SURE = [
    "iteration markers (run the job under `ringscope capture run`, or set RINGSCOPE_MARKERS; see the README)",
    "--iterations N: the number of training steps the job ran while it was captured",
    "--gradient-bytes S: the model's gradient bytes per step (fp32: 4 x parameters)",
]
UNMODELLED = {  # patterns the ring model does not cover, and why (the wire model replays some: CHAINED_PATTERNS)
    "sharded_data_parallel": "sharded data parallel (all-gathers in the forward and backward passes, a "
    "reduce-scatter): its overlap is not modelled",
    "sharded_grad_op": "sharded data parallel with the parameters gathered once a step (an all-gather in the "
    "forward pass, a reduce-scatter): its overlap is not modelled",
    "reduce_scatter": "a reduce-scatter by recursive halving (each rank keeps a shard of the gradients; what "
    "follows it, an all-gather of the parameters or none, is not seen): not modelled",
    "halving_doubling_allreduce": "an all-reduce by recursive halving and doubling: its steps over log2(W) "
    "partners are not the ring the model assumes",
    "pipeline": "pipeline stages with a data-parallel group each (activations point to point per micro-batch, "
    "the pipeline's bubble, an all-reduce per stage): not modelled",
}
PACED_CONFIDENCE = 0.5  # a what-if whose compute a pacing link hid: either reading (module doc of _paced) may hold
NOT_MODELLED = "nothing given would: the model does not cover this pattern (its bytes, S and transport above stand)"
MAKE_W_SURE = "--world-size W or --ranks-per-host K: the job's ranks, which the capture could not count"


def doubt(result: Result) -> Optional[Unsure]:
    """None when the iterations and the topology are sure; else why not, and what would make them sure."""
    its, topo = result.iterations, result.topology
    because = _count_doubts(result)
    s_conf = its.implied_gradient_bytes_confidence if its is not None else None
    if its is not None and its.count and its.confidence >= CONFIDENT and s_conf is not None and s_conf < CONFIDENT:
        because += [n for n in its.notes if n.startswith(("S from the unique bytes", "S unsure:"))][:1]
    if its is not None and its.ring_size and its.ring_size_sure is False:
        told = [n for n in its.notes if n.startswith(("DISAGREEMENT: --world-size", "DISAGREEMENT: --ranks-per-host"))]
        because += told or [f"the world size N = {its.ring_size} was not told by the capture ({its.ring_size_source})"]
    pattern = its.pattern if its is not None else None
    if pattern is not None and pattern.factor and pattern.confidence < CONFIDENT and its is not None and its.count:
        because.append(f"the bytes theory is unsure ({pattern.confidence:.2f}): {pattern.formula}")
    kind = pattern.kind if pattern is not None else None
    unmodelled = kind in UNMODELLED
    if kind in UNMODELLED:
        because.append(
            "the what-if models a ring all-reduce behind the backward pass (DDP, Horovod); this job is "
            + UNMODELLED[kind]
        )
    if topo is not None and topo.kind and topo.confidence < CONFIDENT:
        because.append(f"the {topo.kind} topology was inferred with confidence {topo.confidence:.2f}")
    worst = pacing_link(result)
    if worst is not None and its is not None and its.period_ns:
        because.append(_paced(worst, its.period_ns))
    missed = list(result.capture_problems or [])
    if missed:
        return Unsure(because=missed + because, confidence=0.0, would_make_sure=[FIX, *MAKE_SURE])
    if not because:
        return None
    confidences = [x.confidence for x in (its, topo) if x is not None] + ([s_conf] if s_conf is not None else [])
    others = len(because) - unmodelled - (worst is not None)
    make_sure = list(MAKE_SURE) if others else [NOT_MODELLED] if unmodelled else []
    if unmodelled:
        confidences.append(0.5)
    if worst is not None:
        confidences.append(PACED_CONFIDENCE)
        make_sure.insert(0, f"a capture with {worst.host}'s link fixed (the per-link what-if prices that fix)")
    # a count unsure at under twice the bins trusted may have taken two short steps for one: a finer bin shows
    # them (two jobs on two cores: 39 steps of 8 bins found for 80 of 4.4)
    unsure_count = its is not None and its.source != "markers" and its.confidence < CONFIDENT
    finer = (
        _finer_bin(its.evidence.get("bins_per_iteration"), its.period_ns, result.bin_ns, 2 * SURE_STEP_BINS)
        if its is not None and unsure_count
        else None
    )
    if finer:
        make_sure.insert(0, f"--bin {finer}: bins a twelfth of an iteration or finer")
    if its is not None and its.ring_size_sure is False:
        confidences.append(min(its.implied_gradient_bytes_confidence or 0.5, 0.5))
        make_sure.insert(0, MAKE_W_SURE)
    return Unsure(because=because, confidence=min(confidences), would_make_sure=make_sure)


def pacing_link(result: Result) -> Optional[Straggler]:
    """The sure slow link that holds the ring back by SLOW_LINK_SHARE of its step or more (the worst), else None:
    the ring runs at its pace."""
    its = result.iterations
    found = [s for s in result.stragglers or [] if s.kind == "link" and s.confidence >= CONFIDENT]
    if not found or its is None or not its.period_ns:
        return None
    worst = max(found, key=lambda s: s.lost_ns_per_iteration)
    return worst if worst.lost_ns_per_iteration >= SLOW_LINK_SHARE * its.period_ns else None


def _paced(worst: Straggler, period_ns: float) -> str:
    """Why the what-if's compute is unsure where one link paces the ring (pacing_link, WORST): the other hosts wait
    on it between ring steps, which their timelines read as compute, and its own busy link hides the compute under
    it. On a real slow-link ring (fixtures/real-training/ddp-slow-rank-slow-link: one 200 Mbit/s link among 1 Gbit/s
    ones, 799 ms steps) the hosts' mean timeline read T 437 ms and the slow host's own 21 ms, where the per-link
    what-if (checked by rerunning such a ring without the slow link) leaves a 184 ms step once it is fixed."""
    return (
        f"one link paces the ring ({worst.host}'s, {worst.lost_ns_per_iteration / 1e6:.0f} ms of each "
        f"{period_ns / 1e6:.0f} ms step): the other hosts wait on it between ring steps, which their timelines "
        f"read as compute, and its own busy link hides the compute under it, so this capture does not tell the "
        f"compute time T the what-if scales"
    )


def _count_doubts(result: Result) -> list[str]:
    """Why the iteration count (so bytes per iteration and the period) is unsure; empty when it is sure."""
    its = result.iterations
    if its is None or not its.count or its.source == "markers" or its.confidence >= CONFIDENT:
        return []
    because = [
        f"the {its.count} iterations were inferred from the traffic with confidence "
        f"{its.confidence:.2f} (stated as fact from {CONFIDENT:.2f})"
    ]
    because += [n for n in its.notes if n.startswith("DISAGREEMENT")]
    if _finer_bin(its.evidence.get("bins_per_iteration"), its.period_ns, result.bin_ns, SURE_STEP_BINS):
        because.append(
            f"each iteration spans only {its.evidence['bins_per_iteration']:g} bins of "
            f"{result.bin_ns / 1e6:g} ms, too few to tell its pauses from a bucket's"
        )
    return because


def bounds_doubt(result: Result) -> Optional[Unsure]:
    """What leaves the link-bound what-if (analyze.whatif.link_bound) unsure: only what its inputs rest on, the
    captures and the iteration count (bytes per iteration, the period). It uses no S, no W and no bytes theory,
    so their doubts are not its own."""
    its = result.iterations
    missed = list(result.capture_problems or [])
    if missed:
        return Unsure(because=missed + _count_doubts(result), confidence=0.0, would_make_sure=[FIX, *MAKE_SURE[:2]])
    because = _count_doubts(result)
    if not because or its is None:
        return None
    return Unsure(because=because, confidence=its.confidence, would_make_sure=list(MAKE_SURE[:2]))


def _finer_bin(bins: Optional[float], period_ns: Optional[float], bin_ns: int, under: float) -> Optional[str]:
    """The --bin that resolves iterations found at under `under` bins each: the widest of 1, 2 and 5 x 10^k ns at or
    under a twelfth of the iteration. Two DDP jobs sharing two cores, the lighter's 44 ms steps at 4 bins of 10 ms:
    0.5; at 2 ms, 21 bins and 1.0. None where no finer bin is needed or none helps."""
    if bins is None or bins >= under or not period_ns:
        return None
    want = period_ns / 12
    nice = [m * 10**k for k in range(3, 10) for m in (1, 2, 5) if m * 10**k <= want]
    if not nice or max(nice) >= bin_ns:
        return None
    ns = max(nice)
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns >= scale:
            return f"{ns / scale:g}{unit}"
    return f"{ns}ns"


def headline(unsure: Unsure) -> str:
    """The one line that goes first: UNSURE and why."""
    return "UNSURE: " + "; ".join(unsure.because)


__all__ = ["doubt", "bounds_doubt", "headline", "MAKE_SURE"]

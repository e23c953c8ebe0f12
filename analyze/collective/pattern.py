"""Which parallelism a job's ring traffic is, and so which bytes theory turns its bytes into S.

The topology says where bytes go; the pattern says what they are. A ring that carries its bytes one way is a ring
all-reduce (DDP, Horovod): each rank sends 2(W-1)/W x S per step to its successor. A ring that carries as many bytes
each way, with torch over gloo, is sharded data parallel (FSDP full shard, ZeRO-3): measured on FSDP2 `fully_shard`
over gloo with 3, 4 and 6 ranks, each rank sends 2(W-1)/W x S to each neighbour per step (1.337, 1.502 and 1.683
x S against 1.333, 1.5 and 1.667: shards are padded to a multiple of W). That is the two all-gathers of the
parameters, forward and backward, (W-1)/W x S each one way round, and the gradients' reduce-scatter, which gloo runs
as a whole all-reduce, 2(W-1)/W x S the other way; 4(W-1)/W x S per rank in all, where DDP's theory read S twice
over. NCCL runs all three one way round, 3(W-1)/W x S per rank: a one-way ring without gloo's mesh is DDP or that,
unsure, until S is given, whose ratio to the bytes tells them apart (nccl_sharded). Other shapes have no theory
here: S is then unsure and says so.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from analyze.collective.halving import halving_pattern
from analyze.model.findings import IterationRecord, Pattern

BALANCED = 0.95  # the lighter direction of a two-way ring carries at least this share of the heavier: sharded
TWO_WAY = 0.9  # from this share on, sharded but unsure (1.0 measured on FSDP2 over gloo, 3-6 ranks)
ONE_WAY = 0.1  # a ring's reverse direction carries under this share of its forward one: a ring all-reduce
NO_MESH = 0.7  # a one-way ring without gloo's rank mesh: DDP's theory, or NCCL's FSDP (3(W-1)/W x S): unsure
NO_MESH_TEXT = (
    "; the connections show no gloo rank mesh (NCCL?), and NCCL's FSDP also sends one way round, 3(W-1)/W x S: "
    "--gradient-bytes or markers settle which"
)
CONFIRMS = (0.97, 1.1)  # measured over theory bytes with S known, for which a pattern's theory is confirmed
ALIKE = 0.8  # a sharded ring's lightest edge carries this share of its direction's heaviest (1.0 measured, 3, 4 hosts)
UNALIKE = 0.5  # from this share down, its edges differ too much for one sharded collective: not sure at all
HALF = 0.5  # the reverse share of SHARD_GRAD_OP over gloo: one all-gather of (W-1)/W x S against 2(W-1)/W x S
HALF_BAND = 0.1  # reverse shares this near HALF read so: sure within half of it, not at all at its edge
NCCL_SHARDED = 1.5  # NCCL's FSDP over DDP's theory: 3(W-1)/W against 2(W-1)/W x S, both one way round


def name_pattern(
    kind: Optional[str], order: list[str], per_it: list[IterationRecord], w: int, mesh: bool = True
) -> Pattern:
    """The pattern of a job whose topology is `kind` over hosts in ring `order`, from each edge's median bytes per
    iteration, for a job of W ranks; its bytes theory as the factor of S each rank sends per ring send. MESH: the
    connections show gloo's rank mesh (every host pair connected). Without it the framework is unknown (NCCL
    connects ring neighbours only), and NCCL's FSDP sends one way round too, 3(W-1)/W x S: a one-way ring is then
    a ring all-reduce at NO_MESH confidence only, and a two-way ring's gloo theory half sure at most."""
    if kind == "halving_doubling" and w >= 2:
        return halving_pattern(w)
    if kind not in ("ring", "bidirectional_ring") or len(order) < 2 or w < 2:
        return Pattern(
            kind="unknown",
            formula=f"no bytes theory for a {kind or 'unknown'} shape over {len(order)} host(s)",
            factor=None,
            confidence=0.0,
            evidence={},
        )
    ring = "ring all-reduce (DDP, Horovod): each rank sends 2(W-1)/W x S per iteration to its successor"
    if len(order) == 2:  # each host is the other's successor and predecessor: no direction to weigh
        ring += "; on two hosts a sharded job's two directions share the one edge each way, so it is assumed"
        ring += "" if mesh else NO_MESH_TEXT
        sure = 1.0 if mesh else NO_MESH
        return Pattern(kind="ring_allreduce", formula=ring, factor=2 * (w - 1) / w, confidence=sure, evidence={})
    forward, backward = _directions(order, per_it)
    balance = min(forward, backward) / max(forward, backward, 1.0)
    evidence = {"reverse_share": round(balance, 4)}
    if balance <= ONE_WAY:
        if not mesh:
            ring += NO_MESH_TEXT
        sure = 1.0 if mesh else NO_MESH
        return Pattern(kind="ring_allreduce", formula=ring, factor=2 * (w - 1) / w, confidence=sure, evidence=evidence)
    if balance >= TWO_WAY:
        # every edge of a sharded ring carries alike; a pipeline of two stages with a data-parallel pair each is a
        # two-way ring of four hosts too, its edges alternating between a stage's all-reduce and a boundary's
        # activations (analyze.collective.groups names it where the two differ twofold or more). gloo: its rank mesh
        # seen in the connections; NCCL's FSDP would send 3(W-1)/W x S, and one way
        by_balance = float(np.clip((balance - TWO_WAY) / (BALANCED - TWO_WAY), 0.0, 1.0))
        formula = (
            "sharded data parallel (FSDP, ZeRO-3) over gloo: two all-gathers of (W-1)/W x S one way and the "
            "gradients' reduce-scatter, run as an all-reduce of 2(W-1)/W x S, the other; 4(W-1)/W x S per rank "
            "per iteration"
        )
        return _sharded("sharded_data_parallel", formula, 4 * (w - 1) / w, by_balance, order, per_it, evidence, mesh)
    if abs(balance - HALF) <= HALF_BAND:
        # the parameters gathered once (forward) one way, the gradients' all-reduce the other: half as much
        by_balance = float(np.clip(2 * (1 - abs(balance - HALF) / HALF_BAND), 0.0, 1.0))
        formula = (
            "sharded data parallel with the parameters gathered once a step (FSDP SHARD_GRAD_OP, ZeRO-2) over gloo: "
            "an all-gather of (W-1)/W x S one way and the gradients' reduce-scatter, run as an all-reduce of "
            "2(W-1)/W x S, the other; 3(W-1)/W x S per rank per iteration"
        )
        return _sharded("sharded_grad_op", formula, 3 * (w - 1) / w, by_balance, order, per_it, evidence, mesh)
    return Pattern(
        kind="unknown",
        formula=f"a two-way ring whose reverse direction carries {balance:.0%} of the forward one: neither a ring "
        "all-reduce (one way), sharded data parallel with the parameters gathered once (half) nor twice (as much "
        "each way)",
        factor=None,
        confidence=0.0,
        evidence=evidence,
    )


def _sharded(
    kind: str,
    formula: str,
    factor: float,
    by_balance: float,
    order: list[str],
    per_it: list[IterationRecord],
    evidence: dict[str, Any],
    mesh: bool,
) -> Pattern:
    """A sharded pattern, as sure as its directions' balance and its edges' likeness allow (half at most without
    gloo's rank mesh)."""
    alike = _alike(order, per_it)
    evidence["edges_alike"] = round(alike, 4)
    sure = by_balance * float(np.clip((alike - UNALIKE) / (ALIKE - UNALIKE), 0.0, 1.0))
    sure = sure if mesh else min(sure, 0.5)
    return Pattern(kind=kind, formula=formula, factor=factor, confidence=round(sure, 3), evidence=evidence)


def _alike(order: list[str], per_it: list[IterationRecord]) -> float:
    """How alike a two-way ring's edges are: per direction its lightest edge (median bytes per iteration) over its
    heaviest, the lesser of the two directions (each direction runs one collective over every edge)."""
    n = len(order)
    ways = [
        [f"{order[i]}->{order[(i + 1) % n]}" for i in range(n)],
        [f"{order[(i + 1) % n]}->{order[i]}" for i in range(n)],
    ]
    out = 1.0
    for keys in ways:
        medians = [float(np.median([it.bytes_by_edge.get(k, 0) for it in per_it])) for k in keys] if per_it else [0]
        out = min(out, min(medians) / max(max(medians), 1.0))
    return out


def _directions(order: list[str], per_it: list[IterationRecord]) -> tuple[float, float]:
    """Median bytes per iteration over the ring's forward edges (each host to the next in `order`) and over its
    reverse edges, summed."""
    n = len(order)
    ahead = {f"{order[i]}->{order[(i + 1) % n]}" for i in range(n)}
    behind = {f"{order[(i + 1) % n]}->{order[i]}" for i in range(n)}

    def total(edges: set[str]) -> float:
        return float(sum(np.median([it.bytes_by_edge.get(e, 0) for it in per_it]) for e in edges))

    return (total(ahead), total(behind)) if per_it else (0.0, 0.0)


__all__ = ["name_pattern", "BALANCED", "ONE_WAY", "TWO_WAY"]


def confirmed(pattern: Pattern, theory_ratio: Optional[float]) -> Pattern:
    """PATTERN made sure by the gradient bytes the user or the markers gave: its theory, applied to the measured
    bytes, reads them within CONFIRMS (headers add up to 6 % in ip and wire modes; NCCL's FSDP read as DDP, 50 %)."""
    if theory_ratio is None or not CONFIRMS[0] <= theory_ratio <= CONFIRMS[1] or pattern.confidence >= 1.0:
        return pattern
    evidence = {**pattern.evidence, "theory_ratio": round(theory_ratio, 4)}  # the doubt, settled: said no more
    return Pattern(pattern.kind, pattern.formula.replace(NO_MESH_TEXT, ""), pattern.factor, 1.0, evidence)


def nccl_sharded(pattern: Pattern, theory_ratio: Optional[float], mesh: bool, w: int) -> Pattern:
    """A one-way ring without gloo's rank mesh whose bytes read 3/2 of DDP's theory with S known (the user's or the
    markers'): NCCL's sharded data parallel (FSDP full shard, ZeRO-3), its two all-gathers of the parameters and the
    gradients' reduce-scatter all one way round, 3(W-1)/W x S per rank; sure, as S settles it. Else PATTERN."""
    if (
        pattern.kind != "ring_allreduce"
        or mesh
        or theory_ratio is None
        or not CONFIRMS[0] <= theory_ratio / NCCL_SHARDED <= CONFIRMS[1]
    ):
        return pattern
    formula = (
        "sharded data parallel over NCCL (FSDP full shard, ZeRO-3): two all-gathers of (W-1)/W x S and the "
        "gradients' reduce-scatter of (W-1)/W x S, all one way round; 3(W-1)/W x S per rank per iteration, "
        "told from DDP's 2(W-1)/W x S by the S given"
    )
    evidence = {**pattern.evidence, "ring_allreduce_theory_ratio": round(theory_ratio, 4)}
    return Pattern("sharded_data_parallel", formula, 3 * (w - 1) / w, 1.0, evidence)


def pipeline_pattern(confidence: float, evidence: dict[str, Any]) -> Pattern:
    """The pattern of a job read as data-parallel groups joined by pipeline links (analyze.collective.groups):
    no one S for the job; each group carries its own theory."""
    return Pattern(
        kind="pipeline",
        formula="pipeline stages joined point to point (activations forward, their gradients back, per "
        "micro-batch), a data-parallel group per stage all-reducing that stage's gradients: no one S for the "
        "job; each group's own in topology.groups",
        factor=None,
        confidence=confidence,
        evidence={k: v for k, v in evidence.items() if v is not None},
    )

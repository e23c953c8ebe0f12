"""Recursive halving told from the host pairs' bytes: gloo's ReduceScatterHalvingDoubling, which Horovod's
hvd.reducescatter runs over gloo (and the first half of the all-reduce MPICH runs for large messages).

At step k each of W = 2^K ranks exchanges with the rank whose number differs from its own in bit k, sending half
of what it still holds: S/2 at the first step, S/4 at the second, ... S/W at the last, (W-1)/W x S in all. On the
wire the host pairs fall into K classes, each a perfect matching of the hosts, each class carrying half the bytes of
the class before, both ways alike; together they are the edges of a K-dimensional hypercube. That is read from the
bytes alone, and only from W = 8 on: at W = 4 the two classes form a cycle of four hosts whose halves carry 2:1,
which is also two pipeline stages of two replicas (analyze.collective.groups) and a two-way ring of unlike edges.

What it cannot tell is which collective halves: a reduce-scatter stops there ((W-1)/W x S per rank), an all-reduce
doubles back over the same pairs (2(W-1)/W x S). The pattern is half sure until S is known (the user's or the
markers'), whose ratio to the bytes settles it (settled).
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any, Callable, Optional

from analyze.model.findings import IterationRecord, Pattern

HALVES = (1.6, 2.5)  # consecutive classes' bytes within this ratio (2 in theory): else no halving
HALVES_SURE = (1.8, 2.2)  # within this ratio every step, and ALIKE_SURE, it is sure
ALIKE = 0.8  # a class's lightest pair carries at least this share of its heaviest
ALIKE_SURE = 0.9
BOTH_WAYS = 0.8  # each pair's lighter direction carries at least this share of its heavier
UNSURE = 0.6  # the shape's confidence where it fits, but outside the sure bands
REDUCE_SCATTER = (
    "reduce-scatter by recursive halving (gloo's ReduceScatterHalvingDoubling, Horovod's hvd.reducescatter over "
    "gloo): each rank sends S/2, S/4, ... S/W to the ranks whose numbers differ from its own in one bit, (W-1)/W x S "
    "per iteration"
)
OR_ALL_REDUCE = (
    "; an all-reduce that halves and then doubles back over the same pairs (MPICH's Rabenseifner) sends twice "
    "that: --gradient-bytes or markers settle which"
)
ALL_REDUCE = (
    "all-reduce by recursive halving and doubling (MPICH's Rabenseifner, gloo's AllreduceHalvingDoubling): a "
    "reduce-scatter that halves, then an all-gather that doubles back over the same pairs, 2(W-1)/W x S per rank "
    "per iteration, told from a reduce-scatter by the S given"
)
SETTLES = (0.97, 1.1)  # measured over theory bytes with S known that settle which collective halves


def hypercube(pairs: dict[tuple[str, str], float], start: Optional[str] = None) -> Optional[dict[str, Any]]:
    """The halving shape of PAIRS ((src, dst) -> bytes, a job's heavy directed edges), or None where they are not
    one: {order: the hosts by their number in the cube, classes: each step's host pairs, heaviest first, swaps:
    the pairs that put the blocks in rank order, ratios: each step's bytes per pair over the next's, alike: the
    least share of a step's lightest pair to its heaviest, confidence}.

    The last step's pairs carry S/W, as much as the pairs gloo adds after it: halving leaves rank p holding the
    block of the rank whose number is p's bits reversed, and the two swap blocks (never a cube edge: p and its
    reverse differ in an even number of bits). Those are the numbers that say which host is rank 0; where there
    are none, START (the first launched) is."""
    both: dict[frozenset[str], list[float]] = {}
    for (s, d), b in pairs.items():
        both.setdefault(frozenset((s, d)), []).append(float(b))
    hosts = sorted({h for p in both for h in p})
    n = len(hosts)
    k = int(round(math.log2(n))) if n else 0
    if n < 8 or 2**k != n or any(len(b) != 2 or min(b) < BOTH_WAYS * max(b) for b in both.values()):
        return None
    ranked = sorted(both, key=lambda p: -sum(both[p]))
    half = n // 2
    upper = [ranked[i * half : (i + 1) * half] for i in range(k - 1)]
    rest = ranked[(k - 1) * half :]  # the last step's pairs, and the swaps as heavy
    if not half <= len(rest) <= n or any(len({h for p in c for h in p}) != n for c in upper):
        return None  # each step pairs every host once
    weight = [[sum(both[p]) for p in c] for c in [*upper, rest]]
    alike = min(min(w) / max(w) for w in weight)
    mean = [sum(w) / len(w) for w in weight]
    ratios = [mean[i] / mean[i + 1] for i in range(k - 1)]
    if alike < ALIKE or not all(HALVES[0] <= r <= HALVES[1] for r in ratios):
        return None
    found = _numbering(upper, set(rest), hosts, start)
    if found is None:
        return None
    place, swaps = found
    sure = alike >= ALIKE_SURE and all(HALVES_SURE[0] <= r <= HALVES_SURE[1] for r in ratios)
    return {
        "order": sorted(hosts, key=lambda h: place[h]),
        "classes": [sorted(tuple(sorted(p)) for p in c) for c in upper]
        + [sorted(tuple(sorted(p)) for p in set(rest) - swaps)],
        "swaps": sorted(tuple(sorted(p)) for p in swaps),
        "ratios": [round(r, 3) for r in ratios],
        "alike": round(alike, 3),
        "confidence": 1.0 if sure else UNSURE,
    }


def _reversed(number: int, bits: int) -> int:
    return int(format(number, f"0{bits}b")[::-1], 2)


def _numbering(
    upper: list[list[frozenset[str]]], rest: set[frozenset[str]], hosts: list[str], start: Optional[str]
) -> Optional[tuple[dict[str, int], set[frozenset[str]]]]:
    """Each host's number in the cube and the swap pairs, or None where no numbering fits: UPPER's class k pairs
    numbers differing in bit k, REST holds the last bit's pairs and, beyond them, exactly the swaps of that
    numbering (or none). Every host is tried as 0 (START first), each of its REST pairs as its last-bit partner."""
    n, high = len(hosts), len(hosts) // 2
    bits = high.bit_length()
    partner = [{h: next(iter(p - {h})) for p in c for h in p} for c in upper]

    def number(root: str, base: int) -> Optional[dict[str, int]]:
        place, todo = {root: base}, [root]
        while todo:
            h = todo.pop()
            for bit, of in enumerate(partner):
                other, value = of[h], place[h] ^ (1 << bit)
                if other not in place:
                    place[other] = value
                    todo.append(other)
                elif place[other] != value:
                    return None
        return place if len(place) == high and len(set(place.values())) == high else None

    plain = None
    for zero in [start] + hosts if start in hosts else hosts:
        low = number(zero, 0)
        for p in [p for p in rest if zero in p] if low is not None else []:
            top = number(next(iter(p - {zero})), high)
            if top is None or set(top) & set(low or {}):
                continue
            place = {**(low or {}), **top}
            at = {v: h for h, v in place.items()}
            last = {frozenset((at[v], at[v ^ high])) for v in range(high)}
            swaps = rest - last
            if not last <= rest:
                continue
            if swaps == {frozenset((at[v], at[_reversed(v, bits)])) for v in range(n) if _reversed(v, bits) != v}:
                return place, swaps
            if not swaps and plain is None:
                plain = (place, swaps)
    return plain


def cube_sends(per_it: list[IterationRecord], order: list[str]) -> Optional[float]:
    """The median over every (iteration, host) of the bytes the host sent over its cube's pairs (ORDER: the hosts
    by their number, so a pair's numbers differ in one bit), (W-1)/W x S each; the swaps after the halving, S/W
    from half the ranks or so, left out."""
    sends = {  # each host's cube edges: to the hosts whose numbers differ from its own in one bit
        a: [f"{a}->{order[i ^ (1 << bit)]}" for bit in range(len(order).bit_length() - 1)] for i, a in enumerate(order)
    }
    vals = [sum(it.bytes_by_edge.get(key, 0) for key in keys) for it in per_it for keys in sends.values()]
    return float(median(vals)) if vals else None


def cube_step(order: list[str]) -> Callable[[Any], int]:
    """The step of a halving edge (anything with src and dst): the bit its ends' numbers differ in (ORDER: the
    hosts by their number), the last step's for the swaps after it, which carry as much."""
    place = {h: i for i, h in enumerate(order)}
    last = max(len(order).bit_length() - 2, 0)

    def step(edge: Any) -> int:
        differ = place.get(edge.src, 0) ^ place.get(edge.dst, 0)
        return differ.bit_length() - 1 if differ.bit_count() == 1 else last

    return step


def halving_pattern(w: int) -> Pattern:
    """The pattern of a halving shape over W ranks: a reduce-scatter's theory, half sure (module docstring)."""
    return Pattern(
        kind="reduce_scatter",
        formula=REDUCE_SCATTER + OR_ALL_REDUCE,
        factor=(w - 1) / w,
        confidence=0.5,
        evidence={},
    )


def settled(pattern: Pattern, theory_ratio: Optional[float], w: int) -> Pattern:
    """PATTERN, a halving reduce-scatter, made sure by the S given: its bytes read at its theory (a reduce-scatter)
    or at twice it (an all-reduce that doubles back, its own theory). Else PATTERN, still half sure."""
    if pattern.kind != "reduce_scatter" or theory_ratio is None:
        return pattern
    evidence = {**pattern.evidence, "reduce_scatter_theory_ratio": round(theory_ratio, 4)}
    if SETTLES[0] <= theory_ratio <= SETTLES[1]:
        return Pattern("reduce_scatter", REDUCE_SCATTER, pattern.factor, 1.0, evidence)
    if SETTLES[0] <= theory_ratio / 2 <= SETTLES[1]:
        return Pattern("halving_doubling_allreduce", ALL_REDUCE, 2 * (w - 1) / w, 1.0, evidence)
    return pattern


__all__ = ["hypercube", "cube_sends", "cube_step", "halving_pattern", "settled"]

"""Iterations from the collective's bytes: every iteration moves the same bytes on every edge.

Real training has no silence on the wire between iterations that is longer than the pauses inside one (DDP
overlaps its bucket all-reduces with the backward pass, Horovod negotiates all the time), and its step time
jitters with the CPU. What does not jitter is the byte count: each ring edge carries the same B bytes per
iteration, so its cumulative byte count is a staircase, and the pauses of the step (the forward pass, the
wait for a bucket) fall at the same byte offsets modulo B in every iteration. This module finds B from where
the pauses fall in bytes, not in time, so it is immune to step-time jitter and to each host's clock (offset
and drift change when a pause happens, never how many bytes came before it).

Per edge (on the clock of the host whose capture holds it): *pauses* are runs of bins below a quarter of
the edge's busy rate, each placed at the cumulative byte count after its first bin (which mostly holds the
tail of the send before it). Candidate periods are the byte distances between heavy pauses; the comb (how
well the pauses' phases line up at a period, summed over edges) picks the longest strong one. At a
sub-multiple B/m the pauses line up too, so the teeth of that lattice are split by index mod m: when one
class is surely heavier than the others (a forward pass at one, bucket waits at the rest; a permutation
test), the period is m times longer, and the step repeats from there. Each edge's teeth are then walked
through the capture (each tooth the candidate nearest the prediction, a tooth put where the prediction says
when no pause is near), a line c0 + k x B fitted through them and the walk repeated against it. An iteration
is the traffic between two consecutive teeth; bytes before the first and after the last (rendezvous, the
parameter broadcast, teardown) are no iteration.

How sure it is (`confidence`, 0..1) is the product of checks that a wrong answer fails (`_confidence`): no
sub-multiple of the period as good, every edge agreeing on the count, equal bytes between teeth, teeth on
real pauses, teeth keeping a steady time offset between edges (the same iteration seen on different
clocks), little busy traffic outside the teeth, at least three iterations of at least six bins.
tests/collective/test_staircase.py checks on randomized series that every answer at >= CONFIDENT is right.
"""

from __future__ import annotations


from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import numpy as np

from analyze.confidence.thresholds import SURE_STEP_BINS


LOW_FRACTION = 0.25  # a bin below this share of the edge's busy rate (its p90 bin) is part of a pause
TOOTH_TOLERANCE = 0.12  # a tooth is the pause within this share of B from where the comb predicts it
SHORT_END = 0.3  # the end of an edge's traffic closes its last iteration when that is short by up to this share
MAX_HARMONIC = 12  # sub-multiples B/m, m <= this, are weighed against B (Horovod fuses 7-12 all-reduces)
MAX_PAUSES = 4000  # pauses kept per edge for the comb (the longest): bounds the candidate search
ANCHORS = 6  # the heaviest pauses tried as the lattice's pin, beside the comb's phase
ANCHOR_STEPS = 40  # teeth each way on which a pin is judged
HARMONIC_EDGES = 4  # edges (the most paused) that judge the harmonics: every edge carries the same steps
COMB_EDGES = 8  # and that the comb lines up
COMB_BLOCK = 256  # candidate periods scored at once (x up to MAX_PAUSES pauses: 16 MB of phases)
HARMONIC_TEETH = 400  # and only the first periods of each, so a long run costs no more than a short one
FEW_ROUNDS_GAP = 5.0  # spreads a class of teeth seen under three times must stand out by (_untested_longer)
# A class of teeth is measured against at least this share of the median tooth: a forward pass and a bucket wait
# differ by 15 % and more (the synthetic cases below stand out by 3 bins in 20), while one 300 ms pause of gloo's
# five 4.5 ms longer under load read as 7 spreads at 1 ms bins and 17 at 0.5 ms, the count's sureness 0.00 at
# either, where at 2 ms it was 3 and sure (a judgment that moved with the bin; issue 45).
SPREAD_FLOOR = 0.02
SURE_CLASSES = 0.99  # classes of teeth this surely different make the period m times longer
CLASS_GAP = 1.3  # edges whose bytes differ by this factor are read as byte classes of their own as well
MAX_DENSE_BINS = 1 << 20  # an edge spanning more bins is read on coarser ones: its arrays stay under ~50 MB


@dataclass
class EdgeSeries:
    """One directed edge's bytes per bin (ascending, sparse), on the clock of `view` (the capturing host)."""

    src: str
    dst: str
    view: str
    t_ns: np.ndarray
    nbytes: np.ndarray


@dataclass
class Pauses:
    """An edge's pauses: byte offset where each starts, weight (idle bins), start and end time."""

    pos: np.ndarray
    weight: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    total: float
    first_pos: float  # bytes before the first busy bin, and up to the end of the last one
    last_pos: float
    first_ns: int  # start of the first busy bin, end of the last one
    last_ns: int
    bin_ns: int
    cum: np.ndarray  # cumulative bytes at the end of each bin that holds bytes (sparse: the dense series is
    cum_bin: np.ndarray  # dropped after pauses(), so a long capture keeps no per-bin array per edge)
    first_bin_ns: int  # cum_bin counts bins from here


@dataclass
class EdgeCuts:
    """Where one edge's iterations start and end (tooth times, on that edge's view clock)."""

    src: str
    dst: str
    view: str
    cut_ns: np.ndarray  # count + 1 boundaries: iteration k is [cut_ns[k], cut_ns[k + 1])
    bytes_per_iteration: np.ndarray
    found: np.ndarray  # per tooth: a real pause (True) or only where the comb predicted it
    left_over: float = 0.0  # busy bytes before the first tooth and after the last, in iterations
    bin_ns: int = 0  # the bins the teeth were found on


@dataclass
class Staircase:
    """The inferred iterations: the count, the bytes per edge per iteration and how sure it is."""

    count: int = 0
    period_bytes: float = 0.0
    confidence: float = 0.0
    edges: list[EdgeCuts] = field(default_factory=list)
    evidence: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def pauses(edge: EdgeSeries, bin_ns: int) -> Optional[Pauses]:
    """The edge's pauses between its first and last busy bin (None when it has too little traffic).

    Positions count every byte before the pause, set-up and trickles included, so they are the edge's own
    cumulative byte count. A pause's weight is its idle share summed over its bins (a half-full bin: 0.5).
    """
    t, b = edge.t_ns, edge.nbytes.astype(np.float64)
    if len(t) < 3 or b.sum() <= 0:
        return None
    span = (int(t[-1]) - int(t[0])) // bin_ns + 1
    bin_ns *= -(-span // MAX_DENSE_BINS)
    first = int(t[0]) // bin_ns
    idx = t // bin_ns - first
    dense = np.bincount(idx, weights=b, minlength=int(idx[-1]) + 1)
    ref = float(np.percentile(dense[dense > 0], 90))
    low = dense < LOW_FRACTION * ref
    busy = np.nonzero(~low)[0]
    lo, hi = int(busy[0]), int(busy[-1]) + 1  # the busy span: trickles before and after are no pause
    before = np.concatenate([[0.0], np.cumsum(dense)])
    filled = np.flatnonzero(dense > 0)
    runs = np.diff(np.concatenate([[0], low[lo:hi].astype(np.int8), [0]]))
    starts, ends = np.nonzero(runs == 1)[0] + lo, np.nonzero(runs == -1)[0] + lo
    deficit = np.concatenate([[0.0], np.cumsum(1.0 - np.minimum(dense, ref) / ref)])
    # a send rarely starts or ends on a bin edge: the low bin just before the busy span holds its first bytes,
    # the one after it (and the first bin of every pause) its last
    head = lo - 1 if lo > 0 and dense[lo - 1] > 0 else lo
    tail = hi + 1 if hi < len(dense) else hi
    return Pauses(
        pos=before[starts + 1],
        weight=deficit[ends] - deficit[starts],
        start_ns=(first + starts) * bin_ns,
        end_ns=(first + ends) * bin_ns,
        total=float(before[-1]),
        first_pos=float(before[head]),
        last_pos=float(before[tail]),
        first_ns=(first + head) * bin_ns,
        last_ns=(first + tail) * bin_ns,
        bin_ns=bin_ns,
        cum=before[filled + 1],
        cum_bin=filled,
        first_bin_ns=first * bin_ns,
    )


def _capped(p: Pauses) -> tuple[np.ndarray, np.ndarray]:
    """Positions and weights for the comb: the longest MAX_PAUSES pauses, weights capped at the upper
    quartile so one long stall (a rendezvous, a retransmission timeout) cannot outweigh the rest."""
    pos, w = p.pos, p.weight
    if len(w) > MAX_PAUSES:
        keep = np.sort(np.argsort(w)[-MAX_PAUSES:])
        pos, w = pos[keep], w[keep]
    cap = float(np.percentile(w, 75)) if len(w) else 0.0
    return pos, np.minimum(w, max(cap, 1e-9))


def comb_score(parts: list[tuple[np.ndarray, np.ndarray]], period: np.ndarray) -> np.ndarray:
    """How well the pauses line up at each candidate byte period: per edge the length of the weighted mean
    phase vector, summed over edges weighted by their pause weight (1: every pause at one phase)."""
    num = np.zeros(len(period))
    den = 0.0
    for pos, w in parts:
        if not len(pos):
            continue
        for a in range(0, len(period), COMB_BLOCK):  # a block of periods x pauses at a time: bounded memory
            phase = np.exp(2j * np.pi * pos[None, :] / period[a : a + COMB_BLOCK, None])
            num[a : a + COMB_BLOCK] += np.abs(phase @ w)
        den += float(w.sum())
    return num / den if den else num


def _candidates(parts: list[tuple[np.ndarray, np.ndarray]], lo: float, hi: float) -> np.ndarray:
    """Candidate periods: byte distances between heavy pauses and their next few successors (a true period
    and its multiples and sub-multiples all show up as such distances), clustered on a 1 % log grid."""
    gaps = []
    for pos, w in parts:
        heavy = pos[w >= np.percentile(w, 50)] if len(w) else pos
        heavy = heavy[-600:] if len(heavy) > 600 else heavy
        for k in range(1, 9):
            if len(heavy) > k:
                gaps.append(heavy[k:] - heavy[:-k])
    if not gaps:
        return np.zeros(0)
    d = np.concatenate(gaps)
    d = d[(d >= lo) & (d <= hi)]
    if not len(d):
        return np.zeros(0)
    cells = np.unique(np.round(np.log(d) / 0.01))
    return np.exp(cells * 0.01)


def _refine(parts: list[tuple[np.ndarray, np.ndarray]], period: float, span: float) -> tuple[float, float]:
    """The best period within +-2 % of `period`, on a grid fine enough that the phase of the last tooth
    moves by at most 1/50 of a turn between points."""
    teeth = max(span / period, 1.0)
    step = period / (50 * teeth)
    grid = np.arange(period * 0.98, period * 1.02, max(step, period * 1e-5))
    s = comb_score(parts, grid)
    k = int(np.argmax(s))
    return float(grid[k]), float(s[k])


def track(p: Pauses, period: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Follow the teeth through one edge. Start at the heaviest pause on the comb's phase and step by the
    period both ways, each tooth the candidate within TOOTH_TOLERANCE of the prediction that is nearest to
    it (heavier pauses win near-ties); where no pause is near, the tooth is put where the prediction says
    and the walk goes on. Then a line is fitted through the real teeth (c0 + k x B) and the walk repeated
    against it. The start and end of the busy traffic are candidates too: an edge that carries no set-up
    bytes starts with iteration 0's own bytes. Returns tooth byte positions, times (a pause's first bin's
    end: the bytes that ended the iteration arrived in it; for a tooth without a pause, where the edge's
    bytes crossed that count) and whether a real pause was found there."""
    if not len(p.pos):
        return np.zeros(0), np.zeros(0, np.int64), np.zeros(0, bool)
    pos = np.concatenate([p.pos, [p.first_pos, p.last_pos]])
    when = np.concatenate([np.minimum(p.start_ns + p.bin_ns, p.end_ns), [p.first_ns, p.last_ns]])
    real = np.concatenate([np.ones(len(p.pos), bool), [False, False]])
    pc, wc = _capped(p)
    w = np.concatenate([np.minimum(p.weight, wc.max()), [wc.max(), wc.max()]]) / max(float(wc.max()), 1e-9)
    phase = np.angle(np.exp(2j * np.pi * pc / period) @ wc)
    dist = np.abs(np.angle(np.exp(2j * np.pi * p.pos / period - 1j * phase))) / (2 * np.pi)
    # where the lattice is pinned: the heaviest pause on the comb's phase, or one of the heaviest pauses
    # (at a sub-multiple the many bucket waits can set the phase and leave every forward pass off the
    # lattice); the lattice that takes in the most pause weight wins (weights clipped at the 95th
    # percentile: one long stall is no better a tooth than a forward pass)
    anchors = {int(np.argmax(np.where(dist <= TOOTH_TOLERANCE, p.weight, -1.0)))}
    anchors.update(np.argsort(p.weight)[-ANCHORS:].tolist())
    order = np.argsort(pos, kind="stable")  # candidates by position, for the walk's binary searches
    pos, when, real, w = pos[order], when[order], real[order], w[order]
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    clip = np.minimum(np.concatenate([p.weight, [0.0, 0.0]])[order], np.percentile(p.weight, 95)).tolist()
    pos_list, w_list = pos.tolist(), w.tolist()
    best = -1.0
    for a in sorted(anchors):  # judged on up to ANCHOR_STEPS teeth each way: a long run costs no more
        walked = _walk(p, pos_list, w_list, int(rank[a]), period, max_steps=ANCHOR_STEPS)
        caught = sum(clip[k] for k, _ in walked if k >= 0)
        if caught > best:
            best, anchor = caught, int(rank[a])
    teeth = _walk(p, pos_list, w_list, anchor, period)
    found = np.array([k >= 0 and real[k] for k, _ in teeth])
    if int(found.sum()) >= 3:
        # the lattice through the teeth found: every tooth judged against c0 + k x B, not against the tooth
        # before it (an early pick there would make the next one late, and the bytes alternate)
        at = np.array([x for _, x in teeth])
        k = np.round((at - pos[anchor]) / period)
        slope, offset = np.polyfit(k[found], at[found], 1)
        teeth = _walk(p, pos_list, w_list, anchor, float(slope), float(offset))
    at = np.array([x for _, x in teeth])
    k = np.array([k for k, _ in teeth], dtype=np.int64)
    t = np.where(k >= 0, when[np.maximum(k, 0)], _crossing(p, at)).astype(np.int64)
    return at, t, (k >= 0) & real[np.maximum(k, 0)]


def _walk(
    p: Pauses,
    pos: list[float],
    w: list[float],
    anchor: int,
    period: float,
    offset: Optional[float] = None,
    max_steps: int = 1 << 62,
) -> list[tuple[int, float]]:
    """Teeth (candidate index into `pos`, which is ascending, or -1 where none was near; byte position),
    ascending, from `anchor` one step of `period` at a time both ways while inside the busy traffic: each
    prediction the previous tooth + period, or with `offset` the lattice point offset + k x period (k = 0
    at anchor). Plain lists and bisect: a step is a few hundred ns, where numpy's scalar calls took µs."""
    tol = TOOTH_TOLERANCE * period
    teeth = [(anchor, pos[anchor])]
    lo_end, hi_end = p.first_pos - tol, p.last_pos + tol
    for direction in (1, -1):
        here, k = pos[anchor], 0
        while True:
            k += direction
            want = here + direction * period if offset is None else offset + k * period
            if direction == 1 and hi_end < want <= p.last_pos + SHORT_END * period and abs(k) <= max_steps:
                # the last iteration ended short: the next step's first sends, which this edge made before the
                # step's pause every other time, never came (a rank late into every step; the run then ended)
                j = bisect_left(pos, p.last_pos)
                teeth.append((j, pos[j]))
                break
            if want < lo_end or want > hi_end or abs(k) > max_steps:
                break
            a, b = bisect_left(pos, want - tol), bisect_right(pos, want + tol)
            if b > a:
                j = a if b - a == 1 else min(range(a, b), key=lambda i: abs(pos[i] - want) / tol - 0.3 * w[i])
                teeth.append((j, pos[j]))
            else:
                teeth.append((-1, want))
            here = teeth[-1][1]
    teeth.sort(key=lambda x: x[1])
    # two predictions can land on one candidate (a short pause near both): keep it once
    return [x for i, x in enumerate(teeth) if i == 0 or x[0] < 0 or x[0] != teeth[i - 1][0]]


def _crossing(p: Pauses, at: np.ndarray) -> np.ndarray:
    """When the edge's cumulative bytes reached each of `at` (the end of the bin they reached it in)."""
    k = np.minimum(np.searchsorted(p.cum, at, side="left"), len(p.cum) - 1)
    return p.first_bin_ns + (p.cum_bin[k].astype(np.int64) + 1) * p.bin_ns


def _harmonic_teeth(pauses_: list[Pauses], period: float) -> list[np.ndarray]:
    """The pause weight at each tooth of the `period` lattice (_tooth_weights) over the first HARMONIC_TEETH periods
    of the HARMONIC_EDGES most paused edges: what the class tests read. Tracked once per period: _fundamental
    tests eleven m on the same teeth (tracking them anew for each took 0.6 s of a 512-host analysis)."""
    return [
        _tooth_weights(_head(p, HARMONIC_TEETH * period), period)
        for p in sorted(pauses_, key=lambda q: -float(q.weight.sum()))[:HARMONIC_EDGES]
    ]


def _separation(teeth: list[np.ndarray], m: int) -> tuple[float, float]:
    """How surely the TEETH (_harmonic_teeth of a lattice) fall into m classes (tooth index mod m) by pause weight,
    and the share of teeth that sit on a real pause; medians over the edges. The statistic is the gap
    between the heaviest class's mean weight and the next one's, over the pooled spread inside classes;
    its sureness is the share of 200 random relabellings of the same teeth that give a smaller gap (a
    forward pass at one class and bucket waits at the others: 1; classes alike: about 0.5 or less). A
    heaviest class under 1.5x the next counts as alike whatever the test says."""
    seps, cover = [], []
    rng = np.random.default_rng(0)  # the same answer for the same capture
    for w in teeth:
        if len(w) < 3 * m:
            continue
        cover.append(float(np.mean(w > 0)))
        n = len(w) - len(w) % m  # whole rounds of m teeth
        if np.ptp(w[:n]) <= 0:
            seps.append(0.0)
            continue
        observed, distinct = _class_gap(w[None, :n], m)
        shuffled, _ = _class_gap(rng.permuted(np.tile(w[:n], (200, 1)), axis=1), m)
        seps.append(float(np.mean(shuffled < observed[0])) if distinct[0] else 0.0)
    if not seps:
        return 0.0, 0.0
    return float(np.median(seps)), float(np.median(cover))


def _class_gap(w: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of teeth weights: how far the one class that stands out (the heaviest, or the lightest) is from
    the next class mean, over the pooled sd; and whether it stands out by 1.5x. A forward pass longer than
    the bucket waits makes one class heavy; shorter, one class light: either way the iteration is m teeth
    long. (A smaller difference, clear of the noise, leaves the count unsure instead: _untested_longer.)"""
    ordered = np.sort(_class_means(w, m), axis=1)
    classes = w.reshape(len(w), -1, m)  # [row, round, class]
    spread = np.sqrt(classes.var(axis=1).mean(axis=1)) + 1e-9
    heavy, light = ordered[:, -1] - ordered[:, -2], ordered[:, 1] - ordered[:, 0]
    distinct = (ordered[:, -1] > 1.5 * ordered[:, -2]) | (ordered[:, 1] > 1.5 * ordered[:, 0])
    return np.maximum(heavy, light) / spread, distinct


def _class_means(w: np.ndarray, m: int) -> np.ndarray:
    """Mean tooth weight of each class (tooth index mod m), per row of whole rounds."""
    return w.reshape(len(w), -1, m).mean(axis=1)


def _repeats(p: Pauses, lag: float, tol: Optional[float] = None, horizon: Optional[float] = None) -> float:
    """The share of the edge's pause weight (of pauses `horizon`, by default one lag, before the end) that finds a
    pause one `lag` of bytes later, within `tol` (2 % of the lag): how fully the whole pattern of pauses repeats,
    not only its strongest one. Any pause will do, whatever its weight: on real runs a wait's length varies too
    much between iterations to ask for its like (asking for it spread real runs' differences from -0.6 to +0.4).
    The lag is the bytes between the iterations' cuts, not the comb's lattice step, which may sit a few percent
    off."""
    order = np.argsort(p.pos)
    pos, weight = p.pos[order], p.weight[order]
    asked = pos + (lag if horizon is None else horizon) <= p.last_pos
    if not asked.any() or weight[asked].sum() <= 0:
        return 0.0
    tol = 0.02 * lag if tol is None else tol
    k = np.searchsorted(pos, pos[asked] + lag - tol)
    found = (k < len(pos)) & (pos[np.minimum(k, len(pos) - 1)] <= pos[asked] + lag + tol)
    return float(weight[asked][found].sum() / weight[asked].sum())


def _longer_repeats(pauses_: list[Pauses], period: float, count: int) -> float:
    """1 when a period m times longer repeats the whole pattern of pauses clearly better than `period` on the median
    edge: pauses that all weigh the same, one of them about half way through the iteration, line up a comb at half
    the period as well as at the period, but only the period brings every other pause back. Else 0. `period` is the
    mean of the bytes between cuts, not their median: m of them make the longer period whole where its parts
    differ (two iterations of buckets 0.37, 0.12, 0.47 and 0.04, read as four: twice the median of 0.49 missed
    every pause a period later by a hair over 2 %).

    Both lags are asked of the same pauses, those m periods before the end: the pauses of the last m - 1 periods,
    asked only of the shorter lag, tipped it (six ranks on two cores stalled four times in the last iteration: 0.59
    at the period against 0.85 at four times it; asked of the same pauses, 0.83 against 0.85). Halves (m = 2) are
    matched within 2 % of the period, as a half-period's pauses are dense and a wider window finds them by chance;
    from m = 3 on both within m x 2 %, as the parts of a longer period differ by a few percent. Clearly is by a
    fifth of the pause weight: on 25 real DDP and Horovod runs of 6-12 steps the differences reach +0.18 (m = 6 of
    12 on Horovod), by chance."""
    edges = sorted(pauses_, key=lambda q: -float(q.weight.sum()))[:HARMONIC_EDGES]
    for m in range(2, MAX_HARMONIC + 1):
        if count // m < 2:
            continue
        tol = 0.02 * (1 if m == 2 else m) * period
        here = float(np.median([_repeats(p, period, tol, m * period) for p in edges]))
        longer = float(np.median([_repeats(p, m * period, tol) for p in edges]))
        if longer > here + 0.2:
            return 1.0
    return 0.0


def _untested_longer(pauses_: list[Pauses], period: float, count: int) -> float:
    """1 when a period m times longer (m dividing the count) is not ruled out: one class of teeth stands out
    from the next by three times the spread inside classes (at least half a bin), which _fundamental would
    have taken as the iteration had its class test been sure. It is not when the teeth are few (two
    iterations of three buckets show six steps) or many tie (three light teeth among twelve: 4 of 220
    relabellings split them the same way, so the test tops out at 0.98). Only more iterations could tell.
    Classes seen fewer than three times must stand out by FEW_ROUNDS_GAP spreads: one of five classes seen twice
    stood out by 4.4 on a clean 15-step DDP run, one of six seen once or twice by 3.3 on Horovod, both right and
    then unsure at 0.00 (on one clock; on another, sure), where the synthetic cases this test exists for stand
    out by 6 and 8. With four rounds of m teeth or more, the class must also stand out, the same one and the same
    way, in each half of them: a real longer iteration repeats all through, while noise (the many m and edges
    tried) can make some class stand out once. A longer period must fit the capture twice, as _longer_repeats asks:
    at m = count one stall stands out of the run as one class seen once (Horovod, 3 hosts x 2 ranks: a 376-bin
    pause after the first of 12 steps, 193 spreads, left three of five right captures of 12 at 0.00). Else 0."""
    for w in _harmonic_teeth(pauses_, period):
        for m in range(2, MAX_HARMONIC + 1):
            if count % m or count // m < 2 or len(w) < m + 1:
                continue  # m does not divide the count, the longer period would not repeat, or no class is seen twice
            which, gap = _standing_out(w, m)
            if gap <= (3 if len(w) >= 3 * m else FEW_ROUNDS_GAP):
                continue
            half = (len(w) // m // 2) * m
            if half >= 2 * m:
                halves = [_standing_out(part, m) for part in (w[:half], w[half : 2 * half])]
                if any(k != which or z <= 3 for k, z in halves):
                    continue
            return 1.0
    return 0.0


def _standing_out(w: np.ndarray, m: int) -> tuple[tuple[int, int], float]:
    """The class of teeth (index mod m) that stands out from the next, heaviest (+1) or lightest (-1), and by how
    many spreads inside the classes: at least half a bin (weights are idle bins, half a bin is their grain) and
    SPREAD_FLOOR of the median tooth, so a difference in time reads as the same number of spreads at any bin."""
    classes = [w[k::m] for k in range(m)]
    means = np.array([c.mean() for c in classes])
    order = np.argsort(means, kind="stable")
    within = [c - c.mean() for c in classes if len(c) > 1]
    rms = float(np.sqrt(np.mean(np.concatenate(within) ** 2))) if within else 0.0
    spread = max(rms, 0.5, SPREAD_FLOOR * float(np.median(w)))
    heavy, light = means[order[-1]] - means[order[-2]], means[order[1]] - means[order[0]]
    if heavy >= light:
        return (int(order[-1]), 1), float(heavy / spread)
    return (int(order[0]), -1), float(light / spread)


def _head(p: Pauses, nbytes: float) -> Pauses:
    """The first `nbytes` of an edge's busy traffic, as a Pauses of its own."""
    if p.last_pos - p.first_pos <= nbytes:
        return p
    end = p.first_pos + nbytes
    keep = p.pos <= end
    k = min(int(np.searchsorted(p.cum, end, side="left")), len(p.cum) - 1)
    return Pauses(
        pos=p.pos[keep],
        weight=p.weight[keep],
        start_ns=p.start_ns[keep],
        end_ns=p.end_ns[keep],
        total=float(p.cum[k]),
        first_pos=p.first_pos,
        last_pos=end,
        first_ns=p.first_ns,
        last_ns=p.first_bin_ns + (int(p.cum_bin[k]) + 1) * p.bin_ns,
        bin_ns=p.bin_ns,
        cum=p.cum,
        cum_bin=p.cum_bin,
        first_bin_ns=p.first_bin_ns,
    )


def _fundamental(pauses_: list[Pauses], period: float) -> float:
    """The period of the iteration given one that lines the pauses up: m x `period` when the teeth split
    into m clearly different classes (the comb lines up at every sub-multiple of the true period whose
    teeth all carry a pause, so `period` may be one)."""
    while True:  # from B/20 the first step may reach only B/2 (m <= MAX_HARMONIC): step again from there
        best_m, best_sep = 1, SURE_CLASSES
        teeth = _harmonic_teeth(pauses_, period)
        for m in range(2, MAX_HARMONIC + 1):
            sep, _ = _separation(teeth, m)
            if sep > best_sep:
                best_m, best_sep = m, sep
        if best_m == 1:
            return period
        period *= best_m


def _ambiguity(pauses_: list[Pauses], period: float) -> float:
    """How well a sub-multiple period/m would do instead: its teeth all on pauses, in classes that look
    alike (then the iteration may be m times shorter). 0: clearly not; 1: as good as `period`."""
    worst = 0.0
    for m in range(2, 5):
        sep, cover = _separation(_harmonic_teeth(pauses_, period / m), m)
        worst = max(worst, cover * (1.0 - sep))
    return worst


def _tooth_weights(p: Pauses, period: float) -> np.ndarray:
    """Pause weight at each tooth (0 where the comb predicted a tooth and no pause was there), without the
    teeth at the ends that are only the start or end of the traffic."""
    tpos, _, real = track(p, period)
    lookup = dict(zip(p.pos.tolist(), p.weight.tolist()))  # a tooth on a real pause sits at its exact position
    w = np.array([lookup.get(x, 0.0) if r else 0.0 for x, r in zip(tpos.tolist(), real.tolist())])
    on = np.nonzero(real)[0]
    return w[on[0] : on[-1] + 1] if len(on) else w[:0]


def widened(edges: list[EdgeSeries], width_ns: int) -> list[EdgeSeries]:
    """The edges' series in bins WIDTH_NS wide (a multiple of theirs), each at its start time, bytes summed."""
    out = []
    for e in edges:
        times, inverse = np.unique(e.t_ns // width_ns * width_ns, return_inverse=True)
        out.append(replace(e, t_ns=times, nbytes=np.bincount(inverse, weights=e.nbytes, minlength=times.size)))
    return out


def infer(
    edges: list[EdgeSeries],
    bin_ns: int,
    count_hint: Optional[int] = None,
    bytes_hint: Optional[tuple[float, float]] = None,
    step: Optional[Callable[[EdgeSeries], int]] = None,
) -> Staircase:
    """The iterations of the edges' traffic. count_hint (the user's --iterations) or bytes_hint (a range of
    bytes per edge per iteration, from --gradient-bytes) restrict the periods searched.

    Edges that fall into byte classes (CLASS_GAP apart, two edges or more each: FSDP's SHARD_GRAD_OP sends twice
    the bytes one way round the ring as the other) are also read class by class: one period in bytes cannot fit
    both, and read at the lighter class's the heavier edges count each iteration twice. Where every class finds
    the same count, the classes' reading stands when it is surer than the whole's. STEP, where the shape knows
    each edge's share of an iteration (a halving's steps: S/2, S/4, ...), gives the classes instead of the edges'
    bytes, which a set-up's broadcast on some of them blurs; where they agree theirs is the reading, as one period
    in bytes cannot fit steps that carry S/2 and S/W alike."""
    whole = _infer(edges, bin_ns, count_hint, bytes_hint)
    classes = _byte_classes(edges) if step is None else _step_classes(edges, step)
    if len(classes) < 2:
        return whole
    each = [_infer(c, bin_ns, count_hint) for c in classes]
    if not all(st.count for st in each) or len({st.count for st in each}) != 1:
        return whole
    merged = _merged(each)
    return merged if merged.confidence > whole.confidence or step is not None else whole


def _byte_classes(edges: list[EdgeSeries]) -> list[list[EdgeSeries]]:
    """EDGES split where their bytes (ascending) jump by CLASS_GAP or more, when every class has two edges or
    more; else one class. A single heavier edge (a copy beside the job) is no class of its own."""
    totals = sorted(((float(e.nbytes.sum()), i) for i, e in enumerate(edges)), key=lambda x: x[0])
    cuts = [k for k in range(1, len(totals)) if totals[k][0] >= CLASS_GAP * max(totals[k - 1][0], 1.0)]
    bounds = [0, *cuts, len(totals)]
    classes = [[edges[i] for _, i in totals[lo:hi]] for lo, hi in zip(bounds[:-1], bounds[1:])]
    return classes if len(classes) > 1 and min(len(c) for c in classes) >= 2 else [edges]


def _step_classes(edges: list[EdgeSeries], step: Callable[[EdgeSeries], int]) -> list[list[EdgeSeries]]:
    """EDGES by their STEP, where every step has two edges or more; else one class."""
    by: dict[int, list[EdgeSeries]] = {}
    for e in edges:
        by.setdefault(step(e), []).append(e)
    classes = [by[k] for k in sorted(by)]
    return classes if len(classes) > 1 and min(len(c) for c in classes) >= 2 else [edges]


def _merged(each: list[Staircase]) -> Staircase:
    """Byte classes that agree on the count as one reading: every class's edges, each check at its worst class."""
    worse_high = ("sub_multiple_ambiguity", "longer_period_untested", "left_over", "bytes_spread")
    keys = set.intersection(*(set(st.evidence) for st in each))
    evidence = {k: (max if k in worse_high else min)(st.evidence[k] for st in each) for k in sorted(keys)}
    count = each[0].count
    heaviest = max(each, key=lambda st: st.period_bytes)
    ratio = heaviest.period_bytes / max(min(st.period_bytes for st in each), 1.0)
    notes = [
        f"the edges fall into {len(each)} byte classes (the heaviest carries {ratio:.2f} x the lightest's bytes "
        f"per iteration), read class by class: each finds {count} iterations",
        *[n for st in each for n in st.notes],
    ]
    return Staircase(
        count=count,
        period_bytes=heaviest.period_bytes,
        confidence=_confidence(evidence, count),
        edges=[c for st in each for c in st.edges],
        evidence=evidence,
        notes=notes,
    )


def _infer(
    edges: list[EdgeSeries],
    bin_ns: int,
    count_hint: Optional[int] = None,
    bytes_hint: Optional[tuple[float, float]] = None,
) -> Staircase:
    """One reading of the edges' iterations: one period in bytes for them all (infer's)."""
    out = Staircase()
    found: list[tuple[EdgeSeries, Pauses]] = []
    for e in edges:
        p = pauses(e, bin_ns)
        if p is not None and len(p.pos):
            found.append((e, p))
    if not found:
        out.notes.append("the collective's traffic never pauses: no iteration structure to find")
        return out
    pauses_ = [p for _, p in found]
    # every edge carries the same steps: the comb reads the most paused few, so many hosts cost no more
    parts = [_capped(p) for p in sorted(pauses_, key=lambda q: -float(q.weight.sum()))[:COMB_EDGES]]
    span = float(np.median([p.total for p in pauses_]))
    lo, hi = span / 5000, span / 2
    if count_hint:
        lo, hi = span / (count_hint + 2), span / max(count_hint - 1, 1)
    if bytes_hint:
        lo, hi = max(lo, bytes_hint[0]), min(hi, bytes_hint[1])
    cands = _candidates(parts, lo, hi)
    if bytes_hint and lo <= hi:
        cands = np.concatenate([cands, np.geomspace(lo, hi, 25)])
    if not len(cands):
        out.notes.append("the pauses in the collective's traffic do not repeat")
        return out
    score = comb_score(parts, cands)
    # the longest period that lines the pauses up nearly as well as the best (its sub-multiples do too)
    strong = cands[score >= 0.85 * score.max()]
    period, top = _refine(parts, float(strong.max()), span)
    period = _fundamental(pauses_, period)
    if lo <= period <= hi:
        period, top = _refine(parts, period, span)
    else:  # the anchors bound the period: the fundamental found outside them is not taken
        period, top = _refine(parts, float(np.clip(period, lo, hi)), span)
    cuts = []
    for e, p in found:
        tpos, tns, real = track(p, period)
        if len(tpos) >= 2:
            left = (tpos[0] - p.first_pos + p.last_pos - tpos[-1]) / period
            cuts.append(EdgeCuts(e.src, e.dst, e.view, tns, np.diff(tpos), real, float(left), p.bin_ns))
    if not cuts:
        out.notes.append("fewer than two iterations' worth of repeating pauses on any edge")
        return out
    counts = np.array([len(c.cut_ns) - 1 for c in cuts])
    count = int(np.bincount(counts).argmax())
    cuts = _set_up_trimmed(cuts, count)
    counts = np.array([len(c.cut_ns) - 1 for c in cuts])
    agree = float(np.mean(counts == count))
    same = [c for c in cuts if len(c.cut_ns) - 1 == count]
    per_edge = np.concatenate([c.bytes_per_iteration for c in same])
    spread = _bytes_spread(same)
    # per boundary, a real pause on some edge: a link another job or a copy keeps busy hides its own edge's pauses
    # (a copy beside DDP: 80 % of the boundaries on real pauses over all edges, 100 % on some edge; a wrong period
    # misses them on every edge alike)
    interior = np.any(np.stack([c.found[1:-1] for c in same]), axis=0)
    coverage = float(np.mean(interior)) if np.size(interior) else 0.0
    steady = _steady_offsets(same)
    ambiguity = _ambiguity(pauses_, period)
    step_bins = float(np.median(np.concatenate([np.diff(c.cut_ns) for c in same]))) / pauses_[0].bin_ns
    out.count, out.period_bytes, out.edges = count, float(np.median(per_edge)), same
    out.evidence = {
        "comb_score": round(top, 3),
        "sub_multiple_ambiguity": round(ambiguity, 3),
        "longer_period_untested": max(
            _untested_longer(pauses_, period, count), _longer_repeats(pauses_, float(np.mean(per_edge)), count)
        ),
        "left_over": round(float(np.median([c.left_over for c in same])), 3),
        "bins_per_iteration": round(step_bins, 1),
        "edges_agreeing": round(agree, 3),
        "bytes_spread": round(spread, 4),
        "teeth_on_pauses": round(coverage, 3),
        "steady_clock_offsets": round(steady, 3),
    }
    out.confidence = _confidence(out.evidence, count)
    out.notes.append(
        f"iterations found in the bytes: every {out.period_bytes:,.0f} B per ring edge the pauses "
        f"repeat ({len(cuts)} edges, {agree:.0%} agreeing on {count}); bytes per iteration vary by "
        f"{spread:.2%}; {coverage:.0%} of boundaries on a real pause"
    )
    return out


def _bytes_spread(cuts: list[EdgeCuts]) -> float:
    """How much an edge's bytes per iteration vary, as a share: 1.4826 x the median absolute deviation from the
    edge's own median (the standard deviation where the variation is normal), the median over the edges. Robust to
    a tooth put on a stall inside a step instead of the pause after it, which moves bytes from one iteration into
    the next and leaves the rest alike (Horovod, 6 ranks on 2 cores: 1.05 and 0.95 of the median on one pair of 12,
    a standard deviation of 3.7 %, here 0.04 %; 12 hosts on 2 cores: some such pair on 8 of 12 edges, 2.7 % on the
    worst and 0 on the median one), while a wrong period moves most of them (halves of unequal buckets alternating
    0.48 and 0.52 on one edge of two, 0.3 % on the other: 3.1 %)."""
    per_edge = [
        1.4826 * np.median(np.abs(c.bytes_per_iteration / max(float(np.median(c.bytes_per_iteration)), 1.0) - 1.0))
        for c in cuts
    ]
    return float(np.median(per_edge))


def _set_up_trimmed(cuts: list[EdgeCuts], count: int) -> list[EdgeCuts]:
    """Edges with more iterations than COUNT (the most common), less those at their ends that finish before the
    agreeing edges' first iteration starts, or start after their last ends (half a step of clock apart allowed):
    set-up bytes on one edge only, not an iteration. Horovod broadcasts rank 0's parameters over the ring edge out
    of its host before the first step: 8 MB, 1.2 steps of bytes, read as a 13th iteration of 12 on that edge."""
    agreeing = [c for c in cuts if len(c.cut_ns) - 1 == count]
    if not agreeing or count < 2:
        return cuts
    step = float(np.median(np.concatenate([np.diff(c.cut_ns) for c in agreeing])))
    first = min(float(c.cut_ns[0]) for c in agreeing) + step / 2
    last = max(float(c.cut_ns[-1]) for c in agreeing) - step / 2
    out = []
    for c in cuts:
        lo, hi = 0, len(c.cut_ns) - 1
        while hi - lo > count and c.cut_ns[lo + 1] <= first:
            lo += 1
        while hi - lo > count and c.cut_ns[hi - 1] >= last:
            hi -= 1
        if (lo, hi) == (0, len(c.cut_ns) - 1):
            out.append(c)
            continue
        out.append(
            replace(
                c,
                cut_ns=c.cut_ns[lo : hi + 1],
                bytes_per_iteration=c.bytes_per_iteration[lo:hi],
                found=c.found[lo : hi + 1],
            )
        )
    return out


def _confidence(ev: dict[str, float], count: int) -> float:
    """Each check a wrong period fails, mapped to 0..1, multiplied: no sub-multiple as good, no longer period
    left untested while its classes differ, every edge agreeing, bytes per iteration equal within 2 % (nothing at
    4 %: the robust spread of real DDP and Horovod jobs is under 0.1 %, 1.8 % for a job sharing two cores with
    another, while four halves of two iterations of unequal buckets vary by 3 %), boundaries on real pauses (90 %
    and more), clock offsets steady, little busy traffic outside the teeth (up to 0.4 of an iteration's bytes;
    from 0.75 the lattice may be half a step off and one iteration split between the ends), at least six
    iterations, and iterations of at least six bins (a pause and a send a bin or two long cannot be told from a
    bucket shorter than a bin). Fewer than six found in the traffic alone are never stated as fact (0.75 at most,
    two 0.5): two equal byte counts prove little; two iterations of nine buckets, 7 % re-sent and jittered, read
    as three at 0.85-0.875; two of four buckets whose pauses weigh alike, as four at 0.84-1.0. Where half the count
    is two or three, the longer period repeats once or twice, too few to rule it out by its pauses."""
    parts = [
        1.0 - ev["sub_multiple_ambiguity"],
        1.0 - ev.get("longer_period_untested", 0.0),
        ev["edges_agreeing"],
        float(np.clip((0.75 - ev["left_over"]) / 0.35, 0.0, 1.0)),
        float(np.clip((ev["bins_per_iteration"] - 2) / (SURE_STEP_BINS - 2), 0.0, 1.0)),
        float(np.clip((0.04 - ev["bytes_spread"]) / 0.02, 0.0, 1.0)),
        float(np.clip((ev["teeth_on_pauses"] - 0.5) / 0.4, 0.0, 1.0)),
        ev["steady_clock_offsets"],
        1.0 if count >= 6 else 0.75 if count >= 3 else 0.5,
    ]
    return round(float(np.prod(parts)), 3)


def _steady_offsets(cuts: list[EdgeCuts]) -> float:
    """1 when every edge's k-th tooth keeps the same time offset to the first edge's (the same iteration seen
    on another host's clock, plus the ring's lag); falls to 0 as that offset wanders by half a step, midway
    between the same iteration's tooth (no wander) and a neighbour's (a step). A quarter of a step left a
    link-bound DDP job at 100 Mbit/s (teeth wandering 91 ms in 1.48 s steps, 14 counted right) at 0.78, unsure;
    13 new captures read right and sure with half (0.89-1.00), and 800 random staircases gave the same one
    confident wrong count either way (a job of equal parts, tests/collective/test_staircase.py's known limit)."""
    if len(cuts) < 2:
        return 1.0
    ref = cuts[0].cut_ns.astype(np.float64)
    steps = np.diff(ref)
    step = float(np.median(steps)) if len(steps) else 0.0
    if step <= 0:
        return 0.0
    worst = 0.0
    for c in cuts[1:]:
        d = c.cut_ns.astype(np.float64) - ref
        worst = max(worst, float(np.median(np.abs(d - np.median(d)))))
    # teeth are bin-rounded on each edge: a bin of wander is no evidence of anything
    worst = max(0.0, worst - cuts[0].bin_ns)
    return float(max(0.0, 1.0 - worst / (0.5 * step)))


__all__ = ["EdgeSeries", "EdgeCuts", "Staircase", "pauses", "comb_score", "track", "infer"]

"""The what-if read from the wire: each sampled iteration replayed at another link speed, worker count or
compression, from when its bytes left (analyze.wire.timeline), not from a stand-in backward pass.

Why: the ring model took T as the period minus all communication and then overlapped communication with a
backward pass of 0.67·T, subtracting the overlap twice; replayed at its own speed it missed the iteration it was
measured on by 8-49 %. Here every input is read from the iteration it must reproduce.

Per iteration the mean host's bins say: the link idle (compute nothing overlapped: forward, the optimizer, the
backward before the first bucket), and a communication window [0, W] in which the bytes sent by time t, S(t), are
known. Bytes cannot leave before they are ready, and where a bin is idle inside the window the link waited for
them; so the bytes ready by t, R(t), lie between S(t) and S at the next idle bin. One unknown remains: when the
backward pass ended inside the window, E, at least the start of the last busy run (the link waited for it) and at
most W. Given E, R(t) = min(S(next idle), max(S(t), V·t/E)), and the window at a send rate r ends at
f(r) = max_t [t + (V − R(t))/r] (a work-conserving queue fed by R). The iteration at (N', B', c) is the measured
period plus f at that rate less W, with V scaled by the ring's 2(N'−1)/N' and 1/c; T, the iteration with an
infinitely fast link, is the period less W plus E.

What the capture cannot tell becomes the interval, every bound stated:

* E: the point takes the backward after the first bucket as BACKWARD_PER_IDLE times the link's idle time (the
  ratio real models' measured profiles give, at the constant), inside its bounds; low and high take the bounds. A
  range wider than HIDDEN_SHARE of the period is called hidden: the link was busy all through backward and hid
  when buckets became ready. That point can be far off: a two-layer model's backward after its first bucket was a
  quarter of the idle time (tests/whatif/test_wire_buckets.py: 21 ms against 89 read; twice the idle time, the
  rule before, read 179). Where the ranks' profiles are given beside the captures, their collective calls time it
  instead (analyze.wire.rank_profiles: per rank and step, the last call less the first): the median is the point,
  the PROFILED_RANGE percentiles the interval's bounds.
* the send rate: the efficiency the capture measured, carried to every speed, within ±EFFICIENCY_BAND; where the
  transport, not the link, set the pace (its limiter is the sender or receiver, sure), no faster than it went. It
  is measured as the rate at which the sampled windows, their bytes released as the wire shows, replay to their
  measured mean length: the ring's waits for a predecessor's chunk and a window's stalls (Horovod's slower
  iterations, 0.66-0.78 of the usual rate) are then the transport's, at every speed. Bytes over the busy bins'
  time instead counted the waits as sending, and a median over windows left the stalls out: both replayed every
  window short (Horovod at 300 Mbit/s: -0.5 to -3.5 % in four captures, one past the 3 % the replay is held to).
  What the replay check still guards: an efficiency capped at line rate and a backward end raised to keep T
  positive, where the measured iteration cannot be reproduced.
* SLOWER LINKS, both edges. A bin's waits read as the transport's pace can be compute the capture cannot tell
  apart (a rank's CPU on a loaded host, a pipeline stage's micro-batch compute, a third of a millisecond inside a
  10 ms bin), which a slower link hides. So the interval's fast edge fills any link slower than the captured one at
  line rate: a pipeline captured at 1 Gbit/s on two cores read 62 % of line rate and predicted 100 Mbit/s 35 % slow,
  outside an interval that carried its efficiency down (the step recorded there ran at 86 %). And the transport's
  efficiency has been measured falling on slower links (the ring's steps wait longer behind the shaper's queue),
  further than EFFICIENCY_BAND allows: so the slow edge carries it down by SLOWER_BAND below the captured speed.

Chained readiness (CHAINED_PATTERNS: sharded data parallel, pipeline stages). There compute waits on the
communication: a layer's forward needs its all-gather, a stage's micro-batch its predecessor's activations. An
idle bin inside the window is compute that came after the bytes before it, so its place moves with the link:
read as "every byte ready by then had left" (the fixed readiness above), FSDP captured at 100 Mbit/s predicted
1 Gbit/s at +482 %. So the window is its busy runs j (bytes V_j, measured length d_j) with the idle stretches
between them (G in all, compute that waited), and a run lasts max(c_j, V_j / r), c_j the compute that ran under
it: f(r) = G + sum_j max(c_j, V_j / r), the upper envelope of the lines that sum's pieces extend. The compute
under the runs, C = sum c_j, is the unknown E is above: the point takes it as BACKWARD_PER_IDLE times the compute
the link showed (its idle time, inside the window and out), spread over the runs by their lengths, within 0 (no
compute under the link) and sum d_j (every run as long as its compute: no faster at any speed); T is the period
less W plus G + C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from analyze.model.findings import WireFit, WireTimeline
from analyze.whatif.replay import Counterfactual, points
from capture.units import ns_of

__all__ = [
    "WireReplay",
    "WireReplays",
    "wire_replays",
    "wire_assumptions",
    "BACKWARD_PER_IDLE",
    "EFFICIENCY_BAND",
    "SLOWER_BAND",
    "HIDDEN_SHARE",
    "PROFILED_RANGE",
    "CHAINED_PATTERNS",
]

# the backward after the first bucket taken as this many times the link's idle time: in the paper's three V100
# profiles (shared data: ResNet-50/101, VGG-16, batch 32) the backward is 50-57 % of the iteration and the first
# bucket is ready within 1 ms (DDP's 1 MiB) or 5 ms (Horovod's cycle) of its start, so that ratio is 0.88-1.33;
# 2 (backward = 2 x forward, idle = forward) was above all three, and a two-layer MLP on CPUs reads 0.26-0.33
BACKWARD_PER_IDLE = 1.0
# the transport's efficiency at another speed, within this share of the measured one: eight captures of one DDP job
# at 100, 300 and 1000 Mbit/s measured 0.838-0.947 (a ratio of 1.13); 0.12, set on the first six, left a step
# recorded at 300 Mbit/s 0.4 % outside the interval predicted from a seventh, at 100 Mbit/s
EFFICIENCY_BAND = 0.15
# the efficiency on a link slower than the captured one, down to this share below the measured one (the interval's
# slow edge there): DDP batch 256 replayed 0.826-0.852 at 100 Mbit/s in three runs against 0.91-0.95 at 300 Mbit/s (a
# fall of 8-13 %); in one CI run (2026-11-29) its step recorded at 100 Mbit/s, 1.676 s against 1.44-1.50 in every
# other run, lay 0.9 % above the slow edge EFFICIENCY_BAND gave from its 300 Mbit/s capture (1.661 s: a fall of 16 %
# was needed); a quarter leaves room for that step's spread over runs
SLOWER_BAND = 0.25
HIDDEN_SHARE = 0.1  # a backward end uncertain by more than this share of the period is hidden from the wire
PROFILED_RANGE = (10, 90)  # the percentiles of the profiles' backward times over ranks and steps: the interval's
# the patterns whose compute waits on their communication, replayed with chained readiness (module docstring)
CHAINED_PATTERNS = frozenset({"sharded_data_parallel", "sharded_grad_op", "pipeline"})


def _ring_share(workers: np.ndarray) -> np.ndarray:
    """What each rank sends per byte all-reduced: 2(N−1)/N (0 for one worker: nothing leaves)."""
    return 2.0 * (workers - 1.0) / np.maximum(workers, 1.0)


@dataclass(frozen=True)
class _Iteration:
    """One iteration's lines t + q·y over the upper envelope (y: seconds per byte), and its times."""

    window_s: float  # the length it replays to at the capture's own rate
    backward_end_s: float
    t: np.ndarray  # the envelope's intercepts (s)
    q: np.ndarray  # and slopes (bytes still to send)

    def finish_s(self, seconds_per_byte: np.ndarray) -> np.ndarray:
        """f for each point's seconds per byte."""
        return np.max(self.t[:, None] + self.q[:, None] * seconds_per_byte[None, :], axis=0)


def _upper_envelope(t: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lines that ever reach the maximum of t + q·y for y ≥ 0 (a convex hull over (q, t)): a window's
    hundreds of bins reduce to a few lines, so thousands of what-if points cost little."""
    order = np.lexsort((-t, q))  # by slope, the largest intercept first among equal slopes
    hull: list[int] = []
    for i in order.tolist():
        if hull and q[hull[-1]] == q[i]:
            continue
        while hull and t[hull[-1]] <= t[i]:
            hull.pop()  # a steeper line with a larger intercept beats it everywhere
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b is never on top if a and i cross before b rises above a
            if (t[a] - t[b]) * (q[i] - q[a]) >= (t[a] - t[i]) * (q[b] - q[a]):
                hull.pop()
            else:
                break
        hull.append(i)
    keep = np.array(hull, dtype=np.int64)
    return t[keep], q[keep]


def _edges(bytes_per_bin: np.ndarray, bin_s: float, peak_bytes: float) -> np.ndarray:
    """The window's bin edges from its first byte: the first bin's bytes left at the end of it and the last
    bin's at the start, as fast as the job was seen to send (a burst rarely starts or ends on a bin's edge)."""
    k = len(bytes_per_bin)
    fill = np.minimum(bytes_per_bin[[0, -1]] / peak_bytes, 1.0) if peak_bytes > 0 else np.ones(2)
    edges = np.arange(k + 1) * bin_s - (1.0 - fill[0]) * bin_s
    edges[0] = 0.0
    edges[-1] -= (1.0 - fill[1]) * bin_s if k > 1 else 0.0
    return np.maximum.accumulate(np.maximum(edges, 0.0))


def _iteration(bytes_per_bin: np.ndarray, idle: np.ndarray, edges: np.ndarray, backward_end_s: float) -> _Iteration:
    """The envelope of one window given E (module docstring); IDLE: the bins the host only computed in; EDGES
    from _edges."""
    k = len(bytes_per_bin)
    window = float(edges[-1])
    sent = np.r_[0.0, np.cumsum(bytes_per_bin)]
    total = float(sent[-1])
    # the queue was empty all through an idle bin, its closing edge included (nothing of the next run had come,
    # or it would have left), before the window (its first byte left at once) and at its end
    idle_at = np.unique(np.r_[0, idle, idle + 1, k]).astype(np.int64)
    e = float(np.clip(backward_end_s, 0.0, window))
    t = np.sort(np.r_[edges, e])
    s = np.interp(t, edges, sent)
    paced = total * np.minimum(t / e, 1.0) if e > 0 else np.full_like(t, total)
    # R just before t (what must still leave after t) and just after it (has everything arrived?): the bound
    # S(next idle) jumps where a run begins
    at = np.searchsorted(edges, t - 1e-12)  # the first edge at or after t
    before = np.minimum(sent[idle_at[np.searchsorted(idle_at, at)]], np.maximum(s, paced))
    after_edge = np.searchsorted(edges, t + 1e-12)  # the first edge after t
    after_at = idle_at[np.minimum(np.searchsorted(idle_at, after_edge), len(idle_at) - 1)]
    after = np.minimum(sent[after_at], np.maximum(s, paced))
    q = np.maximum(total - before, 0.0)
    done = int(np.argmax(after >= total)) if (after >= total).any() else len(t) - 1
    lt, lq = _upper_envelope(np.r_[t[: done + 1], t[done]], np.r_[q[: done + 1], 0.0])
    return _Iteration(window, e, lt, lq)


def _runs(bytes_per_bin: np.ndarray, idle: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The window's busy runs between its idle bins: each run's bytes and measured length."""
    busy = np.ones(len(bytes_per_bin), dtype=bool)
    busy[idle[(idle >= 0) & (idle < len(busy))]] = False
    step = np.diff(np.r_[0, busy.astype(np.int8), 0])
    starts, ends = np.flatnonzero(step == 1), np.flatnonzero(step == -1)
    sent = np.r_[0.0, np.cumsum(bytes_per_bin)]
    return sent[ends] - sent[starts], edges[ends] - edges[starts]


def _chained_iteration(
    runs: tuple[np.ndarray, np.ndarray], edges: np.ndarray, window_s: float, compute_s: float
) -> _Iteration:
    """The envelope of one window (its RUNS, _runs, and bin EDGES) under chained readiness (module docstring) with
    COMPUTE_S under its runs, to replay to WINDOW_S: sum_j max(c_j, V_j·y) is convex in y, and with the runs sorted
    by c_j / V_j its pieces are the lines sum_{j>=m} c_j + y·sum_{j<m} V_j; their intercepts carry G."""
    volume, length = runs
    gaps = float(edges[-1]) - float(length.sum())
    under = length * (compute_s / float(length.sum())) if length.sum() > 0 else np.zeros_like(length)
    order = np.argsort(under / np.maximum(volume, 1e-9), kind="stable")
    c, v = under[order], volume[order]
    t = gaps + np.r_[np.cumsum(c[::-1])[::-1], 0.0]
    q = np.r_[0.0, np.cumsum(v)]
    lt, lq = _upper_envelope(t, q)
    return _Iteration(window_s, gaps + float(under.sum()), lt, lq)


def _last_run_start(idle: np.ndarray, edges: np.ndarray) -> float:
    """When the last busy run began (0 where the window never idles)."""
    return float(edges[int(idle[-1]) + 1]) if len(idle) else 0.0


def _replayed_efficiency(iterations: list[_Iteration], link_bps: float) -> float:
    """The share of line rate at which ITERATIONS, replayed, take their measured windows on average: the least
    efficiency whose mean f is at most the mean W (f falls as the efficiency rises), by bisection. The least:
    where a window's bytes left as they became ready, any faster rate replays it as long, and the capture only
    shows the transport reached the rate it needed. 1 where even line rate leaves the windows long (the replay
    check then shows the miss)."""
    windows = float(np.mean([it.window_s for it in iterations]))

    def replayed_s(efficiency: float) -> float:
        y = np.array([8.0 / (efficiency * link_bps)])
        return float(np.mean([it.finish_s(y)[0] for it in iterations]))

    tolerance = 1e-9 * windows  # float noise in f, far below a bin
    if replayed_s(1.0) > windows + tolerance:
        return 1.0
    low, high = 1e-6, 1.0  # replayed_s(low) > windows >= replayed_s(high)
    for _ in range(40):  # a 1e-12 share of line rate: far below what a bin resolves
        mid = 0.5 * (low + high)
        low, high = (mid, high) if replayed_s(mid) > windows + tolerance else (low, mid)
    return high


class WireReplay(Counterfactual):
    """The capture's iterations replayed at any (workers, bandwidth, compression) point under one set of
    assumptions (one bound of the interval)."""

    def __init__(
        self,
        iterations: list[_Iteration],
        measured_period_s: float,
        measured_workers: int,
        bytes_per_iteration: float,
        efficiency: float,
        ceiling_bps: Optional[float],
        slower: Optional[tuple[float, float]] = None,
    ) -> None:
        self.iterations = iterations
        # (the captured link's bps, the efficiency on any slower link): the interval's edges (module docstring)
        self.slower = slower
        self.measured_period_s = measured_period_s
        self.workers = measured_workers
        self.bytes_per_iteration = bytes_per_iteration
        self.efficiency = efficiency
        self.ceiling_bps = ceiling_bps
        self.backward_s = float(np.mean([it.backward_end_s for it in iterations]))
        self._window_s = float(np.mean([it.window_s for it in iterations]))
        self.single_iteration_time_s = measured_period_s - self._window_s + self.backward_s

    def _seconds_per_byte(self, workers: Any, bandwidth_bps: Any, compression: Any) -> np.ndarray:
        w, b, c = points(workers, bandwidth_bps, compression)
        rate = self.efficiency * b
        if self.slower is not None:
            below_bps, efficiency = self.slower
            rate = np.where(b < below_bps, efficiency * b, rate)
        if self.ceiling_bps is not None:
            rate = np.minimum(rate, self.ceiling_bps)
        share = _ring_share(w) / float(_ring_share(np.array([self.workers]))[0])
        return 8.0 * share / (c * rate)

    def saving_each_s(self, workers: int, bandwidth_bps: float) -> np.ndarray:
        """Each sampled iteration's window as captured less its window replayed at one point (no compression)."""
        y = self._seconds_per_byte(workers, bandwidth_bps, 1.0)
        return np.array([it.window_s - float(it.finish_s(y)[0]) for it in self.iterations])

    def overhead_s(self, workers: Any, bandwidth_bps: Any, compression: Any = 1.0) -> np.ndarray:
        """The window's end after the backward's, averaged over the sampled iterations."""
        y = self._seconds_per_byte(workers, bandwidth_bps, compression)
        total = np.zeros(len(y))
        for it in self.iterations:
            total += it.finish_s(y) - it.backward_end_s
        return np.maximum(total / len(self.iterations), 0.0)

    def comm_s(self, workers: Any, bandwidth_bps: Any, compression: Any = 1.0) -> np.ndarray:
        """The bytes each host sends per iteration at the point's rate."""
        return self.bytes_per_iteration * self._seconds_per_byte(workers, bandwidth_bps, compression)

    def iteration_s(self, workers: Any, bandwidth_bps: Any, compression: Any = 1.0) -> np.ndarray:
        """T + overhead: the iteration predicted at each point."""
        return self.single_iteration_time_s + self.overhead_s(workers, bandwidth_bps, compression)


@dataclass(frozen=True)
class WireReplays:
    """The point replay and the two bounds of the interval, with what was read."""

    point: WireReplay
    fast: WireReplay
    slow: WireReplay
    fit: WireFit

    def interval_s(self, workers: Any, bandwidth_bps: Any, compression: Any = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """The iteration's low and high at each point (the bounds' envelope with the point's)."""
        point = self.point.iteration_s(workers, bandwidth_bps, compression)
        fast = self.fast.iteration_s(workers, bandwidth_bps, compression)
        slow = self.slow.iteration_s(workers, bandwidth_bps, compression)
        return np.minimum.reduce([point, fast, slow]), np.maximum.reduce([point, fast, slow])


def wire_replays(
    timeline: WireTimeline,
    workers: int,
    measured_period_s: float,
    limited_by_transport: bool = False,
    chained: bool = False,
) -> Optional[WireReplays]:
    """The replays of TIMELINE for a job of WORKERS ranks whose iterations took MEASURED_PERIOD_S (the median);
    LIMITED_BY_TRANSPORT: the transport, not the link, set the pace (sure); CHAINED: its compute waits on its
    communication (CHAINED_PATTERNS, module docstring). None where no iteration sent, or where T would not be
    positive even with backward ending at the window's end: the sampled windows outlast the period (an unsure
    count of 2 for 80 steps, once)."""
    bin_s = timeline.bin_ns / 1e9
    rows = [
        (np.asarray(it.bytes_per_bin, dtype=np.float64), np.asarray(it.idle_bins, dtype=np.int64), it.period_ns / 1e9)
        for it in timeline.iterations
        if it.bytes_per_bin and sum(it.bytes_per_bin) > 0
    ]
    if not rows or timeline.link_speed_bps <= 0 or workers < 2:
        return None
    link = timeline.link_speed_bps
    peak_bytes = timeline.peak_rate_bps * bin_s / 8
    edges = [_edges(sent, bin_s, peak_bytes) for sent, _, _ in rows]
    windows = np.array([float(e[-1]) for e in edges])
    volume = np.array([sent.sum() for sent, _, _ in rows])
    idle = np.maximum(np.array([p for _, _, p in rows]) - windows, 0.0)
    profiled = (
        None if chained or timeline.profiled_backward_ns is None else [x / 1e9 for x in timeline.profiled_backward_ns]
    )
    runs = [_runs(sent, quiet, e) for (sent, quiet, _), e in zip(rows, edges)] if chained else []
    read = _Windows(rows, edges, windows, idle, runs)
    ends = _chained_ends(read, measured_period_s) if chained else _fixed_ends(read, measured_period_s, profiled)
    if ends is None:
        return None  # no iteration's compute fits: the windows are not these iterations'
    point, low, high = ends
    # under chained readiness each window replays to the measured period less its own idle time: where the link
    # never idles the iterations' cuts are arbitrary, and the sampled windows can outlast the period (FSDP at
    # 100 Mbit/s: 3.14 s against 3.11), while their idle time and bytes per window stay what they were
    targets = measured_period_s - idle

    def build(i: int, end: float) -> _Iteration:
        sent, quiet, _ = rows[i]
        if chained:
            return _chained_iteration(runs[i], edges[i], float(targets[i]), end)
        return _iteration(sent, quiet, edges[i], end)

    def at(ends: np.ndarray) -> list[_Iteration]:
        return [build(i, float(e)) for i, e in enumerate(ends)]

    at_point = at(point)
    efficiency = _replayed_efficiency(at_point, link)
    ceiling = efficiency * link if limited_by_transport else None
    fast_eff = min(efficiency * (1 + EFFICIENCY_BAND), max(timeline.peak_rate_bps / link, efficiency), 1.0)
    slow_eff = efficiency * (1 - EFFICIENCY_BAND)

    def replay(its: list[_Iteration], eff: float, slower_eff: Optional[float] = None) -> WireReplay:
        slower = None if slower_eff is None else (link, slower_eff)
        return WireReplay(its, measured_period_s, workers, float(np.median(volume)), eff, ceiling, slower)

    # on a slower link than the captured one the fast edge sends at line rate, the slow edge SLOWER_BAND under the
    # measured efficiency (module docstring: SLOWER LINKS)
    mid = replay(at_point, efficiency)
    fast, slow = replay(at(low), fast_eff, 1.0), replay(at(high), slow_eff, efficiency * (1 - SLOWER_BAND))
    mid.bounds = ((fast, fast.single_iteration_time_s), (slow, slow.single_iteration_time_s))
    # E as the fit reports it: the backward's end in the window, or under chained readiness the window's length
    # at an infinitely fast link (its idle stretches and the compute under its runs)
    backward = [np.array([it.backward_end_s for it in r.iterations]) for r in (mid, fast, slow)]
    fit = WireFit(
        iterations=len(rows),
        period_ns=ns_of(measured_period_s),
        idle_ns=ns_of(float(np.median(idle))),
        window_ns=ns_of(float(np.median(windows))),
        backward_end_ns=ns_of(float(np.median(backward[0]))),
        backward_end_ns_low=ns_of(float(np.median(backward[1]))),
        backward_end_ns_high=ns_of(float(np.median(backward[2]))),
        hidden=float(np.median(high - low)) > HIDDEN_SHARE * measured_period_s,
        efficiency=efficiency,
        efficiency_low=slow_eff,
        efficiency_high=fast_eff,
        hidden_comm_ns=ns_of(float(np.median(np.minimum(point, windows)))),
        rate_ceiling_bps=ceiling,
        backward_profiled_steps=len(profiled) if profiled else None,
        readiness="chained" if chained else None,
    )
    return WireReplays(mid, fast, slow, fit)


Ends = tuple[np.ndarray, np.ndarray, np.ndarray]  # per row: the point and the interval's two bounds


@dataclass(frozen=True)
class _Windows:
    """The sampled iterations as read: per row its bins, idle bins and period, its bin edges, window and idle
    time, and under chained readiness its busy runs (_runs: read once for the ends and the three replays)."""

    rows: list[tuple[np.ndarray, np.ndarray, float]]
    edges: list[np.ndarray]
    windows: np.ndarray
    idle: np.ndarray
    runs: list[tuple[np.ndarray, np.ndarray]]


def _fixed_ends(read: _Windows, measured_period_s: float, profiled: Optional[list[float]]) -> Optional[Ends]:
    """E per row under fixed readiness (module docstring); None where no E leaves T positive."""
    rows, edges, windows, idle = read.rows, read.edges, read.windows, read.idle
    low = np.array([_last_run_start(quiet, e) for (_, quiet, _), e in zip(rows, edges)])
    # T is at least the compute the link sat idle through: where the sampled windows fill the period so that the
    # earliest backward end leaves no T at all (a link-bound job: windows 1.448 s, period 1.443 s, no idle bin
    # inside), that end is raised to keep it so; elsewhere it stands as the wire reads it
    earliest = measured_period_s - float(np.mean(windows)) + float(np.mean(low))
    raised = earliest <= 0
    if raised:
        low = np.minimum(low + float(np.mean(idle)) - earliest, windows)
    if measured_period_s - float(np.mean(windows)) + float(np.mean(low)) <= 0:
        return None
    if profiled:
        # the ranks' profiles time the backward after the first bucket: their median is the point, their spread
        # over ranks and steps (PROFILED_RANGE) the interval's; the wire's window opens a bin or two before the
        # last rank's first hand-off, so the wire's lower bound does not clip them, unless it was raised above
        # to keep T positive
        floor = low if raised else 0.0
        ends = np.percentile(np.asarray(profiled, dtype=np.float64), [50, *PROFILED_RANGE])
        point, low, high = (np.clip(np.full(len(rows), e), floor, windows) for e in ends)
        return point, low, high
    return np.clip(BACKWARD_PER_IDLE * idle, low, windows), low, windows


def _chained_ends(read: _Windows, measured_period_s: float) -> Optional[Ends]:
    """C per row, the compute under the runs, under chained readiness (module docstring); None where even none
    leaves T negative or zero."""
    idle = read.idle
    busy = np.array([float(length.sum()) for _, length in read.runs])
    gaps = read.windows - busy
    if float(np.mean(idle + gaps)) <= 0 or measured_period_s <= float(np.mean(idle)):
        return None
    return np.clip(BACKWARD_PER_IDLE * (idle + gaps), 0.0, busy), np.zeros_like(busy), busy


def wire_assumptions(fit: WireFit) -> list[str]:
    """What the wire model read and took for granted, in words (the result's assumptions)."""
    chained = fit.readiness == "chained"
    out = _chained_reading(fit) if chained else _fixed_reading(fit)
    out.append(
        f"the transport sends at {fit.efficiency:.0%} of line rate at every speed, the rate at which the capture's "
        f"windows replay to {'the measured period' if chained else 'their measured length'}; the interval allows "
        f"{fit.efficiency_low:.0%}-{fit.efficiency_high:.0%}, and on a slower link than the captured one "
        f"{fit.efficiency * (1 - SLOWER_BAND):.0%} to line rate (the transport has been measured slower there, and "
        "waits inside busy bins may be compute, which a slower link hides)"
    )
    if fit.hidden:
        out.append(HIDDEN_CHAINED if chained else HIDDEN_FIXED)
    if fit.rate_ceiling_bps is not None:
        out.append(
            f"the transport, not the link, set the pace: no faster than the {fit.rate_ceiling_bps / 1e9:.3g} Gbit/s "
            f"it reached, whatever the link"
        )
    return out


HIDDEN_FIXED = (
    "the link was busy all through backward, which hid when buckets became ready: the prediction at a faster link "
    "is a range; the ranks' profiles (analyze --trace-beside) or a backward profile (whatif --profile) narrow it"
)
HIDDEN_CHAINED = (
    "the link was busy through most of the step, which hid how much compute ran under it: the prediction at a "
    "faster link is a range"
)


def _fixed_reading(fit: WireFit) -> list[str]:
    """What the wire model read under fixed readiness (DDP, Horovod): the window and the backward's end in it."""
    ms = 1e-6
    return [
        f"wire model: {fit.iterations} sampled host-iterations replayed from the capture; per iteration the link idles "
        f"{fit.idle_ns * ms:.4g} ms (forward, optimizer, backward before the first bucket) and communicates for "
        f"{fit.window_ns * ms:.4g} ms (medians)",
        f"backward ends {fit.backward_end_ns * ms:.4g} ms into the communication window ("
        + (
            f"the ranks' profiles: their last collective call of a step less their first, median of "
            f"{fit.backward_profiled_steps} rank-steps; the interval takes their {PROFILED_RANGE[0]}th-"
            f"{PROFILED_RANGE[1]}th percentiles, {fit.backward_end_ns_low * ms:.4g}-"
            f"{fit.backward_end_ns_high * ms:.4g} ms)"
            if fit.backward_profiled_steps
            else f"the backward after the first bucket taken as {BACKWARD_PER_IDLE:g}× the link's idle time; the "
            f"wire bounds it to "
            f"{fit.backward_end_ns_low * ms:.4g}-{fit.backward_end_ns_high * ms:.4g} ms)"
        ),
    ]


def _chained_reading(fit: WireFit) -> list[str]:
    """What the wire model read under chained readiness (sharded, pipeline; module docstring): the window, its
    runs and the compute under them."""
    ms = 1e-6
    return [
        f"wire model, chained readiness (the compute waits on the communication: sharded or pipeline): "
        f"{fit.iterations} sampled host-iterations replayed from the capture; per iteration the link idles "
        f"{fit.idle_ns * ms:.4g} ms and communicates for {fit.window_ns * ms:.4g} ms (medians); each busy run of the "
        "window lasts its bytes at the link's rate or the compute under it, whichever is longer, and the idle "
        "stretches between runs are compute that waited for them",
        f"with an infinitely fast link the window takes {fit.backward_end_ns * ms:.4g} ms (its idle stretches and "
        f"the compute under its runs, taken as {BACKWARD_PER_IDLE:g}× the compute the link showed); the wire "
        f"bounds it to {fit.backward_end_ns_low * ms:.4g}-{fit.backward_end_ns_high * ms:.4g} ms",
    ]

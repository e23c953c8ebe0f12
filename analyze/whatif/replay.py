"""A scaling model bound to a backward profile: the gradient buckets formed once, then the exposed communication,
scaling factor, needed compression and hiding bandwidth for any array of (workers, bandwidth, compression) points.

Apart from the calculation (analyze.whatif.calculation) because the verdict reads a replay too: the calculation
asks the verdict for its text, and the verdict asks the replay what a faster link or compression would need.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analyze.whatif.backward_profile import BackwardProfile
from analyze.whatif.gradient_buckets import fifo_finish_s
from analyze.whatif.model import ScalingModel

HIDE_TOLERANCE = 0.001  # above the bandwidth that hides communication, a faster link gains less than this share of T
_MAX_COMPRESSION = 1e6
_INFINITE_BPS = 1e18


def points(workers: Any, bandwidth_bps: Any, compression: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (workers, bandwidth, compression) points asked, broadcast to three float arrays of one length."""
    w, b, c = (
        np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in np.broadcast_arrays(workers, bandwidth_bps, compression)
    )
    return w, b, c


class Counterfactual:
    """What any replay answers once it gives the exposed communication after backward (`overhead_s`) and the
    busy time of the queue (`comm_s`) for arrays of (workers, bandwidth, compression) points: the scaling factor,
    and by bisection the compression or bandwidth that reaches a target and the bandwidth that hides
    communication. Two replays: a backward profile's buckets under a model (`Replay`) and the wire's own
    timeline (analyze.whatif.wire_replay)."""

    backward_s: float
    efficiency: float = 1.0  # the share of the asked bandwidth the replay itself sends at (the model's own is 1)
    # the interval's two edges, each with its own T (the wire replay's; a profile replay has none)
    bounds: tuple[tuple["Counterfactual", float], ...] = ()

    def overhead_s(self, workers: Any, bandwidth_bps: Any, compression: Any = 1.0) -> np.ndarray:
        raise NotImplementedError

    def comm_s(self, workers: Any, bandwidth_bps: Any, compression: Any = 1.0) -> np.ndarray:
        raise NotImplementedError

    def scaling_factor(
        self, single_iteration_time_s: float, workers: Any, bandwidth_bps: Any, compression: Any = 1.0
    ) -> np.ndarray:
        """T / (T + overhead) per point."""
        t = single_iteration_time_s
        return t / (t + self.overhead_s(workers, bandwidth_bps, compression))

    def needed_compression(
        self, single_iteration_time_s: float, workers: Any, bandwidth_bps: Any, target: Any
    ) -> np.ndarray:
        """Smallest compression ratio ≥ 1 reaching ``target``; NaN where no ratio can (bisection in log c)."""
        w, b, tau = (
            np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in np.broadcast_arrays(workers, bandwidth_bps, target)
        )
        allowed = single_iteration_time_s * (1.0 / tau - 1.0)
        lo, hi = np.zeros_like(w), np.full_like(w, np.log10(_MAX_COMPRESSION))
        for _ in range(64):
            mid = (lo + hi) / 2
            ok = self.overhead_s(w, b, 10.0**mid) <= allowed
            hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
        out = 10.0**hi
        out[self.overhead_s(w, b, 1.0) <= allowed] = 1.0
        out[self.overhead_s(w, b, _MAX_COMPRESSION) > allowed] = np.nan
        return out

    def needed_bandwidth_bps(self, single_iteration_time_s: float, workers: Any, target: Any) -> np.ndarray:
        """Smallest bandwidth reaching scaling factor ``target`` (bisection in log b, the overhead falling as the
        link speeds up); NaN where no bandwidth does: the overhead left at infinite bandwidth exceeds it."""
        w, tau = (np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in np.broadcast_arrays(workers, target))
        allowed = single_iteration_time_s * (1.0 / tau - 1.0)
        lo, hi = np.full_like(w, 3.0), np.full_like(w, np.log10(_INFINITE_BPS))
        for _ in range(64):
            mid = (lo + hi) / 2
            ok = self.overhead_s(w, 10.0**mid, 1.0) <= allowed
            hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
        out = 10.0**hi
        out[self.overhead_s(w, _INFINITE_BPS, 1.0) > allowed] = np.nan
        return out

    def hide_bandwidth_bps(self, single_iteration_time_s: float, workers: Any, compression: Any = 1.0) -> np.ndarray:
        """Smallest bandwidth whose overhead is within HIDE_TOLERANCE·T of the infinite-bandwidth overhead."""
        w, c = (np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in np.broadcast_arrays(workers, compression))
        allowed = self.overhead_s(w, _INFINITE_BPS, c) + HIDE_TOLERANCE * single_iteration_time_s
        lo, hi = np.full_like(w, 3.0), np.full_like(w, np.log10(_INFINITE_BPS))
        for _ in range(64):
            mid = (lo + hi) / 2
            ok = self.overhead_s(w, 10.0**mid, c) <= allowed
            hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
        return 10.0**hi


class Replay(Counterfactual):
    """A model bound to a profile: buckets formed once, then overheads for any array of points."""

    def __init__(self, model: ScalingModel, profile: BackwardProfile) -> None:
        self.model = model
        self.profile = profile
        self.batches = model.buckets(profile)
        self.backward_s = profile.backward_s

    def overhead_s(self, workers: Any, bandwidth_bps: Any, compression: Any = 1.0) -> np.ndarray:
        """Exposed communication after backward (seconds), averaged over profiled batches, one per point."""
        w, b, c = points(workers, bandwidth_bps, compression)
        total = np.zeros(w.shape[0])
        for buckets in self.batches:
            cost = self.model.cost_s(buckets.size_bytes, w, b, c)
            total += fifo_finish_s(buckets, cost) - buckets.backward_s
        return np.maximum(total / max(len(self.batches), 1), 0.0)

    def comm_s(self, workers: Any, bandwidth_bps: Any, compression: Any = 1.0) -> np.ndarray:
        """Total all-reduce time of one iteration (busy time of the queue), averaged over batches."""
        w, b, c = points(workers, bandwidth_bps, compression)
        total = np.zeros(w.shape[0])
        for buckets in self.batches:
            total += self.model.cost_s(buckets.size_bytes, w, b, c).sum(axis=0)
        return total / max(len(self.batches), 1)

"""Peak-preserving min/max downsampling of the analyzer's sparse binned series, for drawing.

The analyzer stores only non-empty bins (missing bins are zero). Drawn naively, a line would bridge a
gap between two bursts; so every gap gets a zero on each side. When a series has more bins than the
drawing budget, the time axis is cut into equal buckets of whole bins and each bucket is drawn by its
minimum and its maximum bin (a bucket with any empty bin has minimum 0): every peak survives, and
every idle stretch still drops to 0. Runs of zero buckets collapse to their two ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Line", "sparse_line", "bucket_share", "bucket_plan"]


@dataclass
class Line:
    """Points to draw: times (ns, absolute) and values, plus the bucket width used (ns; == bin when exact)."""

    t_ns: np.ndarray
    y: np.ndarray
    bucket_ns: int

    @property
    def exact(self) -> bool:
        return self.t_ns.size == 0 or self.bucket_ns <= 0

    def __len__(self) -> int:
        return int(self.t_ns.size)


def bucket_plan(t0_ns: int, t1_ns: int, bin_ns: int, max_points: int) -> tuple[int, int]:
    """(bins per bucket, number of buckets) for the span [t0, t1) so that 2·buckets ≤ max_points."""
    n_bins = max(1, -(-(int(t1_ns) - int(t0_ns)) // int(bin_ns)))
    per = max(1, -(-n_bins // max(1, max_points // 2)))
    return per, -(-n_bins // per)


def sparse_line(
    t_ns: np.ndarray, values: np.ndarray, bin_ns: int, t0_ns: int, t1_ns: int, max_points: int = 4000
) -> Line:
    """Draw-ready points for a sparse series (bins at `t_ns`, sorted; absent bins are 0) over [t0, t1).

    Exact when the series, with a zero re-inserted on each side of every gap, fits in `max_points`;
    otherwise min/max per bucket (see the module docstring). Never returns more than `max_points` points
    (+2 for the span's end zeros).
    """
    t = np.asarray(t_ns, dtype=np.int64)
    y = np.asarray(values, dtype=np.float64)
    keep = (t >= t0_ns) & (t < t1_ns)
    if not keep.all():
        t, y = t[keep], y[keep]
    if t.size == 0:
        return Line(np.array([t0_ns, t1_ns], dtype=np.int64), np.zeros(2), 0)
    if t.size > 1 and np.any(np.diff(t) < 0):
        order = np.argsort(t, kind="stable")
        t, y = t[order], y[order]
    if 3 * t.size + 2 <= max_points:
        return _exact(t, y, int(bin_ns), int(t0_ns), int(t1_ns))
    return _minmax(t, y, int(bin_ns), int(t0_ns), int(t1_ns), max_points)


def _exact(t: np.ndarray, y: np.ndarray, bin_ns: int, t0: int, t1: int) -> Line:
    """Every bin, with a zero one bin before a run's start and one bin after its end."""
    starts = np.ones(t.size, bool)
    starts[1:] = np.diff(t) > bin_ns
    ends = np.ones(t.size, bool)
    ends[:-1] = starts[1:]
    before = t[starts] - bin_ns
    after = t[ends] + bin_ns
    before, after = before[before >= t0], after[after < t1]
    core_t = np.concatenate([before, t, after])
    core_y = np.concatenate([np.zeros(before.size), y, np.zeros(after.size)])
    order = np.argsort(core_t, kind="stable")
    core_t, core_y = core_t[order], core_y[order]
    dup = np.zeros(core_t.size, bool)
    dup[1:] = core_t[1:] == core_t[:-1]  # only zero/zero: a gap of exactly one bin
    core_t, core_y = core_t[~dup], core_y[~dup]
    head = [t0] if core_t[0] > t0 else []
    tail = [t1 - 1] if core_t[-1] < t1 - 1 else []
    out_t = np.concatenate([np.array(head, np.int64), core_t, np.array(tail, np.int64)])
    out_y = np.concatenate([np.zeros(len(head)), core_y, np.zeros(len(tail))])
    return _collapse_zeros(out_t, out_y, 0)


def _minmax(t: np.ndarray, y: np.ndarray, bin_ns: int, t0: int, t1: int, max_points: int) -> Line:
    per, n_buckets = bucket_plan(t0, t1, bin_ns, max_points)
    width = per * bin_ns
    b = (t - t0) // width
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    ids = b[starts]
    counts = np.diff(np.r_[starts, t.size])
    mx = np.maximum.reduceat(y, starts)
    mn = np.minimum.reduceat(y, starts)
    # bins per bucket: the last one may be cut by t1
    n_bins_total = -(-(t1 - t0) // bin_ns)
    full_size = np.minimum(per, n_bins_total - ids * per)
    mn = np.where(counts >= full_size, mn, 0.0)
    # place the max where it happened; the min at the bucket's start (an empty bin or the smallest bin)
    group = np.repeat(np.arange(ids.size), counts)
    hit = np.flatnonzero(y == mx[group])
    first_hit = hit[np.r_[True, group[hit][1:] != group[hit][:-1]]]
    t_max = t[first_hit]
    bucket_t = t0 + np.arange(n_buckets, dtype=np.int64) * width
    ymin = np.zeros(n_buckets)
    ymax = np.zeros(n_buckets)
    tmax = bucket_t + width // 2
    ymin[ids], ymax[ids], tmax[ids] = mn, mx, t_max
    tmin = bucket_t.copy()
    tmin = np.where(tmin == tmax, tmin - 1, tmin)  # keep min before max when the peak is the bucket's first bin
    out_t = np.empty(2 * n_buckets, np.int64)
    out_y = np.empty(2 * n_buckets)
    out_t[0::2], out_t[1::2] = tmin, tmax
    out_y[0::2], out_y[1::2] = ymin, ymax
    out_t = np.concatenate([out_t, [t1 - 1]])
    out_y = np.concatenate([out_y, [0.0]])
    return _collapse_zeros(out_t, out_y, width)


def _collapse_zeros(t: np.ndarray, y: np.ndarray, bucket_ns: int) -> Line:
    """Drop zeros whose neighbours are both zero: a flat idle stretch needs only its two ends."""
    z = y == 0
    inner = np.zeros(y.size, bool)
    if y.size > 2:
        inner[1:-1] = z[1:-1] & z[:-2] & z[2:]
    return Line(t[~inner], y[~inner], bucket_ns)


def bucket_share(t_ns: np.ndarray, bin_ns: int, t0_ns: int, t1_ns: int, max_points: int = 4000) -> Line:
    """Share of bins in each bucket that are flagged (the flagged bins' times are `t_ns`), as a step line.

    Exact (0/1 per bin) when the flagged bins fit; else the fraction 0–1 per bucket. Used for busy shading.
    """
    t = np.sort(np.asarray(t_ns, dtype=np.int64))  # np.unique's hash path is ~20x slower on millions of bins
    if t.size:
        t = t[np.r_[True, t[1:] != t[:-1]]]
    t = t[(t >= t0_ns) & (t < t1_ns)]
    if 3 * t.size + 2 <= max_points:
        return sparse_line(t, np.ones(t.size), bin_ns, t0_ns, t1_ns, max_points)
    per, n_buckets = bucket_plan(t0_ns, t1_ns, bin_ns, max_points)
    width = per * bin_ns
    counts = np.bincount((t - t0_ns) // width, minlength=n_buckets)[:n_buckets].astype(np.float64)
    n_bins_total = -(-(t1_ns - t0_ns) // bin_ns)
    size = np.minimum(per, n_bins_total - np.arange(n_buckets) * per)
    share = counts / np.maximum(size, 1)
    out_t = np.concatenate([t0_ns + np.arange(n_buckets, dtype=np.int64) * width, [t1_ns - 1]])
    out_y = np.concatenate([share, [0.0]])
    same = np.zeros(out_y.size, bool)
    same[1:-1] = out_y[1:-1] == out_y[:-2]  # a step line needs only the changes
    return Line(out_t[~same], out_y[~same], width)


def bucket_mean(t_ns: np.ndarray, values: np.ndarray, bin_ns: int, t0_ns: int, t1_ns: int, bucket_ns: int) -> Line:
    """Mean per bucket of `bucket_ns` (absent bins count as 0), as a step line from each bucket's start.

    Drawn beside the min/max envelope when a series is downsampled: the envelope keeps every peak, the mean
    says how full the link was on average in that stretch.
    """
    per = max(1, int(bucket_ns) // int(bin_ns))
    width = per * int(bin_ns)
    n_buckets = -(-(int(t1_ns) - int(t0_ns)) // width)
    t = np.asarray(t_ns, dtype=np.int64)
    keep = (t >= t0_ns) & (t < t1_ns)
    sums = np.bincount(
        (t[keep] - t0_ns) // width, weights=np.asarray(values, dtype=np.float64)[keep], minlength=n_buckets
    )[:n_buckets]
    n_bins_total = -(-(int(t1_ns) - int(t0_ns)) // int(bin_ns))
    size = np.minimum(per, n_bins_total - np.arange(n_buckets) * per)
    out_t = np.concatenate([t0_ns + np.arange(n_buckets, dtype=np.int64) * width, [t1_ns - 1]])
    out_y = np.concatenate([sums / np.maximum(size, 1), [0.0]])
    return Line(out_t, out_y, width)

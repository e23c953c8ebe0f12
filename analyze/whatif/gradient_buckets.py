"""How gradients are grouped into all-reduces, and the FIFO queue that runs them.

Bucket formation depends only on the backward profile (not on workers, bandwidth or compression), so it
is done once per profile; the queue replay is then vectorized over any number of what-if points, which is
what makes a 0.1–400 Gbps × many-N sweep take milliseconds.

Two rules:

* **Horovod tensor fusion / cycle time** (the paper's rule): gradients accumulate in backward order; the
  bucket is sent when the backward compute since the last send reaches ``cycle_s`` or the bucket reaches
  ``fusion_bytes``; whatever is left is sent when backward ends.
* **PyTorch DDP buckets**: tensors are assigned in backward order to buckets that close once they reach
  their cap (the first bucket ``first_bucket_bytes``, later ones ``bucket_bytes``); a bucket is
  all-reduced when its last gradient is ready.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyze.whatif.backward_profile import BackwardProfile

__all__ = ["Buckets", "horovod_buckets", "ddp_buckets", "fifo_finish_s", "MiB"]

MiB = 1024 * 1024


@dataclass(frozen=True)
class Buckets:
    """All-reduces of one backward pass: when each is handed to the queue and how many bytes it carries."""

    ready_s: np.ndarray
    size_bytes: np.ndarray
    backward_s: float

    @property
    def count(self) -> int:
        """Number of all-reduces."""
        return int(self.size_bytes.shape[0])


def horovod_buckets(profile: BackwardProfile, cycle_s: float = 0.005, fusion_bytes: float = 64 * MiB) -> list[Buckets]:
    """One Buckets per profiled batch under the paper's 5 ms-cycle / 64 MiB-fusion rule.

    The accumulation is done in the same order and float arithmetic as the paper's simulator so that
    threshold decisions (``acc_time >= 5 ms``) come out identical.
    """
    out: list[Buckets] = []
    sizes = [float(s) for s in profile.size_bytes]
    for waits in profile.wait_s:
        now, acc_time, acc_bytes = 0.0, 0.0, 0.0
        ready: list[float] = []
        size: list[float] = []
        for wait, nbytes in zip(waits.tolist(), sizes):
            now += wait
            acc_time += wait
            acc_bytes += nbytes
            if acc_time >= cycle_s or acc_bytes >= fusion_bytes:
                ready.append(now)
                size.append(acc_bytes)
                acc_time, acc_bytes = 0.0, 0.0
        if acc_bytes > 0:
            ready.append(now)
            size.append(acc_bytes)
        out.append(Buckets(np.array(ready), np.array(size), now))
    return out


def ddp_buckets(
    profile: BackwardProfile, bucket_bytes: float = 25 * MiB, first_bucket_bytes: float = 1 * MiB
) -> list[Buckets]:
    """One Buckets per profiled batch under PyTorch DDP's size-capped buckets (first bucket smaller)."""
    bounds: list[int] = []  # index of the last tensor of each bucket
    acc, cap = 0.0, first_bucket_bytes
    for i, nbytes in enumerate(profile.size_bytes.tolist()):
        acc += nbytes
        if acc >= cap:
            bounds.append(i)
            acc, cap = 0.0, bucket_bytes
    if acc > 0:
        bounds.append(profile.tensors - 1)
    idx = np.array(bounds, dtype=np.int64)
    cum = np.cumsum(profile.size_bytes)
    sizes = np.diff(cum[idx], prepend=0.0) if idx.size else np.zeros(0)
    out = []
    for ready in profile.ready_s():
        end = float(ready[-1]) if ready.size else 0.0
        out.append(Buckets(ready[idx] if idx.size else np.zeros(0), sizes, end))
    return out


def fifo_finish_s(buckets: Buckets, cost_s: np.ndarray) -> np.ndarray:
    """Time the last all-reduce ends, when they run one at a time in FIFO order.

    ``cost_s`` has shape (buckets, points): each point is one what-if (workers, bandwidth, ...). An
    all-reduce starts when it is ready and the previous one is done. With no buckets nothing is sent and
    the queue is "done" when backward ends.
    """
    points = cost_s.shape[1] if cost_s.ndim == 2 else 1
    finish = np.full(points, buckets.backward_s if buckets.count == 0 else 0.0)
    for k in range(buckets.count):
        finish = np.maximum(finish, buckets.ready_s[k]) + cost_s[k]
    return finish

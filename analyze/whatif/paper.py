"""The what-if model of "Is Network the Bottleneck of Distributed Training?" (Zhang et al., NetAI 2020), exactly.

Kept separate and frozen so ringscope's numbers can always be put beside the paper's: wait-free backprop
with Horovod fusion (5 ms cycle since the last send, 64 MiB buffer, remainder at backward end), FIFO ring
all-reduces overlapping the rest of backward, and per bucket of s bytes

    cost = 2(N−1)/N · 8s/(B·c) + (N−1) · reduce_cost(s/N)

(B in bit/s, c the compression ratio — it shrinks only the wire time; no latency term). The paper ran this
as a real-time emulation slowed 10×; here it is an exact discrete-event replay (`fifo_finish_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from analyze.whatif.backward_profile import BackwardProfile, ReduceCostTable
from analyze.whatif.gradient_buckets import Buckets, MiB, horovod_buckets
from capture.units import ns_of

__all__ = ["PaperModel", "PAPER_CYCLE_S", "PAPER_FUSION_BYTES"]

PAPER_CYCLE_S = 0.005
PAPER_FUSION_BYTES = 64 * MiB


@dataclass(frozen=True)
class PaperModel:
    """The paper's cost model; ``reduce_cost`` None means the reduction is free (said in the assumptions)."""

    reduce_cost: Optional[ReduceCostTable] = None
    name: str = "paper"

    def buckets(self, profile: BackwardProfile) -> list[Buckets]:
        """Horovod fusion with the paper's constants."""
        return horovod_buckets(profile, PAPER_CYCLE_S, PAPER_FUSION_BYTES)

    def cost_s(
        self, size_bytes: np.ndarray, workers: np.ndarray, bandwidth_bps: np.ndarray, compression: np.ndarray
    ) -> np.ndarray:
        """Seconds per all-reduce, shape (buckets, points)."""
        s = np.asarray(size_bytes, dtype=np.float64)[:, None]
        n = np.asarray(workers, dtype=np.float64)[None, :]
        wire = (
            2.0
            * (n - 1.0)
            / n
            * 8.0
            * s
            / (
                np.asarray(bandwidth_bps, dtype=np.float64)[None, :]
                * np.asarray(compression, dtype=np.float64)[None, :]
            )
        )
        reduce = (n - 1.0) * self.reduce_cost.cost_s(s / n) if self.reduce_cost is not None else 0.0
        return wire + reduce

    def describe(self) -> dict[str, Any]:
        """The model's constants, for the JSON output."""
        return {
            "buckets": "horovod",
            "cycle_ns": ns_of(PAPER_CYCLE_S),
            "fusion_bytes": PAPER_FUSION_BYTES,
            "reduce_cost": self.reduce_cost.source if self.reduce_cost is not None else None,
        }

    def assumptions(self) -> list[str]:
        """What this model takes for granted, in words."""
        out = [
            "paper model: flat ring all-reduce, every worker with its own link of the given bandwidth, "
            "no per-step latency, compression shrinks only the wire time"
        ]
        if self.reduce_cost is None:
            out.append("no reduction-cost table given: the reduction (vector add) is taken as free")
        return out

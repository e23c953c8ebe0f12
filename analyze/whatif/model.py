"""ringscope's what-if model: the paper's replay plus switchable refinements that real jobs need.

Each refinement is one field of `RingscopeOptions`; with all of them "off" (latency 0, one GPU per server,
Horovod buckets, fp32, efficiency 1) the model is the paper's, term for term. The refinements:

* ``latency_s`` α — a ring all-reduce takes 2(N−1) sequential steps, each paying α (NCCL/TCP per-message
  latency). Small buckets on many workers are latency-bound, which the paper's model cannot show.
* ``gpus_per_server`` G with ``intra_bandwidth_bps`` — hierarchical all-reduce: reduce-scatter inside the
  server (NVLink/PCIe), ring all-reduce of each 1/G shard across the S = N/G servers (the G shards share the
  server's NIC, so the NIC moves 2(S−1)/S·s), all-gather inside the server.
* ``buckets`` — "horovod" (fusion buffer ``fusion_bytes``, cycle ``cycle_s``) or "ddp" (PyTorch DDP: buckets
  of ``bucket_bytes``, the first one ``first_bucket_bytes``, each all-reduced when its last gradient is ready).
* ``fp16`` — gradients communicated and reduced in half precision: half the bytes on the wire and in the
  reduction (bucket membership stays as profiled).
* ``transport_efficiency`` e — the rate the transport achieved while communicating ÷ line rate, as the
  capture measured it; the network term runs at e·B. It separates "the link is too slow" from "the
  transport does not fill the link".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional, Protocol

import numpy as np

from analyze.whatif.backward_profile import BackwardProfile, ReduceCostTable
from analyze.whatif.gradient_buckets import Buckets, MiB, ddp_buckets, horovod_buckets
from capture.units import ns_of

__all__ = ["ScalingModel", "RingscopeOptions", "RingscopeModel"]


class ScalingModel(Protocol):
    """What the what-if calculation needs from a model: buckets of a profile and the cost of each all-reduce."""

    @property
    def name(self) -> str: ...

    def buckets(self, profile: BackwardProfile) -> list[Buckets]: ...

    def cost_s(
        self, size_bytes: np.ndarray, workers: np.ndarray, bandwidth_bps: np.ndarray, compression: np.ndarray
    ) -> np.ndarray: ...

    def describe(self) -> dict[str, Any]: ...

    def assumptions(self) -> list[str]: ...


@dataclass(frozen=True)
class RingscopeOptions:
    """The refinements of the ringscope model; defaults are the model `ringscope whatif` uses."""

    latency_s: float = 10e-6
    gpus_per_server: int = 1
    intra_bandwidth_bps: float = 1.2e12
    intra_latency_s: float = 0.0
    buckets: str = "horovod"
    cycle_s: float = 0.005
    fusion_bytes: float = 64 * MiB
    bucket_bytes: float = 25 * MiB
    first_bucket_bytes: float = 1 * MiB
    fp16: bool = False
    transport_efficiency: float = 1.0

    def __post_init__(self) -> None:
        if self.buckets not in ("horovod", "ddp"):
            raise ValueError(f"bucket rule must be 'horovod' or 'ddp', not {self.buckets!r}")
        if not 0 < self.transport_efficiency <= 1:
            raise ValueError(f"transport efficiency must be in (0, 1], not {self.transport_efficiency}")
        if self.gpus_per_server < 1:
            raise ValueError(f"GPUs per server must be at least 1, not {self.gpus_per_server}")
        if self.latency_s < 0 or self.intra_latency_s < 0 or self.intra_bandwidth_bps <= 0:
            raise ValueError("latencies must be non-negative and the intra-server bandwidth positive")


def _ring_s(
    parts: np.ndarray, size: np.ndarray, bandwidth: np.ndarray, latency_s: float, reduce_cost: Optional[ReduceCostTable]
) -> np.ndarray:
    """Ring all-reduce of ``size`` bytes over ``parts`` members: wire + 2(p−1)·α + (p−1)·reduce(size/p)."""
    wire = 2.0 * (parts - 1.0) / parts * 8.0 * size / bandwidth
    steps = 2.0 * (parts - 1.0) * latency_s
    reduce = (parts - 1.0) * reduce_cost.cost_s(size / parts) if reduce_cost is not None else 0.0
    return wire + steps + reduce


@dataclass(frozen=True)
class RingscopeModel:
    """The paper's replay with ringscope's refinements (see the module docstring)."""

    options: RingscopeOptions = RingscopeOptions()
    reduce_cost: Optional[ReduceCostTable] = None
    name: str = "ringscope"

    def buckets(self, profile: BackwardProfile) -> list[Buckets]:
        """Buckets under the chosen rule."""
        o = self.options
        if o.buckets == "ddp":
            return ddp_buckets(profile, o.bucket_bytes, o.first_bucket_bytes)
        return horovod_buckets(profile, o.cycle_s, o.fusion_bytes)

    def cost_s(
        self, size_bytes: np.ndarray, workers: np.ndarray, bandwidth_bps: np.ndarray, compression: np.ndarray
    ) -> np.ndarray:
        """Seconds per all-reduce, shape (buckets, points)."""
        o = self.options
        s = np.asarray(size_bytes, dtype=np.float64)[:, None] * (0.5 if o.fp16 else 1.0)
        n = np.asarray(workers, dtype=np.float64)[None, :]
        c = np.asarray(compression, dtype=np.float64)[None, :]
        net_bw = np.asarray(bandwidth_bps, dtype=np.float64)[None, :] * o.transport_efficiency * c
        g = np.minimum(float(o.gpus_per_server), n)
        servers = n / g
        if o.gpus_per_server == 1:
            return _ring_s(n, s, net_bw, o.latency_s, self.reduce_cost)
        # Compression applies to every transfer; the measured transport efficiency only to the network.
        intra = _ring_s(g, s, np.full_like(net_bw, o.intra_bandwidth_bps) * c, o.intra_latency_s, self.reduce_cost)
        inter = _ring_s(servers, s, net_bw, o.latency_s, None)  # G shards of s/G share the NIC
        inter_reduce = (
            (servers - 1.0) * self.reduce_cost.cost_s(s / (g * servers)) if self.reduce_cost is not None else 0.0
        )
        return intra + inter + inter_reduce

    def describe(self) -> dict[str, Any]:
        """The options, for the JSON output: its durations in ns, as every duration of a result."""
        options = asdict(self.options)
        for key in ("latency_s", "intra_latency_s", "cycle_s"):
            options[key.removesuffix("_s") + "_ns"] = ns_of(options.pop(key))
        return {**options, "reduce_cost": self.reduce_cost.source if self.reduce_cost is not None else None}

    def assumptions(self) -> list[str]:
        """What this model takes for granted, in words."""
        o = self.options
        out = [
            f"ringscope model: per-step latency {o.latency_s * 1e6:g} us × 2(N−1) steps",
            f"{o.buckets} buckets"
            + (
                f" (fusion {o.fusion_bytes / MiB:g} MiB, cycle {o.cycle_s * 1e3:g} ms)"
                if o.buckets == "horovod"
                else f" ({o.bucket_bytes / MiB:g} MiB, first {o.first_bucket_bytes / MiB:g} MiB)"
            ),
        ]
        if o.gpus_per_server > 1:
            out.append(
                f"hierarchical all-reduce: {o.gpus_per_server} GPUs per server at "
                f"{o.intra_bandwidth_bps / 1e9:g} Gbit/s inside the server; the given bandwidth is the server's NIC"
            )
        else:
            out.append("one worker per link (flat ring)")
        if o.fp16:
            out.append("fp16 gradients: half the bytes on the wire and in the reduction")
        if o.transport_efficiency < 1:
            out.append(f"the transport fills {o.transport_efficiency:.0%} of the link while communicating")
        if self.reduce_cost is None:
            out.append("no reduction-cost table given: the reduction (vector add) is taken as free")
        return out

"""What an analyzed run tells the what-if calculation: N, link speed, iteration and communication time, bytes.

The analyzer's result JSON (`ringscope analyze --json`) is read defensively — every key may be absent —
and every value taken or guessed is said in ``assumptions`` so the what-if output can repeat it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from analyze.doubt import doubt

__all__ = ["WhatIfInputs", "inputs_from_result"]


@dataclass
class WhatIfInputs:
    """Measured quantities of one run (None where the result did not say)."""

    workers: Optional[int] = None
    link_speed_bps: Optional[float] = None
    iteration_time_s: Optional[float] = None
    gradient_bytes: Optional[float] = None
    comm_time_s: Optional[float] = None
    transport_efficiency: Optional[float] = None
    assumptions: list[str] = field(default_factory=list)
    unsure: Optional[dict[str, Any]] = None  # analyze.doubt: inferred inputs not sure enough to state as fact

    def achieved_rate_bps(self) -> Optional[float]:
        """Ring all-reduce goodput implied by bytes and communication time: 2(N−1)/N·8S / t_comm."""
        if not (self.workers and self.gradient_bytes and self.comm_time_s and self.workers > 1):
            return None
        return 2 * (self.workers - 1) / self.workers * 8 * self.gradient_bytes / self.comm_time_s

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "workers": self.workers,
            "link_speed_bps": self.link_speed_bps,
            "iteration_time_s": self.iteration_time_s,
            "gradient_bytes": self.gradient_bytes,
            "comm_time_s": self.comm_time_s,
            "transport_efficiency": self.transport_efficiency,
            "achieved_rate_bps": self.achieved_rate_bps(),
        }


def _number(value: Any) -> Optional[float]:
    """A positive finite float, or None (the result may hold nulls, strings or NaN)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out > 0 and out == out and out != float("inf") else None


def _hosts(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    hosts = result.get("hosts")
    if isinstance(hosts, Mapping):
        return [h for h in hosts.values() if isinstance(h, Mapping)]
    if isinstance(hosts, list):
        return [h for h in hosts if isinstance(h, Mapping)]
    return []


def inputs_from_result(result: Mapping[str, Any]) -> WhatIfInputs:
    """Extract what-if inputs from an analyzer result dict (or a document wrapping it under 'result')."""
    if isinstance(result.get("result"), Mapping) and "hosts" not in result:
        result = result["result"]
    out = WhatIfInputs()
    hosts = _hosts(result)
    if hosts:
        out.workers = len(hosts)
        out.assumptions.append(f"N = {len(hosts)} workers: one per captured host")
        speeds = [s for s in (_number(h.get("link_speed_bps")) for h in hosts) if s is not None]
        if speeds:
            out.link_speed_bps = min(speeds)
            if len(set(speeds)) > 1:
                out.assumptions.append(
                    f"hosts' link speeds differ; the slowest ({min(speeds) / 1e9:g} Gbit/s) bounds the ring"
                )
        busy = [
            b
            for b in (
                _number((h.get("tx_utilization") or {}).get("while_busy"))
                for h in hosts
                if isinstance(h.get("tx_utilization"), Mapping)
            )
            if b is not None
        ]
        if busy:
            eff = statistics.fmean(busy)
            if eff > 1:
                out.assumptions.append(
                    f"measured utilization while busy {eff:.2f} > 1 (clock/counting skew): taken as 1"
                )
                eff = 1.0
            out.transport_efficiency = eff
            out.assumptions.append(
                f"transport efficiency {eff:.0%}: mean over hosts of tx utilization while busy "
                f"(range {min(busy):.0%}–{max(busy):.0%})"
            )
    out.unsure = doubt(result)
    iterations = result.get("iterations")
    if isinstance(iterations, Mapping):
        period = _number(iterations.get("period_ns"))
        if period is not None:
            out.iteration_time_s = period / 1e9
        grad = _number(iterations.get("implied_gradient_bytes"))
        if grad is not None:
            out.gradient_bytes = grad
            out.assumptions.append(
                "gradient bytes: implied by the bytes each host sent per iteration (ring: 2(N−1)/N·S)"
            )
        per = iterations.get("per_iteration")
        if isinstance(per, list):
            comm = [c for c in (_number(it.get("comm_ns")) for it in per if isinstance(it, Mapping)) if c is not None]
            if comm:
                out.comm_time_s = statistics.median(comm) / 1e9
                out.assumptions.append(f"communication time per iteration: median over {len(comm)} iterations")
    return out

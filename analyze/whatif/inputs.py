"""What an analyzed run tells the what-if calculation: N, link speed, iteration and communication time, bytes.

Read from the typed Result (`ringscope analyze`'s, or one read back from its JSON with Result.from_json, where
a value the analysis did not know is None), and every value taken or guessed is said in ``assumptions`` so the
what-if output can repeat it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Optional

from analyze.confidence.doubt import bounds_doubt, doubt
from analyze.confidence.thresholds import CONFIDENT
from analyze.model.findings import Unsure, WireTimeline
from analyze.model.result import Result
from analyze.whatif.wire_replay import CHAINED_PATTERNS

__all__ = ["WhatIfInputs", "inputs_from_result", "PACED_BY_ENDS", "FASTER_THAN_LINK"]

PACED_BY_ENDS = ("sender", "receive_window", "socket")  # limiters under which a faster link sends no faster
# hosts sending, while busy, faster than this share of the link speed say the speed is wrong, not the hosts: the
# real captures in fixtures/ read 0.34-0.89 of their shaped links (bins partly busy only lower it); 1.25 leaves
# room for a clock's skew and a token bucket's burst, and a link given at half its speed reads ~1.7
FASTER_THAN_LINK = 1.25


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
    unsure: Optional[Unsure] = None  # analyze.confidence.doubt: inferred inputs too unsure to state
    timeline: Optional[WireTimeline] = None  # the iterations as the wire shows them (analyze.wire.timeline)
    transport_limited: bool = False  # the transport, not the link, set the pace (its sure limiter)
    busy_utilization: Optional[float] = None  # mean tx utilization while busy, before it is capped at 1
    # a job whose compute waits on its communication (wire_replay.CHAINED_PATTERNS: sharded, pipeline): the wire
    # model replays it with chained readiness, and only its captures and count leave that unsure (its bytes are
    # measured, no S, W or bytes theory enters), while the ring model does not cover it (`unsure` says so)
    chained: bool = False
    chained_unsure: Optional[Unsure] = None

    def check_link_speed(self) -> None:
        """A ValueError (one line) where the hosts sent faster than the link speed allows: a what-if scaled
        from a speed the run beat would predict a faster link slower than the one it ran on."""
        if self.link_speed_bps and self.busy_utilization and self.busy_utilization > FASTER_THAN_LINK:
            raise ValueError(
                f"the link speed {self.link_speed_bps / 1e9:.4g} Gbit/s is below the rate the hosts reached while "
                f"sending ({self.busy_utilization * self.link_speed_bps / 1e9:.4g} Gbit/s): give the real link "
                "speed (--link-speed when the capture's meta.json has none)"
            )

    def achieved_rate_bps(self) -> Optional[float]:
        """Ring all-reduce goodput implied by bytes and communication time: 2(N−1)/N·8S / t_comm."""
        if not (self.workers and self.gradient_bytes and self.comm_time_s and self.workers > 1):
            return None
        return 2 * (self.workers - 1) / self.workers * 8 * self.gradient_bytes / self.comm_time_s


def _number(value: Optional[float]) -> Optional[float]:
    """A positive finite float, or None (a result read back from JSON may hold nulls where it knew nothing)."""
    if value is None:
        return None
    out = float(value)
    return out if out > 0 and math.isfinite(out) else None


def inputs_from_result(result: Result) -> WhatIfInputs:
    """The what-if inputs an analyzed run gives: N and link speed from its hosts, the transport efficiency from
    their utilization, the period, gradient bytes and communication time from its iterations."""
    out = WhatIfInputs()
    hosts = result.hosts or []
    ring = result.iterations.ring_size if result.iterations is not None else None
    source = result.iterations.ring_size_source if result.iterations is not None else None
    if ring and source and source != "assumed":
        out.workers = int(ring)
        out.assumptions.append(f"N = {ring} workers: the ring's ranks ({source})")
    elif hosts:
        out.workers = len(hosts)
        out.assumptions.append(f"N = {len(hosts)} workers: one per captured host")
    if hosts:
        speeds = [s for s in (_number(h.link_speed_bps) for h in hosts) if s is not None]
        if speeds:
            out.link_speed_bps = min(speeds)
            if len(set(speeds)) > 1:
                out.assumptions.append(
                    f"hosts' link speeds differ; the slowest ({min(speeds) / 1e9:g} Gbit/s) bounds the ring"
                )
        busy = [
            b
            for b in (_number(h.tx_utilization.while_busy) for h in hosts if h.tx_utilization is not None)
            if b is not None
        ]
        if busy:
            eff = statistics.fmean(busy)
            out.busy_utilization = eff
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
    pattern = result.iterations.pattern if result.iterations is not None else None
    if pattern is not None and pattern.kind in CHAINED_PATTERNS:
        out.chained, out.chained_unsure = True, bounds_doubt(result)
    transport = result.transport
    out.transport_limited = bool(transport and transport.limiter in PACED_BY_ENDS and transport.confidence >= CONFIDENT)
    iterations = result.iterations
    if iterations is not None:
        out.timeline = iterations.timeline
        period = _number(iterations.period_ns)
        if period is not None:
            out.iteration_time_s = period / 1e9
        grad = _number(iterations.implied_gradient_bytes)
        if grad is not None:
            out.gradient_bytes = grad
            out.assumptions.append(
                "gradient bytes: implied by the bytes each host sent per iteration (ring: 2(N−1)/N·S)"
            )
        comm = [c for c in (_number(it.comm_ns) for it in iterations.per_iteration) if c is not None]
        if comm:
            out.comm_time_s = statistics.median(comm) / 1e9
            out.assumptions.append(f"communication time per iteration: median over {len(comm)} iterations")
    return out

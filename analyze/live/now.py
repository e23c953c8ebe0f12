"""A running capture at one poll: the numbers a live view shows (analyze.live.view makes them, reports.live draws them).

A module of its own so that the drawing side imports no read path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

# Edges under this share of the heaviest one's bytes (control traffic, a rank mesh, ACKs) are not the collective's:
# the live view searches its iterations without them, and the metrics give them no series
HEAVY_EDGE = 0.1


@dataclass
class HostNow:
    """One host at one poll: bytes so far and the rate since the previous poll."""

    name: str
    link_speed_bps: Optional[float]
    tx_bytes: int
    rx_bytes: int
    tx_bps: Optional[float]  # None at the first poll: it read what was written before the view started
    rx_bps: Optional[float]
    packets: int = 0  # IP packets read from its capture files so far
    resent_bytes: int = 0  # bytes its flows sent again (TCP retransmissions)
    status: Optional[str] = None  # the agent's meta.json status: capturing, complete, ...
    kernel_drops: Optional[int] = None  # tcpdump's counts, written by the agent when it stops
    lost_packets: Optional[int] = None

    def utilization(self, direction: str) -> Optional[float]:
        """The rate over the link speed, None when the rate or the link speed is not known."""
        bps = self.tx_bps if direction == "tx" else self.rx_bps
        return bps / self.link_speed_bps if bps is not None and self.link_speed_bps else None


@dataclass
class Now:
    """The whole run at one poll."""

    seconds: float  # since the view started
    hosts: list[HostNow]
    edges: list[tuple[str, str, float]]  # (sender, receiver, bits/s since the previous poll), heaviest first
    iterations: Optional[int]  # finished iterations (markers: the most any rank finished), None when not known yet
    iterations_source: Optional[str] = None  # "markers", or "traffic": found in the ring edges' bytes so far
    iterations_confidence: Optional[float] = None  # 1 for markers; the staircase's confidence for traffic
    iterations_sure: bool = False  # markers, or traffic at analyze.collective.staircase.CONFIDENT or more
    jobs: list["JobNow"] = field(
        default_factory=list
    )  # where the traffic holds several jobs: each one's, heaviest first
    edge_bytes: list[tuple[str, str, int]] = field(default_factory=list)  # (sender, receiver, IP bytes so far)
    last_iteration_s: Optional[float] = None  # the last finished iteration's length (markers, else traffic)
    last_iteration_bytes: dict[str, int] = field(default_factory=dict)  # per host, sent in it (traffic only)
    limiter: Optional[tuple[str, float]] = None  # the transport's limiter and its confidence (analyze.live.limiter)


@dataclass
class JobNow:
    """One job of a capture that holds several (or other traffic beside one), at one poll: its iterations so far."""

    name: str
    hosts: int
    iterations: Optional[int]
    confidence: Optional[float]
    sure: bool

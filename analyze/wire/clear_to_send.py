"""Who kept an RDMA link idle between chunks: the sender, or the receiver's clear-to-send.

Why from the packets: NCCL's InfiniBand transport is receiver-driven. A receiver grants each chunk by writing a
clear-to-send into the sender's FIFO (a 64-byte RDMA WRITE; RCCL's inline variant 32 bytes), and the sender
writes the chunk once it holds a grant and the data. Where a link idles between chunks, the sender's capture
(one clock) shows whose turn it was: a grant that arrived after the previous chunk ended kept the link waiting on
the receiver (its rank late to hand the buffer back); a chunk that left well after both its grant and the
previous chunk's end kept it waiting on the sender (its rank late with the data). The read path files every WRITE
message's first and last packet and every clear-to-send (analyze.read.layouts ROCE_EV_CHUNK_*, ROCE_EV_CTS); the
tables attach a grant to the queue pair it clears (its reverse pair).

Per chunk: the link's idle time before it (since the latest chunk end on any of the edge's queue pairs, none while
another chunk is in flight); the part until its queue pair's latest grant is the receiver's, the rest the
sender's. Per edge the median of each over its chunks: a rank late on every chunk moves the median, while the
few long waits at ring-step and iteration boundaries (the ring's own dependencies, the compute) do not. A host is
late where its edge's median wait stands out from the other edges' (LATE_FACTOR, at least LATE_FLOOR_NS), and
each iteration loses the excess on every chunk it sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from analyze.model.findings import RdmaEdge

__all__ = ["Grants", "grant_waits", "late_by_grants"]

MIN_CHUNKS = 8  # an edge with fewer chunks whose grants show is not judged
LATE_FACTOR = 4.0  # an edge's median wait per chunk this many times the other edges' usual one stands out ...
LATE_FLOOR_NS = 10_000  # ... and by at least this much (a grant's own round trip is a few microseconds)


@dataclass(frozen=True)
class Grants:
    """An edge's chunks and, per chunk (median), how long its link idled waiting on the receiver's grant and on
    the sender after it."""

    chunks: int
    receiver_ns: float
    sender_ns: float


def grant_waits(events: Optional[pd.DataFrame], sender: str) -> Optional[Grants]:
    """The edge's waits from its queue pairs' EVENTS (Tables.rdma_events rows) in SENDER's capture; None where
    the capture holds no grants for its chunks (not NCCL's receiver-driven exchange, or the sender not captured)."""
    if events is None or not len(events):
        return None
    mine = events[events["host"] == sender]
    if not len(mine):
        return None
    what = mine["what"].to_numpy(object)
    # times from the capture's first event: a merge that leaves a start without a grant turns the column to
    # floats, exact to the nanosecond only well below 2^53 ns
    t = mine["t_ns"].to_numpy(np.int64) - int(mine["t_ns"].min())
    flow = mine["flow_id"].to_numpy(np.int64)
    start = what == "chunk_start"
    starts = pd.DataFrame({"flow_id": flow[start], "t_ns": t[start]}).sort_values("t_ns", kind="stable")
    grants = pd.DataFrame({"flow_id": flow[what == "cts"], "grant_ns": t[what == "cts"]})
    ends = np.sort(t[what == "chunk_end"])
    if len(starts) < MIN_CHUNKS or grants.empty or not len(ends):
        return None
    granted = pd.merge_asof(
        starts, grants.sort_values("grant_ns", kind="stable"), left_on="t_ns", right_on="grant_ns", by="flow_id"
    )
    s = granted["t_ns"].to_numpy(np.int64)
    grant = granted["grant_ns"].to_numpy(np.float64)  # NaN: no grant before it
    before = np.searchsorted(ends, s, side="left") - 1  # the latest chunk end before each start, any queue pair
    has_end = before >= 0
    end = np.where(has_end, ends[np.maximum(before, 0)], 0).astype(np.float64)
    in_flight = np.r_[False, s[:-1] > end[1:]]  # another chunk started after that end: the link was busy
    judged = has_end & ~in_flight & ~np.isnan(grant)
    if judged.sum() < MIN_CHUNKS:
        return None
    idle = (s - end)[judged]
    receiver = np.clip(grant[judged] - end[judged], 0.0, idle)
    return Grants(
        chunks=int(len(starts)),
        receiver_ns=float(np.median(receiver)),
        sender_ns=float(np.median(idle - receiver)),
    )


def late_by_grants(edges: list[RdmaEdge]) -> list[tuple[str, str, float, RdmaEdge, float]]:
    """(host, role, excess wait per chunk in ns, its edge, the others' usual wait) for each edge whose median wait
    stands out, as the receiver (the edge's destination) or the sender (its source)."""
    judged = [e for e in edges if e.chunks and e.grant_wait_ns is not None and e.send_wait_ns is not None]
    out: list[tuple[str, str, float, RdmaEdge, float]] = []
    if len(judged) < 2:
        return out
    for role in ("receiver", "sender"):
        waits = np.array([e.grant_wait_ns if role == "receiver" else e.send_wait_ns for e in judged], np.float64)
        for i, e in enumerate(judged):
            usual = float(np.median(np.delete(waits, i)))
            excess = waits[i] - usual
            if waits[i] >= LATE_FACTOR * usual and excess >= LATE_FLOOR_NS:
                out.append((e.dst if role == "receiver" else e.src, role, excess, e, usual))
    return out

"""RDMA edges that likely share one path through the fabric (ECMP collisions): a hint, never a finding (issue 47).

Why: a switch spreads flows over equal-cost paths by a hash of their headers (for RoCEv2, the UDP source port a
NIC picks per queue pair). Two queue pairs hashed onto one link each get about half of it, three a third: they run
steadily at line rate / k with nothing lost, nothing marked and no CNP, while the edges beside them run at line
rate. From a host's capture that looks like a sender that does not keep its link busy; the capture cannot see the
fabric, so the edge's verdict stays unsure and says what else fits, with what spreading them would give.
"""

from __future__ import annotations

from analyze.model.findings import RdmaEdge
from analyze.wire.send_rate import UNRESOLVED_CONFIDENCE

SHARERS = (2, 3, 4)  # k flows on one path: each at 1/k of line rate
NEAR = 0.06  # a burst rate this close to 1/k (of line rate) fits k sharers
FULL = 0.85  # an edge at this share of line rate or more runs alone on its path


def shared_paths(edges: list[RdmaEdge]) -> list[str]:
    """Mark each judged edge whose bursts run at about line rate / k, with no loss, CE mark or CNP, while another
    edge runs at line rate: its verdict is capped at UNRESOLVED_CONFIDENCE and its evidence names the path hint.
    Returns the finding's note (empty when no edge fits)."""
    full = [e for e in edges if (e.burst_rate or 0.0) >= FULL]
    if not full:
        return []
    alone = {id(e) for e in full}
    hits = []
    for e in edges:
        rate = e.burst_rate
        clean = not (e.naks or e.timeouts or e.cnps or e.ce_marks or e.resent_packets)
        k = next((k for k in SHARERS if rate is not None and abs(rate - 1 / k) <= NEAR), None)
        if k is None or not clean or id(e) in alone:
            continue
        e.confidence = min(e.confidence, UNRESOLVED_CONFIDENCE)
        e.evidence.append(
            f"its bursts run at {rate:.0%} of line rate (about 1/{k}) with no loss, CE mark or CNP while "
            f"{len(full)} other edge(s) run at line rate: likely {k} flows hashed onto one path through the fabric "
            f"(ECMP), which the capture cannot see; spread apart, its bytes would take 1/{k} of the time "
            f"(its QPs: {', '.join(str(q) for q in e.qps)}"
            + (f"; UDP source ports {', '.join(str(p) for p in e.qp_udp_sports)}" if e.qp_udp_sports else "")
            + ")"
        )
        hits.append(f"{e.src} -> {e.dst} (1/{k})")
    if not hits:
        return []
    return [
        "likely sharing a path through the fabric (ECMP): "
        + ", ".join(hits)
        + ": steady at a fraction of line rate without loss or congestion marks, beside edges at line rate. A hint: "
        "the switches' hashing of the queue pairs' UDP source ports decides it, and their counters can confirm it"
    ]

"""Queue pairs sharing one path through the fabric (issue 47 item 5): a hint with its evidence, never a verdict.

Ground truth from the generator (tests/support/rocegen.py): on a 100 Gbit/s RoCEv2 ring, edges made to send at
line rate / k for every step with nothing marked (Congestion with no CE marks: no CNPs, no loss), as k queue pairs
hashed onto one link would, beside edges at line rate; and a ring where every edge runs at line rate (no hint).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analyze.api import analyze
from analyze.confidence.thresholds import CONFIDENT
from tests.support import rocegen as R


def _ring(tmp: Path, slow: dict[int, float]):  # type: ignore[no-untyped-def]
    spec = R.RoceRing(
        link_bps=100e9,
        iterations=6,
        gradient_bytes=32 << 20,
        compute_ns=20_000_000,
        congestion=tuple(R.Congestion(edge=e, iteration=-1, step=-1, ce=0, slowdown=k) for e, k in slow.items()),
    )
    return analyze([R.write_run(tmp / "run", R.generate(spec))], workers=1).rdma


@pytest.mark.parametrize("k", [2, 3])
def test_edges_at_a_kth_of_line_rate_without_marks_are_a_path_hint(tmp_path: Path, k: int) -> None:
    rdma = _ring(tmp_path, {1: float(k), 2: float(k)})
    edges = {(e.src, e.dst): e for e in rdma.edges}
    slow = [edges[("node1", "node2")], edges[("node2", "node3")]]
    for e in slow:
        assert e.burst_rate == pytest.approx(1 / k, abs=0.02)  # the generator's line rate / k
        assert e.confidence < CONFIDENT  # a sender or the fabric: the capture cannot tell
        assert any(f"about 1/{k}" in text and "ECMP" in text for text in e.evidence), e.evidence
        # the ports a switch hashes, as the generator's NICs picked them per queue pair
        assert e.qp_udp_sports == [0xC000 | (qp & 0x3FFF) for qp in e.qps], (e.qps, e.qp_udp_sports)
        assert any(f"UDP source ports {', '.join(map(str, e.qp_udp_sports))}" in text for text in e.evidence)
    for key in (("node0", "node1"), ("node3", "node0")):
        assert not any("ECMP" in text for text in edges[key].evidence)
    (note,) = [n for n in rdma.notes if "ECMP" in n]
    assert "node1 -> node2" in note and "node2 -> node3" in note


def test_a_ring_at_line_rate_gives_no_hint(tmp_path: Path) -> None:
    rdma = _ring(tmp_path, {})
    assert not any("ECMP" in n for n in rdma.notes)
    judged = [e for e in rdma.edges if e.limiter is not None]  # the clear-to-send writes back are too light
    assert len(judged) == 4 and all(e.limiter == "link" for e in judged)

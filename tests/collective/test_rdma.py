"""The collective and its transport over RDMA, on generated RoCE and InfiniBand captures of an NCCL ring
(tests/support/rocegen.py): ring, iterations and bytes per iteration as for TCP, each edge's queue pairs folded
into one, ACK round trips against the generator's own delays, and `congestion` and `loss` named where they were
injected and nowhere else.
"""

from __future__ import annotations

import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from analyze.api import analyze
from analyze.confidence.thresholds import CONFIDENT
from analyze.model.result import Result
from reports.trace import trace_events
from tests.support import rocegen as R
from tests.support.requirements import require


def _run(tmp_path: Path, spec: R.RoceRing, **kw: object) -> tuple[R.Generated, Result]:
    gen = R.generate(spec)
    root = R.write_run(tmp_path / "run", gen)
    return gen, analyze([root], bin_ns=1_000_000, byte_mode="payload", **kw)  # type: ignore[arg-type]


def _edge(result: Result, src: int, dst: int):  # type: ignore[no-untyped-def]
    assert result.rdma is not None
    return next(e for e in result.rdma.edges if (e.src, e.dst) == (f"node{src}", f"node{dst}"))


@pytest.mark.parametrize("transport", ["v2", "ib", "ib-grh"])
def test_ring_iterations_and_bytes_over_rdma(tmp_path: Path, transport: str) -> None:
    spec = R.RoceRing(transport=transport)
    gen, r = _run(tmp_path, spec, gradient_bytes=spec.gradient_bytes)
    n = spec.hosts
    assert r.topology is not None and r.topology.kind == "ring" and r.topology.confidence >= CONFIDENT
    order = r.topology.order
    start = order.index("node0")
    assert order[start:] + order[:start] == [spec.host(h) for h in range(n)]
    its = r.iterations
    assert its is not None and its.count == spec.iterations and its.confident
    # each host sends 2(N-1)/N x S of RDMA payload per iteration, plus its clear-to-send writes
    theory = 2 * (n - 1) / n * spec.gradient_bytes
    cts = 2 * (n - 1) * (gen.step_bytes // spec.chunk_bytes) * R.CTS_BYTES
    assert its.bytes_per_iteration_per_host.median == pytest.approx(theory + cts, rel=0.002)
    assert r.rdma is not None
    for h in range(n):
        e = _edge(r, h, (h + 1) % n)
        assert len(e.qps) == spec.qps_per_edge and e.qp_imbalance == pytest.approx(1.0, abs=0.01)
        assert e.payload_bytes == spec.iterations * 2 * (n - 1) * gen.step_bytes
        # request with AckReq -> its ACK, in the sender's capture: there and back plus the responder's turnaround
        assert e.ack_rtt_median_ns == pytest.approx(2 * R.PROPAGATION_NS + R.RESPONSE_NS, abs=10)
        assert e.limiter == "link" and e.resent_packets == 0 and e.cnps == 0
    assert r.rdma.limiter == "link"
    for qp in r.rdma.qps:
        assert qp.reverse_qp is not None, f"{qp.src} -> {qp.dst} QP {qp.qp:#x}: its ACKs' queue pair was learnt"


def test_congestion_is_named_on_the_congested_edge(tmp_path: Path) -> None:
    """Every step of the edge node2 -> node3 crosses a congested port: CE marks, CNPs, and the sender at half rate.
    The ring's other edges finish each step early and wait for it."""
    spec = R.RoceRing(congestion=(R.Congestion(2, -1, -1, ce=60, slowdown=2.0),))
    _, r = _run(tmp_path, spec)
    hot = _edge(r, 2, 3)
    assert hot.limiter == "congestion" and hot.confidence >= CONFIDENT
    assert hot.ce_marks == 60 * spec.iterations * 2 * (spec.hosts - 1) and hot.cnps > 0
    for h in (0, 1, 3):  # they wait each step for the congested edge: never blamed for congestion or loss
        assert _edge(r, h, (h + 1) % spec.hosts).limiter in ("link", "sender")
    assert r.rdma is not None and r.rdma.limiter == "congestion" and r.rdma.confidence >= CONFIDENT
    assert r.transport is not None and r.transport.limiter == "congestion"


def test_timeouts_are_named_loss_and_a_lone_nak_is_not(tmp_path: Path) -> None:
    """Two losses the requester's timer finds (4 ms of silence each) on node1 -> node2 cost that edge a share of its
    time: loss. One loss a NAK repairs within microseconds on node0 -> node1 costs nothing that matters: that edge
    stays link-limited, its resends in the evidence."""
    spec = R.RoceRing(losses=(R.Loss(1, 1, 2, 5, nak=False), R.Loss(1, 3, 0, 9, nak=False), R.Loss(0, 2, 1, 30)))
    gen, r = _run(tmp_path, spec)
    slow = _edge(r, 1, 2)
    assert slow.limiter == "loss" and slow.confidence >= CONFIDENT and slow.timeouts == gen.timeouts == 2
    repaired = _edge(r, 0, 1)
    assert repaired.limiter == "link" and repaired.naks == 1 and repaired.timeouts == 0
    assert repaired.resent_packets == gen.resent[0, 0]
    assert any("sent again" in text for text in repaired.evidence)
    assert r.rdma is not None and r.rdma.limiter == "loss"
    assert any("node1 -> node2" in text for text in r.rdma.evidence)


def test_the_trace_shows_each_nak_and_cnp_where_the_requester_got_it(tmp_path: Path) -> None:
    """--trace: a NAK instant on node0's track at the time tshark reads for the NAK packet in node0's capture, and
    one CNP instant on node2's track per CNP packet tshark counts arriving there."""
    require(shutil.which("tshark") is not None, "needs tshark (apt-get install tshark)")
    spec = R.RoceRing(hosts=3, iterations=2, losses=(R.Loss(0, 1, 0, 12),), congestion=(R.Congestion(2, 0, 1),))
    gen, r = _run(tmp_path, spec)
    trace = trace_events(r)
    base = trace["baseTimeNanoseconds"]
    pid = {e["args"]["name"].split(" ")[0]: e["pid"] for e in trace["traceEvents"] if e.get("name") == "process_name"}

    def instants(host: str, name: str) -> list[float]:
        return [e["ts"] for e in trace["traceEvents"] if e.get("pid") == pid[host] and e.get("name") == name]

    def tshark_times(host: str, where: str) -> list[float]:
        out = subprocess.run(
            ["tshark", "-n", "-r", str(tmp_path / "run" / host / "mlx5_0.pcap"), "-Y", where, "-T", "fields"]
            + ["-e", "frame.time_epoch"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return [(Decimal(t) * 10**9 - base) / 1000 for t in out]  # type: ignore[misc]

    naks = tshark_times("node0", "infiniband.aeth.syndrome == 0x60")
    assert len(naks) == 1 and instants("node0", "NAK") == [pytest.approx(float(naks[0]), abs=0.001)]
    cnps = tshark_times("node2", "infiniband.bth.opcode == 129 && ip.dst == 10.0.0.3")
    assert len(cnps) >= 2 and len(instants("node2", "CNP")) == len(cnps)
    assert len(instants("node0", "RDMA resend")) == 1  # one go-back episode


def test_clocks_come_from_psns_both_ends_captured(tmp_path: Path) -> None:
    """node1's capture clock runs 3 ms ahead and node2's 1.5 ms behind: the PSNs of requests and ACKs that both ends
    of a queue pair captured give each offset against node0 within a microsecond (the generator's one-way delay is
    the same both ways, so the midpoint is exact)."""
    spec = R.RoceRing(hosts=3, iterations=3, clock_offsets_ns=(0, 3_000_000, -1_500_000))
    _, r = _run(tmp_path, spec)
    assert r.clock is not None and r.clock.reference == "node0"
    offsets = {h.name: h.offset_ns for h in r.clock.hosts}
    assert offsets["node1"] == pytest.approx(3_000_000, abs=1_000)
    assert offsets["node2"] == pytest.approx(-1_500_000, abs=1_000)

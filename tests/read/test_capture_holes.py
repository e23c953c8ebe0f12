"""What a capture missed (issue 47 items 1-2): a sniffer that falls behind drops records silently, and the traffic's
own sequence numbers say how much (analyze/tables/capture_holes.py); the figures then come from the other end.

Ground truth from outside the analyzer: the records removed, counted when removing them (the generator's frames
for RoCEv2, dpkt's decoding for the real DDP capture, tests/support/capture_loss.py), and the whole capture's own
answers, which the incomplete one must repeat.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analyze.api import analyze
from analyze.confidence.thresholds import CONFIDENT
from reports.html import render_html
from reports.text import summary_text
from tests.support import rocegen as R
from tests.support.capture_loss import keep_mask, remove_in_bursts, tcp_payload_between

ROOT = Path(__file__).resolve().parents[2]
COVERAGE_POINTS = 0.02  # the bound: coverage within 2 points of the share removed
DATA_FRAME = 1000  # a RoCE record longer than this on the wire carries a 4 kB payload; ACKs and CNPs are short
SPEC = R.RoceRing(link_bps=100e9, iterations=6, gradient_bytes=32 << 20, compute_ns=20_000_000)


def _coverage(result, host: str) -> float:  # type: ignore[no-untyped-def]
    (fraction,) = {c.coverage.fraction for c in result.captures if c.host == host}
    return fraction


def _judgments(result):  # type: ignore[no-untyped-def]
    """What must not change when one capture misses records: edge bytes, the count and the limiters."""
    edges = {(e.src, e.dst): e.bytes for e in result.topology.edges}
    limiters = (
        {(e.src, e.dst): (e.limiter, e.confidence >= CONFIDENT) for e in result.rdma.edges} if result.rdma else {}
    )
    return edges, (result.iterations.count, result.iterations.confident), limiters


@pytest.fixture(scope="module")
def whole_roce(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    gen = R.generate(SPEC)
    return gen, analyze([R.write_run(tmp_path_factory.mktemp("whole") / "run", gen)], workers=1)


@pytest.mark.parametrize("share", [0.1, 0.4, 0.6])
def test_a_roce_capture_that_lost_records_in_bursts(share: float, whole_roce, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    gen, whole = whole_roce
    records = gen.captures["node1"].records
    keep = keep_mask(len(records), share, burst=200, seed=int(share * 100))
    data = np.array([wire > DATA_FRAME for _, _, wire in records])
    removed = float((data & ~keep).sum() / data.sum())
    gen.captures["node1"].records = [r for r, k in zip(records, keep) if k]
    try:
        result = analyze([R.write_run(tmp_path / "run", gen)], workers=1)
    finally:
        gen.captures["node1"].records = records
    assert _coverage(result, "node1") == pytest.approx(1 - removed, abs=COVERAGE_POINTS)
    assert all(_coverage(result, h) > 0.999 for h in ("node0", "node2", "node3"))
    assert result.bin_ns == whole.bin_ns
    assert _judgments(result) == _judgments(whole)
    assert all(e.naks == 0 and e.limiter != "loss" for e in result.rdma.edges)  # the network lost nothing
    lines = summary_text(result).splitlines()
    assert lines[1].startswith("CAPTURE INCOMPLETE: node1: its capture holds ") and "capture " in lines[4] + lines[5]
    assert f"node1: {_coverage(result, 'node1'):.1%} held" in render_html(result).replace(" %", "%")


def test_a_network_loss_beside_a_capture_loss_is_told_apart(tmp_path: Path) -> None:
    """node2 -> node3 loses packets in the fabric (NAKs, resends: a loss of the network); node1's sniffer drops
    a third of its records (a loss of the capture): each is named for what it is."""
    spec = R.RoceRing(
        link_bps=100e9,
        iterations=6,
        gradient_bytes=32 << 20,
        compute_ns=20_000_000,
        losses=tuple(R.Loss(edge=2, iteration=i) for i in range(1, 5)),
    )
    gen = R.generate(spec)
    records = gen.captures["node1"].records
    keep = keep_mask(len(records), 0.33, burst=200, seed=5)
    gen.captures["node1"].records = [r for r, k in zip(records, keep) if k]
    result = analyze([R.write_run(tmp_path / "run", gen)], workers=1)
    assert _coverage(result, "node1") < 0.75
    assert _coverage(result, "node2") > 0.999 and _coverage(result, "node3") > 0.999  # resent, not missing
    lossy = {(e.src, e.dst): e for e in result.rdma.edges}
    assert lossy[("node2", "node3")].naks >= 4
    assert all(e.naks == 0 for k, e in lossy.items() if k != ("node2", "node3"))


@pytest.mark.parametrize("case, host", [("example-ddp/run", "h2"), ("real-training/ddp-8h/run", "h3")])
def test_a_ddp_capture_that_lost_records_reads_as_the_whole(case: str, host: str, tmp_path: Path) -> None:
    """Real DDP (4 hosts with markers; 8 without, its count read from the bytes) with 31 % of one host's records
    removed in bursts: that capture's coverage within 2 points of the payload dpkt counts in the removed records,
    every other capture whole, and its flows read from their other ends: the edges' bytes, the count and its
    sureness and the limiter as the whole capture gives them."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "fixtures" / case, run)
    removed = remove_in_bursts(run / host / "eth0.pcap.gz", 0.31, burst=100, seed=3)
    assert 0.25 <= removed.payload_share <= 0.4, removed
    whole = analyze([ROOT / "fixtures" / case], workers=1)
    result = analyze([run], workers=1)
    assert _coverage(result, host) == pytest.approx(1 - removed.payload_share, abs=COVERAGE_POINTS)
    assert all(_coverage(result, h.name) > 0.999 for h in result.hosts if h.name != host)
    edges, count, _ = _judgments(result)
    whole_edges, whole_count, _ = _judgments(whole)
    assert count == whole_count
    for key, nbytes in whole_edges.items():  # the edges' bytes as the whole capture gives them, within 0.1 %
        assert edges[key] == pytest.approx(nbytes, rel=1e-3), key
    assert result.transport.limiter == whole.transport.limiter
    assert result.transport.confidence == pytest.approx(whole.transport.confidence, abs=0.02)  # one edge fewer
    # no limiter read from the holes: the gapped capture's own sends are not judged from it
    assert not [e for e in result.transport.edges if e.src == host and e.limiter], result.transport.edges
    both = [f for f in result.flows if host in f.seen_by and len(f.seen_by) > 1 and f.payload_bytes > 1 << 20]
    assert both and all(f.view != host for f in both)  # every such flow read where it was whole


def test_tcpdumps_own_drop_counter_lowers_the_coverage(tmp_path: Path) -> None:
    """A capture whose flows look whole but whose tcpdump counted drops (packets it lost before filtering,
    which may not be the job's): the weaker reading stands, and says where it came from."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "fixtures" / "example-ddp" / "run", run)
    meta_path = run / "h3" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["counters"] = {"captured": 8000, "dropped_by_kernel": 2000, "dropped_by_interface": 0}
    meta_path.write_text(json.dumps(meta))
    result = analyze([run], workers=1)
    cov = next(c.coverage for c in result.captures if c.host == "h3")
    assert cov.fraction == pytest.approx(0.8, abs=1e-9)
    assert cov.source == "tcpdump's drop counters" and cov.dropped_by_tcpdump == 2000


# ---- live: a real tcpdump that falls behind, its own drop counter the truth beside the sender's byte count

SENDER = """
import socket, sys, time
total, chunk = int(sys.argv[2]), b"x" * 65536
s = socket.create_connection((sys.argv[1], 5201))
sent = 0
while sent < total:
    sent += s.send(chunk[: min(len(chunk), total - sent)])
s.shutdown(socket.SHUT_WR)
s.recv(1)
print(sent)
"""
RECEIVER = """
import socket
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 5201)); srv.listen(1)
c, _ = srv.accept(); got = 0
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    got += len(b)
c.close(); print(got)
"""
STREAM_BYTES = 150_000_000  # 1.2 s at 1 Gbit/s: the pause falls well inside the stream's sequence span


def test_a_real_tcpdump_paused_under_load_is_measured_short(tmp_path: Path, netns_cluster) -> None:  # type: ignore[no-untyped-def]
    """tcpdump with a 64 KiB buffer on the receiver of a 1 Gbit/s stream, stopped for 0.3 s mid-stream (as a
    starved sniffer is): its own counter reports the packets the kernel dropped, and ringscope's coverage reads
    the hole from the sequence numbers: the payload it saw plus the payload it finds missing is what the sender
    wrote (its own count), within 1 %, and the capture is named incomplete."""
    import signal
    import subprocess
    import sys
    import time

    from capture.tcpdump import command, find_tcpdump, parse_counters
    from tests.support.requirements import require

    require(shutil.which("tcpdump") is not None, "needs tcpdump")
    cluster = netns_cluster(2, rate="1gbit", offloads=False)  # 1,500-byte packets: 25,000 in the pause
    tx, rx = cluster.hosts
    folder = tmp_path / "run" / rx.name
    folder.mkdir(parents=True)
    argv = command(find_tcpdump(), "eth0", folder, 96)
    argv[argv.index("-B") + 1] = "64"
    dump = subprocess.Popen(["ip", "netns", "exec", rx.name, *argv], stderr=subprocess.PIPE, text=True)
    try:
        assert "listening" in (dump.stderr.readline() if dump.stderr else "")
        server = subprocess.Popen(
            ["ip", "netns", "exec", rx.name, sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.5)
        client = subprocess.Popen(
            ["ip", "netns", "exec", tx.name, sys.executable, "-c", SENDER, rx.address, str(STREAM_BYTES)],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.4)
        dump.send_signal(signal.SIGSTOP)
        time.sleep(0.3)
        dump.send_signal(signal.SIGCONT)
        sent = int(client.communicate(timeout=60)[0])
        received = int(server.communicate(timeout=60)[0])
    finally:
        dump.send_signal(signal.SIGCONT)
        dump.send_signal(signal.SIGINT)
        stderr = dump.communicate(timeout=30)[1]
    counters = parse_counters(stderr)
    assert sent == received == STREAM_BYTES and counters, stderr
    assert counters["dropped_by_kernel"] > 0, counters  # the pause overflowed the 64 KiB ring
    meta = {"schema": 1, "host": rx.name, "interface": "eth0", "addresses": [rx.address], "counters": counters}
    (folder / "meta.json").write_text(json.dumps(meta))
    result = analyze([folder], workers=1)
    (cov,) = [c.coverage for c in result.captures]
    assert cov.dropped_by_tcpdump == counters["dropped_by_kernel"] + counters["dropped_by_interface"]
    assert cov.missing_payload_bytes > 0 and cov.fraction < 1 - 0.01
    assert cov.seen_payload_bytes + cov.missing_payload_bytes == pytest.approx(STREAM_BYTES, rel=0.01)
    print(f"tcpdump dropped {counters['dropped_by_kernel']} packets; coverage {cov.fraction:.3f} ({cov.source})")


def test_a_flow_both_captures_missed_is_marked(tmp_path: Path) -> None:
    """node1's and node2's sniffers both drop records in bursts: the queue pairs from node1 to node2 have holes in
    every capture of them. Each is read from its sender's view and marked with the share of its payload that view
    holds (within 2 points of the share kept, counted on the generator's frames); the queue pairs only one capture
    missed name it and stay unmarked."""
    gen = R.generate(SPEC)
    kept_frames = {}
    for host, seed in (("node1", 11), ("node2", 12)):
        records = gen.captures[host].records
        keep = keep_mask(len(records), 0.3, burst=200, seed=seed)
        kept_frames[host] = (records, keep)
        gen.captures[host].records = [r for r, k in zip(records, keep) if k]
    result = analyze([R.write_run(tmp_path / "run", gen)], workers=1)
    records, keep = kept_frames["node1"]
    qp_of = lambda data: int.from_bytes(data[14 + 20 + 8 + 5 : 14 + 20 + 8 + 8], "big")  # noqa: E731  the BTH's
    for q, rqp in enumerate(qp for qp, _ in R._qp_numbers(SPEC, 1)):
        (flow,) = [f for f in result.flows if f.qp == rqp and f.payload_bytes > 0]
        mine = [(k, wire) for (_, data, wire), k in zip(records, keep) if wire > DATA_FRAME and qp_of(data) == rqp]
        share = sum(w for k, w in mine if k) / sum(w for _, w in mine)
        assert flow.view == "node1" and sorted(flow.short_in or []) == ["node1", "node2"], flow
        assert flow.held == pytest.approx(share, abs=COVERAGE_POINTS), (q, flow.held, share)
        assert f"which holds {flow.held:.0%} of it" in summary_text(result) or flow not in result.flows[:10]
    whole_end = [f for f in result.flows if f.qp in [qp for qp, _ in R._qp_numbers(SPEC, 0)] and f.payload_bytes]
    assert whole_end and all(f.held is None and f.short_in == ["node1"] for f in whole_end), whole_end


# ---- when: the holes placed in time (issue 47 item 1, per time window)

STRETCH_POINTS = 0.03  # a stretch's share held against the records kept in it


def test_the_holes_of_a_roce_capture_are_placed_in_time(tmp_path: Path) -> None:
    """node1's sniffer drops half its records in bursts, only between 40 % and 60 % of the run: the capture's holes
    are placed there (within a window, a hundredth of the span), their share held within 3 points of the
    generator's frames kept in them, every missing byte placed (each queue pair's other end was captured), and the
    summary says when. The whole captures carry no holes."""
    gen = R.generate(SPEC)
    records = gen.captures["node1"].records
    t = np.array([ts for ts, _, _ in records])
    lo, hi = t.min() + 0.4 * np.ptp(t), t.min() + 0.6 * np.ptp(t)
    inside = (t >= lo) & (t < hi)
    keep = keep_mask(len(records), 0.5, burst=200, seed=3) | ~inside
    gen.captures["node1"].records = [r for r, k in zip(records, keep) if k]
    result = analyze([R.write_run(tmp_path / "run", gen)], workers=1)
    (cov,) = [c.coverage for c in result.captures if c.host == "node1"]
    assert cov.holes and cov.untimed_missing_bytes == 0, cov
    window = np.ptp(t) / 100 + result.bin_ns
    data = np.array([wire > DATA_FRAME for _, _, wire in records])
    wire = np.array([w for _, _, w in records])
    for a, b, held in cov.holes:
        assert lo - window <= a < b <= hi + window, ((a - lo) / 1e6, (b - hi) / 1e6)
        span = (t >= a) & (t < b) & data
        assert held == pytest.approx(wire[span & keep].sum() / wire[span].sum(), abs=STRETCH_POINTS)
    assert all(c.coverage.holes is None for c in result.captures if c.host != "node1")
    start = min(c.first_ns for c in result.captures)
    first = f"{(cov.holes[0][0] - start) / 1e9:.3f}-"
    assert f"; missing in {first}" in summary_text(result).splitlines()[1], summary_text(result)


@pytest.mark.parametrize("case, host", [("example-ddp/run", "h2"), ("real-training/ddp-8h/run", "h3")])
def test_the_holes_of_a_ddp_capture_are_placed_in_time(case: str, host: str, tmp_path: Path) -> None:
    """Real DDP with half of one host's records removed in bursts, only from those carrying the file's 30th to
    50th percent of TCP payload: the holes fall in that stretch of time (within a window, a hundredth of the span),
    each stretch's share held within 3 points of the payload dpkt counts kept in it against the whole file's."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "fixtures" / case, run)
    pcap = run / host / "eth0.pcap.gz"
    removed = remove_in_bursts(pcap, 0.5, burst=100, seed=3, between=(0.3, 0.5))
    assert removed.between_ns and 0.3 <= removed.payload_share <= 0.7, removed
    result = analyze([run], workers=1)
    (cov,) = [c.coverage for c in result.captures if c.host == host]
    lo, hi = removed.between_ns
    (mine,) = [c for c in result.captures if c.host == host]
    window = (mine.last_ns - mine.first_ns) / 100 + 2 * result.bin_ns
    assert cov.holes and cov.untimed_missing_bytes == 0, cov
    whole = ROOT / "fixtures" / case / host / "eth0.pcap.gz"
    for a, b, held in cov.holes:
        assert lo - window <= a < b <= hi + window, ((a - lo) / 1e6, (b - hi) / 1e6)
        kept = tcp_payload_between(pcap, int(a), int(b)) / tcp_payload_between(whole, int(a), int(b))
        assert held == pytest.approx(kept, abs=STRETCH_POINTS), (held, kept)
    assert all(c.coverage.holes is None for c in result.captures if c.host != host)

"""End to end: a real torch.distributed gloo all-reduce across network namespaces, captured with tcpdump
in every namespace, must come back as the ring it was, in the direction the data took, with the bytes
and iteration count the job ran.

Ground truth is fixed before capture: 4 hosts launched in an order that is not address order, a float32
tensor of NUMEL elements (S = 4*NUMEL bytes) all-reduced ITERS times, each after a FORWARD_S sleep.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support.netns import capturing, launch, netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.requirements import require, require_module

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "fixtures" / "collective" / "gloo_allreduce.py"
NUMEL, ITERS, FORWARD_S = 1_000_000, 6, 0.3
S = 4 * NUMEL


def _capture_job(tmp_path: Path, cluster, order: list[str], port: int, markers: bool) -> Path:
    """Run tcpdump in every namespace around one gloo job; returns the capture directory."""
    run = tmp_path / "run"
    address = {h.name: h.address for h in cluster.hosts}
    for host in order:
        (run / host).mkdir(parents=True)
        meta = {"host": host, "interface": "eth0", "addresses": [address[host]], "link_speed_bps": 1e9, "mtu": 1500}
        (run / host / "meta.json").write_text(json.dumps(meta))
    with capturing({host: run / host for host in order}):
        argv = [sys.executable, str(SCRIPT), str(NUMEL), str(ITERS), str(FORWARD_S)]
        code = _launch_with_markers(order, argv, run, port) if markers else launch(order, argv, port, timeout_s=75)
        assert code == 0, f"gloo job failed with exit code {code}"
    (run / "run.json").write_text(json.dumps({"schema": 1, "hosts": order}))
    return run


def _launch_with_markers(order: list[str], argv: list[str], run: Path, port: int) -> int:
    """Like netns.launch, each rank writing markers into its host folder."""
    procs = [
        subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                host,
                "env",
                f"RANK={r}",
                f"WORLD_SIZE={len(order)}",
                f"MASTER_ADDR={order[0]}",
                f"MASTER_PORT={port}",
                "GLOO_SOCKET_IFNAME=eth0",
                "LOCAL_RANK=0",
                *argv,
                str(run / host / "markers.jsonl"),
            ]
        )
        for r, host in enumerate(order)
    ]
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=75))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            codes.append(124)
    return max(codes, key=abs)


def test_gloo_ring_in_netns(tmp_path, netns_cluster):  # noqa: F811
    require(shutil.which("tcpdump") is not None, "needs tcpdump")
    require_module("torch")
    from analyze.api import analyze

    cluster = netns_cluster(4)
    names = cluster.names  # addresses .1 .. .4 in this order
    order = [names[2], names[0], names[3], names[1]]  # launch order != address order
    t0 = time.monotonic()
    run = _capture_job(tmp_path, cluster, order, port=29700 + int(time.time()) % 200, markers=True)
    assert time.monotonic() - t0 < 80
    n = len(order)

    # 1. with markers, payload bytes: the tightest check of bytes per iteration
    res = analyze([run], byte_mode="payload", workers=1)
    topo, its = res.topology, res.iterations
    assert topo.kind == "ring", topo
    # gloo's ring: rank r sends to rank r-1, so the data visits the launch order backwards
    assert topo.order == [order[0]] + order[:0:-1]
    assert topo.direction == "against_launch_order" and topo.matches_launch_order is True
    assert [(e.src, e.dst) for e in topo.edges] == [(order[r], order[r - 1]) for r in (0, 3, 2, 1)]
    assert its.source == "markers" and its.count == ITERS
    theory = 2 * (n - 1) / n * S
    # gloo frames each message with a small preamble and sends a few small notifications back on each
    # pair (measured: 1,728 payload bytes per host per all-reduce, 2.9e-4 of 6 MB); allow 0.2%, plus any
    # TCP retransmissions the analyzer counted (re-sent payload is on the wire again; 0 on a quiet machine)
    address = {h.name: h.address for h in cluster.hosts}
    flows = res.tables.flows
    resent = {h: int(flows.loc[flows["src"] == address[h], "retransmitted_bytes"].sum()) for h in order}
    into = {h: int(flows.loc[flows["dst"] == address[h], "retransmitted_bytes"].sum()) for h in order}
    for it in its.per_iteration:
        for host in order:
            assert theory <= it.bytes_by_host[host] <= theory * 1.002 + resent[host], (host, it, resent)
            assert theory <= it.rx_bytes_by_host[host] <= theory * 1.002 + into[host], (host, it, into)
    # retransmissions must stay an exception. On a loaded 2-core VM, TCP's RTO and tail-loss probes resend
    # segments spuriously (seen: 1.5 % of the bytes in one CI run), so the guard is 5 %; the per-iteration
    # bounds above only ever add a host's own counted re-sent bytes
    assert sum(resent.values()) <= 0.05 * S * ITERS
    assert its.gradient_bytes == S and its.gradient_bytes_source == "markers"
    assert 1.0 <= its.theory_ratio <= 1.002  # the median host-iteration: untouched by a rare retransmission
    assert abs(its.implied_gradient_bytes / S - 1) < 0.002

    # 2. without markers, ip bytes: iterations inferred from the traffic alone
    for host in order:
        (run / host / "markers.jsonl").rename(run / host / "markers.jsonl.hidden")
    res = analyze([run], byte_mode="ip", workers=1, gradient_bytes=S)
    topo, its = res.topology, res.iterations
    assert topo.kind == "ring" and topo.direction == "against_launch_order"
    assert its.source == "inferred" and its.count == ITERS, its.notes
    assert its.confidence >= 0.7
    assert abs(its.period_ns / 1e9 - FORWARD_S) < 0.1
    # IP and TCP headers ride on top: veth hands tcpdump GSO segments (one header per up to 64 KB), so
    # ip bytes add well under 1% here (on a 1500-byte MTU NIC they would add ~3.5%)
    assert 1.0 <= its.theory_ratio <= 1.01

    # 3. the same judgment at half and twice the bin chosen from the traffic (issue 45): on this new capture,
    # every edge's limiter and confidence alike, and no count but the ranks' own stated as fact
    around = [analyze([run], byte_mode="ip", workers=1, gradient_bytes=S, bin_ns=int(res.bin_ns * f)) for f in (0.5, 2)]
    judged = {(e.src, e.dst): (e.limiter, e.confidence) for e in res.transport.edges}
    for other in around:
        assert {(e.src, e.dst): (e.limiter, e.confidence) for e in other.transport.edges} == judged, other.bin_ns
        assert other.iterations.count == ITERS or not other.iterations.confident, other.iterations.evidence
    print(
        json.dumps(
            {
                "theory_ratio_ip": its.theory_ratio,
                "count": its.count,
                "method": its.method,
                "confidence": its.confidence,
                "topology_confidence": topo.confidence,
            }
        )
    )

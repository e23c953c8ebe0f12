"""NCCL log: the real NCCL 2.4.8 sample parses to the ring it states; new-style lines; comparison with the
packet ring through the analyzer and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]

from fixtures.collective import collective_synth as synth  # noqa: E402

from analyze.collective.nccl_log import compare_rings, parse_nccl_log, read_nccl_log  # noqa: E402

SAMPLE = ROOT / "fixtures" / "nccl" / "log.example"
A, B = "172.31.89.192", "172.31.93.195"


def test_sample_states_its_ring():
    log = read_nccl_log(SAMPLE)
    assert log.nranks == 8
    assert log.rings == {0: list(range(8)), 1: list(range(8))}
    assert log.rank_host == {r: "ip-172-31-89-192" if r < 4 else "ip-172-31-93-195" for r in range(8)}
    assert log.host_address == {"ip-172-31-89-192": A, "ip-172-31-93-195": B}
    assert log.sockets_per_peer == 16 and log.ranks_per_host() == 4
    net = {(e["src"], e["dst"]) for e in log.edges if e["via"] == "NET/Socket/0"}
    assert net == {(3, 4), (7, 0), (0, 4), (4, 0)}
    p2p = {(e["src"], e["dst"]) for e in log.edges if e["via"] == "P2P/IPC" and e["channel"] == 0}
    assert {(r, r + 1) for r in (0, 1, 2, 4, 5, 6)} <= p2p
    assert log.trees[0][0] == {"parent": None, "children": [1, 4]}
    assert log.trees[1][4] == {"parent": None, "children": [5, 0]}
    assert log.host_ring() == [A, B]


def test_new_style_lines():
    text = "\n".join(
        [
            "node1:100:200 [0] NCCL INFO Channel 00/02 :    0   2   1   3",
            "node1:100:200 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/Socket/0",
            "node1:100:200 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->2",
            "node1:100:200 [0] NCCL INFO comm 0x55d0 rank 0 nranks 4 cudaDev 0 busId 1000 - Init COMPLETE",
            "node2:7:8 [0] NCCL INFO comm 0x55d1 rank 2 nranks 4 cudaDev 0 busId 1000 - Init COMPLETE",
            "node1:101:201 [1] NCCL INFO comm 0x55d2 rank 1 nranks 4 cudaDev 1 busId 2000 - Init COMPLETE",
            "node2:9:8 [1] NCCL INFO comm 0x55d3 rank 3 nranks 4 cudaDev 1 busId 2000 - Init COMPLETE",
            "node1:100:200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        ]
    )
    log = parse_nccl_log(text)
    assert log.nranks == 4 and log.rings == {0: [0, 2, 1, 3]}
    assert log.edges == [{"channel": 0, "src": 0, "dst": 2, "via": "NET/Socket/0", "kind": "send"}]
    assert log.trees[0][0] == {"parent": None, "children": [1]} and log.trees[1][0] == {"parent": 2, "children": []}
    # ring 0 2 1 3 alternates servers: node1 node2 node1 node2 -> not collapsible to one visit each
    assert log.host_ring() == ["node1", "node2", "node1", "node2"]
    out = compare_rings(log, ["node1", "node2"], {})
    assert out.matches is False


def _two_server_run(tmp_path: Path) -> Path:
    """Two servers with the sample's addresses exchanging a ring all-reduce both ways."""
    pk = np.concatenate([synth.control(2), synth.plan(synth.ring_pairs(2, 8_000_000), 4, 200_000_000)])
    return synth.write_run(tmp_path / "run", pk, ["ip-172-31-89-192", "ip-172-31-93-195"], [A, B])


def test_compare_with_packets(tmp_path):
    from analyze.api import analyze

    res = analyze([_two_server_run(tmp_path)], workers=1, nccl_log=SAMPLE)
    topo = res.topology
    assert topo.kind == "ring" and topo.nccl.matches is True
    assert topo.nccl.host_ring == ["ip-172-31-89-192", "ip-172-31-93-195"]
    assert any("4 ranks per server" in n for n in topo.notes)
    assert res.iterations.ring_size == 8  # N for 2(N-1)/N is the log's rank count


def test_cli_options(tmp_path):
    from cli import app

    run = _two_server_run(tmp_path)
    out = tmp_path / "r.json"
    done = CliRunner().invoke(
        app,
        [
            "analyze",
            str(run),
            "--json",
            str(out),
            "--nccl-log",
            str(SAMPLE),
            "--gradient-bytes",
            "8MB",
            "--launch-order",
            "ip-172-31-93-195,ip-172-31-89-192",
        ],
    )
    assert done.exit_code == 0, done.output
    data = json.loads(out.read_text())
    assert data["topology"]["launch_order"] == ["ip-172-31-93-195", "ip-172-31-89-192"]
    assert data["iterations"]["gradient_bytes"] == 8e6 and data["iterations"]["count"] == 4
    assert "topology: ring" in done.output and "iterations: 4" in done.output
    bad = CliRunner().invoke(app, ["analyze", str(run), "--gradient-bytes", "lots"])
    assert bad.exit_code == 2 and "bad size" in bad.output

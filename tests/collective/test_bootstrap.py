"""NCCL's bootstrap beside RDMA data (issue 47 item 3): set apart from the collective, and read for the ranks.

Ground truth from the generators: the RoCEv2 ring's data (tests/support/rocegen.py) and NCCL's bootstrap over the
same hosts (tests/support/ncclboot.py: each rank to the root, the root's call-backs, the bootstrap ring), with the
ranks placed on each host given before the run; the data without the bootstrap gives the answers the data alone
gives. Read as the job, the bootstrap's 16 KB were a "double binary tree" and the RDMA ring's 400 MB were set
aside as other traffic.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from analyze.api import analyze
from reports.text import summary_text
from tests.support import ncclboot, rasgen, rocegen as R
from tests.support.pcapgen import ETHERNET, TcpConn

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "analyze" / "model" / "result.schema.json").read_text())
SPEC = R.RoceRing(hosts=4, iterations=8)


def _run(tmp: Path, placement: list[int], command: list[str] | None = None, loopback: bool = False):  # type: ignore[no-untyped-def]
    """The ring's data with NCCL's bootstrap for PLACEMENT (ranks on each host; none: the data alone); LOOPBACK:
    each capture holds its host's loopback too, with the ranks' NCCL proxy connections."""
    addresses = [SPEC.address(h) for h in range(SPEC.hosts)]
    frames = ncclboot.bootstrap(addresses, placement, R.BASE_NS - 2 * 10**9) if placement else {}
    if loopback:
        for h, more in ncclboot.proxies(addresses, placement, R.BASE_NS - 10**9).items():
            frames[h] = sorted([*frames.get(h, []), *more], key=lambda f: f.ts_ns)
    run = R.write_run(tmp / "run", R.with_frames(R.generate(SPEC), frames))
    if command:
        doc = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**doc, "command": command}))
    return analyze([run], workers=1)


@pytest.fixture(scope="module")
def data_alone(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return _run(tmp_path_factory.mktemp("alone"), [])


def _answers(result):  # type: ignore[no-untyped-def]
    return (
        result.topology.kind,
        result.topology.order,
        (result.iterations.count, result.iterations.confident),
        sorted((e.src, e.dst, e.limiter, e.payload_bytes) for e in result.rdma.edges),
        result.other_traffic,
    )


@pytest.mark.parametrize("launched", [False, True])
def test_the_bootstrap_is_set_apart_and_counts_the_ranks(tmp_path: Path, data_alone, launched: bool) -> None:  # type: ignore[no-untyped-def]
    """Two ranks per host: 6 reach the root from the 3 other hosts, 6 call-backs, 4 ring connections cross hosts.
    The root's host's own ranks are taken as the others', sure where the launch command says so too."""
    command = ["torchrun", "--nproc-per-node", "2", "train.py"] if launched else None
    result = _run(tmp_path, [2, 2, 2, 2], command)
    b = result.bootstrap
    assert b is not None and b.root == "node0:51000" and b.connections == 6 + 6 + 4
    assert b.ranks_per_host == {"node1": 2, "node2": 2, "node3": 2} and b.root_host_ranks == 2
    assert _answers(result) == _answers(data_alone)
    its = result.iterations
    assert (its.ring_size, its.ranks_per_host, its.ring_size_sure) == (8, {f"node{h}": 2 for h in range(4)}, launched)
    assert its.ring_size_source.startswith("NCCL's bootstrap: ranks reached its root node0:51000")
    assert any("world size" in why for why in result.scaling.unsure.because) is not launched
    jsonschema.Draft202012Validator(SCHEMA).validate(result.to_json())
    assert "NCCL bootstrap: 6 ranks' connections to its root node0:51000" in summary_text(result)


def test_a_root_host_unlike_the_others_is_not_stated_as_fact(tmp_path: Path, data_alone) -> None:  # type: ignore[no-untyped-def]
    """One rank on the root's host, three on each other: the others are counted right; the root's own (over
    loopback) are taken as theirs, and W is said to be unsure, not stated."""
    result = _run(tmp_path, [1, 3, 3, 3])
    assert result.bootstrap.ranks_per_host == {"node1": 3, "node2": 3, "node3": 3}
    assert _answers(result) == _answers(data_alone)
    assert result.iterations.ring_size_sure is False
    assert any("world size" in why for why in result.scaling.unsure.because)


def test_a_store_that_answers_is_no_bootstrap() -> None:
    """torch's TCP store answers each rank on the same connection: a real gloo capture holds no bootstrap."""
    result = analyze([ROOT / "fixtures" / "example-ddp" / "run"], workers=1)
    assert result.bootstrap is None


def test_ras_and_the_bootstrap_beside_the_data_at_once(tmp_path: Path, data_alone) -> None:  # type: ignore[no-untyped-def]
    """The issue's capture: NCCL's bootstrap at init and its RAS keep-alives through the run, both beside the RoCE
    data; node2 hangs 26 s. Both are set apart (the data's answers as alone), the ranks counted, the gap named."""
    addresses = [SPEC.address(h) for h in range(SPEC.hosts)]
    frames = ncclboot.bootstrap(addresses, [2, 2, 2, 2], R.BASE_NS - 25 * 10**9)
    ras = rasgen.keepalives(addresses, R.BASE_NS - 20 * 10**9, 70, (rasgen.Hang(host=2, from_s=30, seconds=26),))
    gen = R.with_frames(R.with_frames(R.generate(SPEC), frames), ras)
    result = analyze([R.write_run(tmp_path / "run", gen)], workers=1)
    assert _answers(result) == _answers(data_alone)
    assert result.bootstrap is not None and result.bootstrap.ranks_per_host == {f"node{h}": 2 for h in (1, 2, 3)}
    assert result.iterations.ring_size == 8
    (silence,) = result.keepalives.silences
    assert silence.host == "node2" and "20 s" in silence.meaning and silence.seconds == pytest.approx(26, abs=1.1)


def test_the_proxies_count_the_root_hosts_ranks(tmp_path: Path, data_alone) -> None:  # type: ignore[no-untyped-def]
    """Captures that hold their hosts' loopback (tcpdump -i any) hold each rank's connection to its own NCCL proxy:
    one listener per rank. With 3 ranks on the root's host and 2 on the others, the bootstrap alone takes the
    root's host's as the others' (2, unsure); its 3 proxies count them: W = 9, sure, every host's proxies agreeing
    with its connections to the root. The proxies' connections are set apart with the bootstrap; the data's answers
    are as alone."""
    result = _run(tmp_path, [3, 2, 2, 2], loopback=True)
    b = result.bootstrap
    assert b is not None and b.proxies == {"node0": 3, "node1": 2, "node2": 2, "node3": 2} and b.proxy_connections == 9
    assert b.ranks_per_host == {"node1": 2, "node2": 2, "node3": 2}
    its = result.iterations
    assert (its.ring_size, its.ring_size_sure) == (9, True), its.ring_size_source
    assert its.ranks_per_host == {"node0": 3, "node1": 2, "node2": 2, "node3": 2}
    assert "3 NCCL proxies on the root's host node0" in its.ring_size_source
    assert _answers(result) == _answers(data_alone)
    assert "9 connection(s) to NCCL's proxies inside their hosts" in summary_text(result)
    jsonschema.Draft202012Validator(SCHEMA).validate(result.to_json())
    without = _run(tmp_path / "nic", [3, 2, 2, 2])  # the NIC's capture: no proxies, the root's host assumed
    assert without.bootstrap is not None and without.bootstrap.proxies is None
    assert (without.iterations.ring_size, without.iterations.ring_size_sure) == (8, False)


def test_a_store_the_other_hosts_reach_is_no_proxy(tmp_path: Path) -> None:
    """A rendezvous store on the root's host (torch's TCPStore at port 29500) that its own ranks reach over
    loopback and the other hosts' over the NIC, small messages both ways at init like a proxy's: not a proxy,
    as no other host connects to a proxy. The root's host still counts 3."""
    addresses = [SPEC.address(h) for h in range(SPEC.hosts)]
    frames = ncclboot.bootstrap(addresses, [3, 2, 2, 2], R.BASE_NS - 2 * 10**9)
    for h, more in ncclboot.proxies(addresses, [3, 2, 2, 2], R.BASE_NS - 10**9).items():
        frames[h] += more
    t = R.BASE_NS - 10**9 // 2
    for k, client in enumerate([0, 1]):  # node0's own rank over loopback, node1's over the NIC
        conn = TcpConn(ETHERNET, addresses[client], addresses[0], 49_000 + k, 29_500)
        store = conn.handshake(t) + [conn.data(t + 1000, 40), conn.data(t + 2000, 40, forward=False)]
        for h in {client, 0}:
            frames[h] += store
    for h in frames:
        frames[h].sort(key=lambda f: f.ts_ns)
    result = analyze([R.write_run(tmp_path / "run", R.with_frames(R.generate(SPEC), frames))], workers=1)
    assert result.bootstrap is not None and result.bootstrap.proxies == {"node0": 3, "node1": 2, "node2": 2, "node3": 2}

"""`ringscope analyze --scheduler`: the hosts' scans run on a real Dask cluster (scheduler and workers as
subprocesses on 127.0.0.1), give the local run's result and the example's ground truth, and fail in one line."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from analyze.read.cluster import KEY_PREFIX, TIMEOUT_ENV, ClusterError, scan_hosts_on_cluster
from tests.benchmarks.synth import Truth, host_ip, ring_capture
from tests.support.clirun import one_line_error, ringscope
from tests.support.dask_cluster import Cluster, dask_cluster, have_dask
from tests.support.expect import FIXTURES
from tests.support.requirements import require, require_module

EXAMPLE = FIXTURES / "example"  # absolute, so local and cluster runs name files alike
EXPECTED = json.loads((EXAMPLE / "expected.json").read_text())
MANY = 64  # hosts in the many-host smoke run (the benchmark's smallest row: tests.benchmarks.many_hosts)


def _require_dask() -> None:
    require(have_dask(), "needs Dask: pip install 'ringscope[dask]'")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    _require_dask()
    with dask_cluster(tmp_path_factory.mktemp("dask"), workers=2) as c:
        yield c


def scan_tasks(cluster: Cluster, finish: str) -> dict[str, int]:
    """Per worker: how many ringscope scan tasks went from executing to `finish` (memory or error) there."""

    def count(dask_worker: Any) -> int:
        return sum(
            1
            for e in dask_worker.state.log
            if isinstance(e[0], str) and e[0].startswith(KEY_PREFIX) and e[1:3] == ("executing", finish)
        )

    return cluster.client.run(count)


def _delta(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(after.values()) - sum(before.values())


def test_cluster_does_the_scans_and_matches_the_local_run_and_ground_truth(cluster: Cluster, tmp_path: Path) -> None:
    """One scan task per host runs on the workers; the JSON equals the local run's and the generator's truth."""
    before = scan_tasks(cluster, "memory")
    remote = ringscope("analyze", EXAMPLE, "--scheduler", cluster.address, "--json", tmp_path / "remote.json")
    assert remote.returncode == 0, remote.stderr
    assert _delta(before, scan_tasks(cluster, "memory")) == len(EXPECTED["hosts"])
    local = ringscope("analyze", EXAMPLE, "--json", tmp_path / "local.json")
    assert local.returncode == 0, local.stderr
    doc = json.loads((tmp_path / "remote.json").read_text())
    assert doc == json.loads((tmp_path / "local.json").read_text())
    assert remote.stdout == local.stdout
    truth = EXPECTED["hosts"]
    assert {h["name"]: (h["tx_bytes"], h["rx_bytes"], h["tx_packets"]) for h in doc["hosts"]} == {
        name: (t["tx_ip_bytes"], t["rx_ip_bytes"], t["tx_packets"]) for name, t in truth.items()
    }
    assert doc["topology"]["order"] == EXPECTED["ring_data_order"]
    assert {(e["src"], e["dst"]) for e in doc["topology"]["edges"]} == {
        (e["src"], e["dst"]) for e in EXPECTED["ring_edges"]
    }


def test_sixty_four_hosts_on_the_cluster_match_the_local_run_and_each_capture(cluster: Cluster, tmp_path: Path) -> None:
    """The many-host smoke run: a 64-host ring (synthetic, one capture per host, addresses that do not wrap) read on
    the cluster and locally gives one result; each host's sent and received bytes and sent packets are its own
    capture's (the generator's count), the ring runs host1, host64, ..., host2 (each host sends to its
    predecessor), an iteration count is right or unsure, and the summary stays a screenful. Timings per host at 64,
    512 and 4,096 hosts live in the benchmark (run_benchmark.py --many-hosts), not here."""
    truths: dict[str, Truth] = {}
    for me in range(1, MANY + 1):
        truths[f"host{me}"] = ring_capture(tmp_path / f"host{me}.pcap", packets=2_000, hosts=MANY, me=me, seed=me)
    remote = ringscope("analyze", tmp_path, "--scheduler", cluster.address, "--json", tmp_path / "remote.json")
    assert remote.returncode == 0, remote.stderr
    local = ringscope("analyze", tmp_path, "--json", tmp_path / "local.json")
    assert local.returncode == 0, local.stderr
    doc = json.loads((tmp_path / "remote.json").read_text())
    assert doc == json.loads((tmp_path / "local.json").read_text())
    assert remote.stdout == local.stdout and len(local.stdout.splitlines()) <= 80, local.stdout

    def own(name: str) -> tuple[int, int, int]:
        t, ip = truths[name], host_ip(int(name[4:]))
        sent = [s == ip for s in t.src]
        got = [d == ip for d in t.dst]
        return (
            int(t.ip_bytes[sent].sum()),
            int(t.ip_bytes[got].sum()),
            int(t.packets[sent].sum()),
        )

    assert {h["name"]: (h["tx_bytes"], h["rx_bytes"], h["tx_packets"]) for h in doc["hosts"]} == {
        name: own(name) for name in truths
    }
    topology = doc["topology"]
    assert topology["kind"] == "ring" and topology["order"] == ["host1", *(f"host{i}" for i in range(MANY, 1, -1))]
    its = doc["iterations"]
    assert not its["confident"] or its["count"] == 50, (its["count"], its["confidence"])


def test_convert_writes_the_dataset_on_the_workers(cluster: Cluster, tmp_path: Path) -> None:
    """`convert --scheduler`: a task per host on the workers writes what a local conversion writes, and the
    dataset analyzes to the local result and the generator's truth."""
    duckdb = require_module("duckdb")
    before = scan_tasks(cluster, "memory")
    remote = ringscope("convert", EXAMPLE, "--parquet", tmp_path / "remote", "--scheduler", cluster.address)
    assert remote.returncode == 0, remote.stderr
    assert _delta(before, scan_tasks(cluster, "memory")) == len(EXPECTED["hosts"])
    assert ringscope("convert", EXAMPLE, "--parquet", tmp_path / "local").returncode == 0
    for table in ("packets", "flows", "flow_bins", "samples", "files"):
        rows = [
            sorted(duckdb.sql(f"select * from read_parquet('{tmp_path}/{side}/{table}/*/*.parquet')").fetchall())
            for side in ("remote", "local")
        ]
        assert rows[0] == rows[1], table
    proc = ringscope("analyze", tmp_path / "remote", "--json", tmp_path / "remote.json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "remote.json").read_text())
    assert {h["name"]: (h["tx_bytes"], h["tx_packets"]) for h in doc["hosts"]} == {
        name: (t["tx_ip_bytes"], t["tx_packets"]) for name, t in EXPECTED["hosts"].items()
    }


def test_compressed_captures_are_inflated_on_the_workers(cluster: Cluster, tmp_path: Path) -> None:
    """A real DDP run's gzip captures read on the cluster: each Dask worker forks its inflating process as a local
    run does, and the JSON is the local run's."""
    real = FIXTURES.parent / "fixtures/real-training/ddp-100mbit/run"
    before = scan_tasks(cluster, "memory")
    remote = ringscope("analyze", real, "--scheduler", cluster.address, "--json", tmp_path / "remote.json")
    assert remote.returncode == 0, remote.stderr
    assert _delta(before, scan_tasks(cluster, "memory")) == 4
    local = ringscope("analyze", real, "--json", tmp_path / "local.json")
    assert local.returncode == 0, local.stderr
    doc = json.loads((tmp_path / "remote.json").read_text())
    assert doc == json.loads((tmp_path / "local.json").read_text())
    assert {c["format"] for c in doc["captures"]} == {"pcap-us-le+gzip"}


def test_api_reports_progress_once_per_host_with_its_bytes(cluster: Cluster) -> None:
    """analyze(..., scheduler=) calls progress(path, bytes) as each host's task completes."""
    from analyze.api import analyze

    seen: list[tuple[Path, int]] = []
    before = scan_tasks(cluster, "memory")
    result = analyze([EXAMPLE], scheduler=cluster.address, progress=lambda p, n: seen.append((p, n)))
    assert _delta(before, scan_tasks(cluster, "memory")) == len(EXPECTED["hosts"])
    files = sorted(EXAMPLE.glob("*/eth0.pcap"))
    assert sorted(seen) == [(f, f.stat().st_size) for f in files]
    assert {h.name: h.tx_bytes for h in result.hosts} == {n: t["tx_ip_bytes"] for n, t in EXPECTED["hosts"].items()}


def test_a_bad_file_read_on_a_worker_gives_the_local_one_line_error(cluster: Cluster, tmp_path: Path) -> None:
    """The FileError raised on the worker crosses back and ends in the same line as a local run."""
    good, bad = tmp_path / "a.pcap", tmp_path / "b.pcap"
    good.write_bytes((EXAMPLE / "h1/eth0.pcap").read_bytes())
    bad.write_bytes((EXAMPLE / "h2/eth0.pcap").read_bytes()[:10])
    before = scan_tasks(cluster, "error")
    remote = one_line_error(ringscope("analyze", good, bad, "--scheduler", cluster.address))
    assert _delta(before, scan_tasks(cluster, "error")) == 1
    assert remote == one_line_error(ringscope("analyze", good, bad))
    assert remote == f"ringscope: error: {bad}: offset 10: pcap file header cut short (10 of 24 bytes)"


def test_unreachable_scheduler_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listens on the port: one line naming the address after the connect timeout, exit 2."""
    _require_dask()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv(TIMEOUT_ENV, "1s")
    line = one_line_error(ringscope("analyze", EXAMPLE, "--scheduler", address, timeout=30))
    assert line.startswith(f"ringscope: error: cannot reach Dask scheduler at {address}: "), line


def test_a_worker_that_dies_is_one_line(tmp_path: Path) -> None:
    """A worker process that dies in the scan (here: by design, on every try) ends the run in one line."""
    _require_dask()
    preload = tmp_path / "die.py"
    preload.write_text(
        "import os\nimport analyze.read.scan\nanalyze.read.scan.scan_stream = lambda *a, **k: os._exit(1)\n"
    )
    with dask_cluster(
        tmp_path,
        workers=1,
        worker_args=("--preload", str(preload)),
        scheduler_env={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"},
    ) as c:
        line = one_line_error(ringscope("analyze", EXAMPLE / "h1", "--scheduler", c.address))
    assert (
        line == f"ringscope: error: Dask workers kept dying while reading {EXAMPLE / 'h1/eth0.pcap'} "
        f"(out of memory? see the worker logs)"
    )


def test_workers_and_scheduler_together_are_rejected() -> None:
    line = one_line_error(ringscope("analyze", EXAMPLE, "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"))
    assert "--workers" in line and "--scheduler" in line


def test_without_dask_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(ClusterError, match=r"pip install 'ringscope\[dask\]'"):
        scan_hosts_on_cluster("tcp://127.0.0.1:1", [[EXAMPLE / "h1/eth0.pcap"]], [1], {"bin_ns": 1, "byte_mode": 0})

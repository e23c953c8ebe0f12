"""Which interface an agent captures when nobody says --iface: on the two-network layout of real cluster nodes
(a management NIC holding the default route, a training NIC without one), with host names resolving to the
management addresses or only to the host itself. Ground truth is the interface the job was told to use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from capture import hints
from netns import IFACE, MGMT_IFACE, launch_argv, netns_cluster  # noqa: F401  (pytest fixture)
from pcap_bytes import tcp_bytes

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
AGENT = ["env", f"PYTHONPATH={ROOT}", PY, "-m", "capture", "agent"]
DDP = ["env", f"PYTHONPATH={ROOT}", PY, "-m", "capture.workloads.ddp_train"]


def test_the_jobs_own_settings_are_read_from_its_environment_and_command():
    found = hints.from_command(
        ["env", "NCCL_SOCKET_IFNAME=ib0,eth1", "torchrun", "--master-addr=10.1.2.3", "--nnodes", "2", "t.py"]
    )
    assert found.ifaces == [("ib0,eth1", "NCCL_SOCKET_IFNAME")]
    assert found.addresses == [("10.1.2.3", "torchrun --master-addr")]
    found = hints.from_command(["horovodrun", "--network-interface", "eth2", "-np", "4", "python", "t.py"])
    assert found.ifaces == [("eth2", "horovodrun --network-interface")]
    found = hints.from_command(["mpirun", "-mca", "btl_tcp_if_include", "eth3", "python", "t.py"])
    assert found.ifaces == [("eth3", "mpirun btl_tcp_if_include")]
    found = hints.from_command(["torchrun", "--rdzv-endpoint", "node1:29400", "t.py"])
    assert found.addresses == [("node1", "torchrun --rdzv-endpoint")]
    assert hints.from_environment({"GLOO_SOCKET_IFNAME": "eth0", "MASTER_ADDR": "n1"}).as_args() == [
        "--iface-hint",
        "eth0@GLOO_SOCKET_IFNAME",
        "--address-hint",
        "n1@MASTER_ADDR",
    ]
    assert hints.parse_arg("eth0@GLOO_SOCKET_IFNAME") == ("eth0", "GLOO_SOCKET_IFNAME")


def test_interface_specs_follow_nccl():
    names = ["lo", "eth0", "eth1", "ib0", "mgmt0"]
    assert hints.matches("eth", names) == ["eth0", "eth1"]
    assert hints.matches("=eth1", names) == ["eth1"]
    assert hints.matches("^eth,lo", names) == ["ib0", "mgmt0"]
    assert hints.matches("ib,mgmt", names) == ["ib0", "mgmt0"]


def run_agent(cluster, host: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The agent on HOST for a moment, told only who its peers are (as `capture run` tells it)."""
    words = [f"{k}={v}" for k, v in (env or {}).items()]
    argv = ["ip", "netns", "exec", host, "env", *words, *AGENT, "--peers", ",".join(cluster.names), *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)


def chosen(done: subprocess.CompletedProcess, out: Path) -> tuple[str, str]:
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "meta.json").read_text())
    return meta["interface"], meta["interface_reason"]


def test_agent_choice_on_two_networks(tmp_path, netns_cluster):  # noqa: F811
    mgmt = netns_cluster(3, two_networks="mgmt")
    first, second = mgmt.hosts[0], mgmt.hosts[1]
    out = tmp_path / "a"
    # names resolve to management addresses and the job says nothing: where the names route (as the job would)
    iface, reason = chosen(run_agent(mgmt, first.name, "--out", str(out), "--duration", "0.2"), out)
    assert (iface, reason) == (MGMT_IFACE, "route to 2 of 2 other host(s)")
    # the job's interface setting wins over the names
    out = tmp_path / "b"
    done = run_agent(mgmt, first.name, "--out", str(out), "--duration", "0.2", env={"GLOO_SOCKET_IFNAME": IFACE})
    assert chosen(done, out) == (IFACE, f"GLOO_SOCKET_IFNAME={IFACE}")

    alone = netns_cluster(3, two_networks="self")
    first, second = alone.hosts[0], alone.hosts[1]
    # only its own name resolves: never its own peer, and no silent guess
    done = run_agent(alone, first.name, "--out", str(tmp_path / "c"), "--duration", "0.2")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"({alone.names[1]}, {alone.names[2]}) do not resolve or route here" in done.stderr
    assert f"interfaces up: {IFACE}, {MGMT_IFACE}: pass --iface NAME" in done.stderr
    # MASTER_ADDR on the training network: routed through eth0 on the others, held by eth0 on its own host
    for host, how in ((second.name, "routed through"), (first.name, "held by")):
        out = tmp_path / f"d-{host}"
        done = run_agent(alone, host, "--out", str(out), "--duration", "0.2", env={"MASTER_ADDR": first.address})
        assert chosen(done, out) == (IFACE, f"MASTER_ADDR={first.address} ({how} {IFACE})")


@pytest.mark.parametrize("names, setting", [("self", "MASTER_ADDR"), ("mgmt", "GLOO_SOCKET_IFNAME")])
def test_real_ddp_on_two_networks_is_captured_on_the_training_nic(tmp_path, netns_cluster, names, setting):  # noqa: F811
    """`capture run` with no --iface: the job's own setting, seen on its command line, picks the training NIC
    on every host; its captures hold the all-reduce (2(N-1)/N of the gradient per iteration from every host)."""
    pytest.importorskip("torch")
    cluster = netns_cluster(3, rate="1gbit", two_networks=names)
    hosts = [cluster.names[1], cluster.names[2], cluster.names[0]]  # launch order differs from address order
    address = {h.name: h.address for h in cluster.hosts}
    value = address[hosts[0]] if setting == "MASTER_ADDR" else IFACE
    run, iters = tmp_path / "run", 4
    done = subprocess.run(
        [
            *[PY, str(ROOT / "cli.py"), "capture", "run", "--out", str(run), "--hosts", ",".join(hosts)],
            *["--remote-shell", "ip netns exec {host}", "--"],
            *["env", f"{setting}={value}"],
            *launch_argv(hosts, [*DDP, "--params", "500000", "--batch-size", "8", "--iters", str(iters)]),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(next(line for line in done.stdout.splitlines() if '"ddp_train"' in line))
    n = len(hosts)
    for host in hosts:
        meta = json.loads((run / host / "meta.json").read_text())
        assert meta["interface"] == IFACE and meta["interface_reason"].startswith(f"{setting}={value}"), meta
        stream, _wire = tcp_bytes(run / host / f"{IFACE}.pcap", src=address[host])
        assert stream >= iters * 2 * (n - 1) / n * summary["gradient_bytes"]

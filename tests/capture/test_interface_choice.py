"""Which interface an agent captures when nobody says --iface: on the two-network layout of real cluster nodes
(a management NIC holding the default route, a training NIC without one), with host names resolving to the
management addresses or only to the host itself. Ground truth is the interface the job was told to use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from capture import hints, netinfo
from capture.agent import READY_LINE
from capture.errors import CaptureError
from tests.support.netns import IFACE, MGMT_IFACE, launch_argv, netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.pcap_bytes import tcp_bytes
from tests.support.requirements import require_module

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


def fake_host(monkeypatch: pytest.MonkeyPatch, root: Path, interfaces: dict[str, str]) -> None:
    """A host whose /sys/class/net holds INTERFACES ({name: operstate}), holding no address, on which no name
    resolves: what choose_interface sees of a single-NIC pod whose peers' names are unknown to it."""
    for name, state in interfaces.items():
        (root / name).mkdir(parents=True)
        (root / name / "operstate").write_text(state + "\n")
    monkeypatch.setattr(netinfo, "SYS_NET", root)
    monkeypatch.setattr(netinfo, "local_addresses", lambda: {})
    monkeypatch.setattr(netinfo, "resolve", lambda host: None)


def test_the_only_interface_up_is_taken_when_nothing_else_decides(tmp_path, monkeypatch):
    """One non-loopback interface up: nothing to guess, so it is taken and meta.json says why; interfaces that
    are down do not count. Two up: still no guess."""
    fake_host(monkeypatch, tmp_path, {"lo": "unknown", "eth1": "up", "eth2": "down"})
    assert netinfo.choose_interface("auto", ["n1", "n2"]) == (
        "eth1",
        "the only non-loopback interface up; the other hosts (n1, n2) do not resolve or route here",
    )
    # the last resort: the job's own settings still come first
    gloo = hints.Hints(ifaces=[("eth1", "GLOO_SOCKET_IFNAME")])
    assert netinfo.choose_interface("auto", ["n1"], gloo) == ("eth1", "GLOO_SOCKET_IFNAME=eth1")

    (tmp_path / "eth2" / "operstate").write_text("up\n")
    with pytest.raises(CaptureError, match=r"interfaces up: eth1, eth2: pass --iface NAME"):
        netinfo.choose_interface("auto", ["n1", "n2"])


def rename_interface(namespace: str, old: str, new: str) -> None:
    """OLD becomes NEW in NAMESPACE (a link is renamed only while down); its IPv4 address stays."""
    for args in (("set", old, "down"), ("set", old, "name", new), ("set", new, "up")):
        subprocess.run(["ip", "-n", namespace, "link", *args], check=True, capture_output=True, timeout=30)


def test_agent_in_a_single_nic_namespace_takes_it(tmp_path, netns_cluster):  # noqa: F811
    """A namespace with only eth1 up besides lo, its peers' names resolving nowhere: `--iface auto` captures
    eth1, says why in meta.json, and the pcap holds the bytes the host sent its peer."""
    cluster = netns_cluster(2)
    host, peer = cluster.hosts
    rename_interface(host.name, IFACE, "eth1")
    nowhere = [f"{cluster.prefix}-nowhere1", f"{cluster.prefix}-nowhere2"]
    out, nbytes = tmp_path / "cap", 100_000
    server = subprocess.Popen(  # listening before the agent starts: the 2 s are left for the traffic
        [*["ip", "netns", "exec", peer.name, PY, "-c"], RECEIVE, peer.address],
        stdout=subprocess.PIPE,
        text=True,
    )
    port = server.stdout.readline().strip()
    agent = subprocess.Popen(
        [*["ip", "netns", "exec", host.name, *AGENT, "--iface", "auto", "--peers", ",".join(nowhere)]]
        + ["--out", str(out), "--duration", "2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = agent.stdout.readline()
        assert ready.startswith(READY_LINE) and " iface=eth1 " in ready, agent.stderr.read()
        sent = subprocess.run(
            ["ip", "netns", "exec", host.name, PY, "-c", SEND, peer.address, port, str(nbytes)], timeout=30
        )
        assert sent.returncode == 0 and server.communicate(timeout=30)[0].strip() == str(nbytes)
        _, err = agent.communicate(timeout=30)
    finally:
        for proc in (server, agent):
            proc.kill()
            proc.wait()
    assert agent.returncode == 0, err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["interface"] == "eth1" and meta["status"] == "complete", meta
    assert meta["interface_reason"] == (
        f"the only non-loopback interface up; the other hosts ({', '.join(nowhere)}) do not resolve or route here"
    )
    assert meta["counters"]["captured"] > 0 and meta["files"] == ["eth1.pcap"]
    stream, _wire = tcp_bytes(out / "eth1.pcap", src=host.address)
    assert stream == nbytes


# one TCP connection's receiver (prints its port, then the bytes it got) and sender, each run in a namespace
RECEIVE = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
total = 0
while chunk := conn.recv(1 << 16):
    total += len(chunk)
print(total)
"""
SEND = """
import os, socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as client:
    client.sendall(os.urandom(int(sys.argv[3])))
"""


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
    require_module("torch")
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

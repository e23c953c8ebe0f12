"""Hosts for end-to-end tests: N network namespaces on a bridge, optionally rate-limited with tc.

Layout (nothing is created in the caller's namespace): a namespace PREFIX-br holds bridge br0; every
host namespace PREFIX-h<i> has eth0 (10.77.K.i/24, K random) whose veth peer h<i> sits on br0.
/etc/netns/PREFIX-h<i>/hosts makes every host name, and this machine's hostname, resolve inside
the namespaces (Horovod and gloo resolve the hostname); its resolv.conf points DNS at the
namespace's own loopback, so other lookups fail at once instead of timing out. Traffic can reach only those namespaces.

Use the ``netns_cluster`` fixture (a factory: ``cluster = netns_cluster(4, rate="1gbit")``), or run
a command on every host as ranks of one job:

    python tests/support/netns.py launch --hosts NS3,NS1 -- python train.py
    # rank r runs in the r-th namespace with RANK, WORLD_SIZE, LOCAL_RANK=0, MASTER_ADDR=<first host>,
    # MASTER_PORT, RINGSCOPE_HOST=<its host> and GLOO_SOCKET_IFNAME=eth0 set (MASTER_ADDR and
    # GLOO_SOCKET_IFNAME as the caller's environment sets them, if it does).
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

IFACE = "eth0"
NETNS_ETC = Path("/etc/netns")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


MGMT_IFACE = "mgmt0"  # with two_networks: the management NIC, holding the default route


@dataclass
class Host:
    name: str  # the namespace name, also the host name used by `capture run`
    address: str  # on the training network (eth0)
    mgmt_address: str | None = None  # on the management network (mgmt0), with two_networks


@dataclass
class Cluster:
    """Namespaces built by build(); only these are ever deleted."""

    prefix: str
    subnet: str
    hosts: list[Host] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def exec_argv(self, host: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", host, *argv]


def _limit(namespace: str, device: str, rate: str, qdisc: str, latency: str = "50ms", burst: str = "256kb") -> None:
    """Shape DEVICE's egress in NAMESPACE to RATE (tbf with BURST and a queue of LATENCY, or htb with one class)."""
    tc = ["ip", "netns", "exec", namespace, "tc"]
    if qdisc == "tbf":
        subprocess.run(
            [*tc, "qdisc", "add", "dev", device, "root", "tbf", "rate", rate, "burst", burst, "latency", latency],
            check=True,
            capture_output=True,
            timeout=30,
        )
    else:
        subprocess.run(
            [*tc, "qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "10"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        subprocess.run(
            [*tc, "class", "add", "dev", device, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate],
            check=True,
            capture_output=True,
            timeout=30,
        )


def build(
    n: int,
    rate: str | None = None,
    qdisc: str = "htb",
    latency: str = "50ms",
    mtu: int = 1500,
    offloads: bool = True,
    burst: str = "256kb",
    two_networks: str | None = None,
    tcp_rmem: str | None = None,
    rates: dict[int, str] | None = None,
) -> Cluster:
    """Create N hosts; on failure everything already created is removed again.

    two_networks gives every host the usual second network of a cluster node: mgmt0 on a management
    bridge holding the default route, while the training network (eth0) has none. Host names then resolve
    to the management addresses ("mgmt") or each host resolves only its own name ("self").

    htb (default) shapes TSO/GSO segments whole; tbf lets BURST through above the rate and drops what
    waits longer than LATENCY in its queue (a short queue and a small burst overflow under ring bursts: a
    lossy link; a packet larger than BURST never passes, so turn offloads off with a small one). MTU
    sets every veth; offloads=False turns TSO/GSO/GRO off (ethtool), so tcpdump sees wire-sized packets.
    tcp_rmem ("min default max") caps every host's TCP receive buffers (net.ipv4.tcp_rmem is per namespace),
    and so the window its receivers advertise. RATES: host i's (1-based) own rate, both ways, in place of RATE: one
    host's link slower than the others'.
    """
    cluster = Cluster(prefix=f"rs-{secrets.token_hex(3)}", subnet=f"10.77.{random.randint(1, 254)}")
    try:
        bridge = f"{cluster.prefix}-br"
        _ip("netns", "add", bridge)
        cluster.namespaces.append(bridge)
        _ip("-n", bridge, "link", "set", "lo", "up")
        _ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", bridge, "link", "set", "br0", "up")
        for i in range(1, n + 1):
            host = Host(f"{cluster.prefix}-h{i}", f"{cluster.subnet}.{i}")
            _ip("netns", "add", host.name)
            cluster.namespaces.append(host.name)
            cluster.hosts.append(host)
            _ip("-n", host.name, "link", "set", "lo", "up")
            if tcp_rmem:
                subprocess.run(
                    ["ip", "netns", "exec", host.name, "sysctl", "-q", "-w", f"net.ipv4.tcp_rmem={tcp_rmem}"],
                    check=True,
                    capture_output=True,
                    timeout=30,
                )
            _ip("-n", host.name, "link", "add", IFACE, "type", "veth", "peer", "name", f"h{i}", "netns", bridge)
            _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", IFACE)
            _ip("-n", host.name, "link", "set", IFACE, "up")
            _ip("-n", bridge, "link", "set", f"h{i}", "master", "br0", "up")
            if mtu != 1500:
                _ip("-n", host.name, "link", "set", IFACE, "mtu", str(mtu))
                _ip("-n", bridge, "link", "set", f"h{i}", "mtu", str(mtu))
            if not offloads:
                for namespace, device in ((host.name, IFACE), (bridge, f"h{i}")):
                    subprocess.run(
                        [
                            "ip",
                            "netns",
                            "exec",
                            namespace,
                            "ethtool",
                            "-K",
                            device,
                            "tso",
                            "off",
                            "gso",
                            "off",
                            "gro",
                            "off",
                        ],
                        check=True,
                        capture_output=True,
                        timeout=30,
                    )
            own = (rates or {}).get(i, rate)
            if own:
                _limit(host.name, IFACE, own, qdisc, latency, burst)  # host tx
                _limit(bridge, f"h{i}", own, qdisc, latency, burst)  # host rx
        if two_networks:
            _management_network(cluster)
        for host in cluster.hosts:
            lines = ["127.0.0.1 localhost", f"{host.address} {socket.gethostname()}"]
            if two_networks == "self":
                lines.append(f"{host.mgmt_address} {host.name}")
            elif two_networks == "mgmt":
                lines += [f"{other.mgmt_address} {other.name}" for other in cluster.hosts]
            else:
                lines += [f"{other.address} {other.name}" for other in cluster.hosts]
            (NETNS_ETC / host.name).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / host.name / "hosts").write_text("\n".join(lines) + "\n")
            # no DNS inside: lookups /etc/hosts cannot answer (torch's reverse lookups) fail at once
            (NETNS_ETC / host.name / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    except BaseException:
        destroy(cluster)
        raise
    return cluster


def _management_network(cluster: Cluster) -> None:
    """mgmt0 on every host, bridged in PREFIX-mg, 10.78.K.i/24, default route via 10.78.K.254."""
    bridge, subnet = f"{cluster.prefix}-mg", cluster.subnet.replace("10.77.", "10.78.", 1)
    _ip("netns", "add", bridge)
    cluster.namespaces.append(bridge)
    _ip("-n", bridge, "link", "add", "br0", "type", "bridge")
    _ip("-n", bridge, "link", "set", "br0", "up")
    for i, host in enumerate(cluster.hosts, start=1):
        host.mgmt_address = f"{subnet}.{i}"
        _ip("-n", host.name, "link", "add", MGMT_IFACE, "type", "veth", "peer", "name", f"m{i}", "netns", bridge)
        _ip("-n", host.name, "addr", "add", f"{host.mgmt_address}/24", "dev", MGMT_IFACE)
        _ip("-n", host.name, "link", "set", MGMT_IFACE, "up")
        _ip("-n", bridge, "link", "set", f"m{i}", "master", "br0", "up")
        _ip("-n", host.name, "route", "add", "default", "via", f"{subnet}.254", "dev", MGMT_IFACE)


def destroy(cluster: Cluster) -> None:
    """Kill what still runs inside our namespaces, delete them and their /etc/netns folders."""
    for namespace in cluster.namespaces:
        pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)
    cluster.namespaces.clear()


@contextmanager
def capturing(folders: dict[str, Path], snaplen: int = 96) -> Iterator[None]:
    """tcpdump (headers only) on eth0 of every namespace in FOLDERS, writing FOLDER/eth0.pcap with the capture
    agent's own command line (capture.tcpdump.command: --immediate-mode, so stopping loses no packet still
    waiting in a half-filled kernel block — without it a copy's last 329 kB were missing from one run);
    started and listening before the body runs, stopped (SIGINT, so the files end cleanly) after it, whatever
    happens."""
    from capture.tcpdump import command, find_tcpdump  # here: this file also runs as a script (`launch`)

    tcpdump = find_tcpdump()
    dumps = []
    try:
        for host, folder in folders.items():
            argv = ["ip", "netns", "exec", host, *command(tcpdump, IFACE, folder, snaplen)]
            dumps.append(subprocess.Popen(argv, stderr=subprocess.PIPE, text=True))
        for p in dumps:
            line = p.stderr.readline() if p.stderr else ""
            if "listening" not in line:
                raise RuntimeError(f"tcpdump did not start: {line.strip()}")
        yield
    finally:
        for p in dumps:
            p.send_signal(signal.SIGINT)
        for p in dumps:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def launch_argv(hosts: list[str], command: list[str], port: int | None = None) -> list[str]:
    """The command line that runs COMMAND as the ranks of one job on HOSTS (this module's `launch`), as a
    training command for `capture run`."""
    options = ["--hosts", ",".join(hosts), *(["--port", str(port)] if port is not None else [])]
    return [sys.executable, str(Path(__file__).resolve()), "launch", *options, "--", *command]


def launch(
    hosts: list[str],
    command: list[str],
    master_port: int = 29500,
    timeout_s: float = 120,
    extra_env: dict[str, dict[str, str]] | None = None,
) -> int:
    """Run COMMAND as rank r in namespace hosts[r] (with extra_env[host] set); returns the worst exit code."""
    procs = []
    for rank, host in enumerate(hosts):
        env = {
            "RANK": str(rank),
            "WORLD_SIZE": str(len(hosts)),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": os.environ.get("MASTER_ADDR", hosts[0]),
            "MASTER_PORT": str(master_port),
            "RINGSCOPE_HOST": host,
            "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", IFACE),
            **(extra_env or {}).get(host, {}),
        }
        argv = ["ip", "netns", "exec", host, "env", *(f"{k}={v}" for k, v in env.items()), *command]
        procs.append(subprocess.Popen(argv))
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            codes.append(124)
    return max(codes, key=abs)


try:
    import pytest
except ImportError:  # `python tests/support/netns.py launch` needs no pytest
    pytest = None

if pytest is not None:

    @pytest.fixture
    def netns_cluster():
        """Factory fixture: netns_cluster(n, rate=None, qdisc='htb') -> Cluster, torn down after the test."""
        from tests.support.requirements import require_netns

        require_netns()
        clusters: list[Cluster] = []

        def make(n: int, rate: str | None = None, qdisc: str = "htb", **options: Any) -> Cluster:
            clusters.append(build(n, rate, qdisc, **options))
            return clusters[-1]

        yield make
        for cluster in clusters:
            destroy(cluster)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "launch" or argv[1] != "--hosts" or "--" not in argv:
        print("usage: netns.py launch --hosts NS1,NS2,... [--port P] -- COMMAND...", file=sys.stderr)
        return 2
    split = argv.index("--")
    options = dict(zip(argv[1:split:2], argv[2:split:2]))
    return launch(options["--hosts"].split(","), argv[split + 1 :], int(options.get("--port", 29500)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Which interface carries the training traffic, and what it can carry (addresses, MTU, speed, offloads).

Everything comes from the kernel of the network namespace we run in: /sys/class/net, `ip -j`,
`tc` and the SIOCETHTOOL ioctl (so the `ethtool` program is not needed).
"""

from __future__ import annotations

import ctypes
import ipaddress
import fcntl
import json
import re
import socket
import struct
import subprocess
from collections import Counter
from pathlib import Path

from capture.errors import CaptureError
from capture.hints import Hints, matches
from capture.units import parse_rate

SYS_NET = Path("/sys/class/net")
SYS_RDMA = Path("/sys/class/infiniband")  # RDMA devices (mlx5_0, ...): libpcap's RDMA sniffer captures on them


def _ip_json(*args: str) -> list:
    """Run `ip -j ARGS` and return its JSON ([] when the route/device does not exist)."""
    try:
        done = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        raise CaptureError("the `ip` program (iproute2) is missing: install iproute2 or pass --iface NAME") from None
    if done.returncode != 0 or not done.stdout.strip():
        return []
    return json.loads(done.stdout)


def route_device(address: str) -> str | None:
    """The device the kernel would send to ADDRESS through."""
    routes = _ip_json("route", "get", address)
    return routes[0].get("dev") if routes else None


def resolve(host: str) -> str | None:
    """First IPv4/IPv6 address of HOST, or None when it does not resolve."""
    try:
        return str(socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0])
    except (socket.gaierror, IndexError, UnicodeError):
        return None


def local_addresses() -> dict[str, str]:
    """{address: device} for every address of this host (network namespace)."""
    return {a["local"]: link["ifname"] for link in _ip_json("addr", "show") for a in link.get("addr_info", [])}


def _is_up(name: str) -> bool:
    return _read(SYS_NET / name / "operstate") in ("up", "unknown")


def choose_interface(
    requested: str, peers: list[str], hints: Hints | None = None, me: str | None = None
) -> tuple[str, str]:
    """(interface, why it was chosen). For 'auto', in this order:

    1. the training's own interface settings (capture.hints: NCCL_SOCKET_IFNAME, ...), matched against the
       interfaces that are up;
    2. the interface holding or routing to the addresses the training connects to (MASTER_ADDR, ...);
    3. the interface routing to the other hosts; a peer that is this host (its own name, a loopback or local
       address) never counts, and `lo` is chosen only when every peer is this host;
    4. with no peers given (a bare sidecar): the default route's device;
    5. last, when none of these decides: the only non-loopback interface that is up. With exactly one there is
       nothing to guess (a pod or network namespace with a single NIC whose peers' names resolve nowhere).
    With several interfaces up and nothing deciding, stop with one line naming them and --iface: a guess
    would capture the wrong network in silence.
    """
    if requested != "auto":
        if rdma_device(requested):
            return requested, "--iface (an RDMA device: libpcap's RDMA sniffer)"
        if requested != "any" and not (SYS_NET / requested).exists():
            rdma = rdma_devices()
            have = ", ".join(list_interfaces()) + (f"; RDMA devices: {', '.join(rdma)}" if rdma else "")
            raise CaptureError(f"no network interface {requested!r} here (have: {have})")
        return requested, "--iface"
    hints = hints or Hints()
    up = [name for name in list_interfaces() if _is_up(name)]
    for spec, source in hints.ifaces:
        chosen = [n for n in matches(spec, up) if n != "lo"] or matches(spec, up)
        if chosen:
            return chosen[0], f"{source}={spec}"
    mine = local_addresses()
    for target, source in hints.addresses:
        address = resolve(target)
        device = mine.get(address) if address in mine else route_device(address) if address else None
        if device and device != "lo":
            return device, f"{source}={target} ({'held by' if address in mine else 'routed through'} {device})"
    devices: Counter[str] = Counter()
    unresolved, remote_peers = [], 0
    names_of_me = {me, socket.gethostname(), socket.getfqdn(), "localhost"} - {None}
    for peer in peers:
        address = resolve(peer)
        if peer in names_of_me or (address is not None and (_loopback(address) or address in mine)):
            continue  # this host: never its own peer
        remote_peers += 1
        device = route_device(address) if address else None
        if device:
            devices[device] += 1
        else:
            unresolved.append(peer)
    if devices:
        device, count = devices.most_common(1)[0]
        return device, f"route to {count} of {remote_peers} other host(s)"
    if peers and not remote_peers:
        return "lo", "every host of the run is this host"
    candidates = [n for n in up if n != "lo"]
    if not peers:
        default = _ip_json("route", "show", "default")
        if default and default[0].get("dev"):
            return default[0]["dev"], "default route (no peers given)"
    unreached = f"the other hosts ({', '.join(unresolved)}) do not resolve or route here" if unresolved else "no route"
    if len(candidates) == 1:
        return candidates[0], f"the only non-loopback interface up; {unreached if peers else 'no peers given'}"
    raise CaptureError(
        f"cannot tell which interface carries the training traffic: {unreached}"
        f" and no interface setting (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, MASTER_ADDR, ...); "
        f"interfaces up: {', '.join(candidates) or 'none'}: pass --iface NAME"
    )


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


def list_interfaces() -> list[str]:
    return sorted(p.name for p in SYS_NET.iterdir()) if SYS_NET.exists() else []


def rdma_devices() -> list[str]:
    return sorted(p.name for p in SYS_RDMA.iterdir()) if SYS_RDMA.exists() else []


def rdma_device(name: str) -> bool:
    """NAME (or NAME:PORT, as libpcap's RDMA sniffer takes it) is an RDMA device and no network interface."""
    return not (SYS_NET / name).exists() and bool(name) and (SYS_RDMA / name.split(":")[0]).is_dir()


def _rdma_port(name: str) -> Path:
    device, _, port = name.partition(":")
    return SYS_RDMA / device / "ports" / (port or "1")


def rdma_info(name: str, link_speed_bps: int | None = None) -> dict:
    """meta.json's interface fields for an RDMA device: its port's rate (sysfs: "100 Gb/sec (4X EDR)"), link layer,
    and addresses (RoCE: the IPv4-mapped and other non-link-local GIDs; InfiniBand: the port's LID as lid:N), and what
    the sniffer cannot give: timestamps are taken in software when its completion queue is polled, and its drop
    counter is always 0."""
    port = _rdma_port(name)
    rate = _read(port / "rate") or ""
    match = re.match(r"([\d.]+)\s*Gb/sec", rate)
    sysfs = int(float(match.group(1)) * 1e9) if match else None
    layer = _read(port / "link_layer")
    addrs: list[str] = []
    gids = port / "gids"
    for gid in sorted(gids.iterdir(), key=lambda p: int(p.name)) if gids.is_dir() else []:
        text = _read(gid)
        if not text or set(text) <= {"0", ":"} or text.startswith("fe80:"):
            continue
        ip = ipaddress.ip_address(text)
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        addrs.append(str(mapped or ip))
    lid = _read(port / "lid")
    if layer == "InfiniBand" and lid and int(lid, 0):
        addrs.append(f"lid:{int(lid, 0)}")
    return {
        "interface": name,
        "addresses": sorted(set(addrs)),
        "mtu": None,
        "link_speed_bps": link_speed_bps or sysfs,
        "link_speed_source": "cli" if link_speed_bps else ("sysfs" if sysfs else None),
        "sysfs_speed_bps": sysfs,
        "tc_rate_bps": None,
        "offloads": None,
        "rdma": {
            "link_layer": layer,
            "timestamps": "software: taken when the RDMA sniffer's completion queue is polled",
            "drops_counted": False,
        },
    }


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # virtual devices answer EINVAL for speed
        return None


def sysfs_speed_bps(iface: str) -> int | None:
    """/sys/class/net/IF/speed is in Mbit/s; virtual interfaces report nothing or -1."""
    text = _read(SYS_NET / iface / "speed")
    try:
        mbps = int(text) if text else -1
    except ValueError:
        return None
    return mbps * 1_000_000 if mbps > 0 else None


def tc_rate_bps(iface: str) -> int | None:
    """The shaping rate on IF: the lowest qdisc rate (tbf), else the highest class ceil (htb)."""

    def rates(kind: str, keyword: str) -> list[int]:
        try:
            text = subprocess.run(["tc", kind, "show", "dev", iface], capture_output=True, text=True, timeout=10).stdout
        except FileNotFoundError:
            return []
        return [round(parse_rate(m.group(1))) for m in re.finditer(rf"\b{keyword}\s+(\S+)", text)]

    qdisc = rates("qdisc", "rate")
    if qdisc:
        return min(qdisc)
    classes = rates("class", "ceil") or rates("class", "rate")
    return max(classes) if classes else None


def addresses(iface: str) -> list[str]:
    """Addresses as 'addr/prefixlen' (all interfaces for 'any')."""
    links = _ip_json("addr", "show") if iface == "any" else _ip_json("addr", "show", "dev", iface)
    return [f"{a['local']}/{a['prefixlen']}" for link in links for a in link.get("addr_info", [])]


# SIOCETHTOOL get commands answering one u32 (struct ethtool_value), from linux/ethtool.h.
_SIOCETHTOOL = 0x8946
_OFFLOAD_COMMANDS = {
    "rx_checksum": 0x14,
    "tx_checksum": 0x16,
    "scatter_gather": 0x18,
    "tso": 0x1E,
    "gso": 0x23,
    "gro": 0x2B,
}
_ETHTOOL_GFLAGS, _ETH_FLAG_LRO = 0x25, 1 << 15


def offloads(iface: str) -> dict | None:
    """Segmentation/checksum offloads: with TSO/GRO on, tcpdump sees segments up to 64 KB."""
    if iface == "any":
        return None
    result = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for name, cmd in {**_OFFLOAD_COMMANDS, "lro": _ETHTOOL_GFLAGS}.items():
            value = (ctypes.c_uint32 * 2)(cmd, 0)
            ifreq = struct.pack("16sP", iface.encode()[:15], ctypes.addressof(value)).ljust(40, b"\0")
            try:
                fcntl.ioctl(sock.fileno(), _SIOCETHTOOL, ifreq)
            except OSError:
                continue
            result[name] = bool(value[1] & _ETH_FLAG_LRO) if name == "lro" else bool(value[1])
    return result or None


def interface_info(iface: str, link_speed_bps: int | None = None) -> dict:
    """meta.json's interface fields. Link speed: --link-speed, else a tc shaping rate (it bounds
    the traffic), else /sys speed; link_speed_source says which."""
    if rdma_device(iface):
        return rdma_info(iface, link_speed_bps)
    sysfs = sysfs_speed_bps(iface) if iface != "any" else None
    tc = tc_rate_bps(iface) if iface != "any" else None
    if link_speed_bps:
        speed, source = link_speed_bps, "cli"
    elif tc:
        speed, source = tc, "tc"
    elif sysfs:
        speed, source = sysfs, "sysfs"
    else:
        speed, source = None, None
    mtu = _read(SYS_NET / iface / "mtu") if iface != "any" else None
    return {
        "interface": iface,
        "addresses": addresses(iface),
        "mtu": int(mtu) if mtu else None,
        "link_speed_bps": speed,
        "link_speed_source": source,
        "sysfs_speed_bps": sysfs,
        "tc_rate_bps": tc,
        "offloads": offloads(iface),
    }

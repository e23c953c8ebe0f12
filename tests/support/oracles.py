"""Second and third opinions on a capture's per-flow totals: dpkt, and tshark.

Both are written here independently of the analyzer. The file containers are walked with struct
(dpkt's own readers drop the wire length and apply the first pcapng interface's clock and link type to
all), and every packet is decoded by dpkt: Ethernet with its VLAN tags, Linux cooked v1/v2, raw IP.
tshark is asked for per-packet IP header fields (-T fields), not for `-z conv`: its conversation
totals count frame bytes (link header, padding) and reassembled datagrams, while ringscope counts IP
bytes per directed 5-tuple, each fragment's bytes under its datagram's flow.
"""

from __future__ import annotations

import gzip
import socket
import struct
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Iterator

import dpkt

FlowKey = tuple  # (src, dst, sport, dport, proto)
LINK_HEADER = {1: 14, 101: 0, 113: 16, 276: 20}


def _open(path: Path) -> bytes:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:4] == b"\x28\xb5\x2f\xfd":
        import pyzstd

        return pyzstd.decompress(data)
    return data


def records(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """(link type, captured bytes, wire length) of every complete record of a pcap or pcapng file."""
    data = _open(path)
    magic = data[:4]
    if magic == b"\x0a\x0d\x0d\x0a":
        yield from _pcapng(data)
        return
    order = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}[
        magic
    ]
    linktype = struct.unpack_from(order + "I", data, 20)[0] & 0xFFFF
    pos = 24
    while pos + 16 <= len(data):
        _, _, caplen, wirelen = struct.unpack_from(order + "IIII", data, pos)
        if pos + 16 + caplen > len(data):
            return  # a record cut short: ignore it, as the analyzer does
        yield linktype, data[pos + 16 : pos + 16 + caplen], wirelen
        pos += 16 + caplen


def _pcapng(data: bytes) -> Iterator[tuple[int, bytes, int]]:
    pos, order, links = 0, "<", []
    while pos + 12 <= len(data):
        if data[pos : pos + 4] == b"\x0a\x0d\x0d\x0a":
            order = "<" if data[pos + 8 : pos + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            links = []
        btype, blen = struct.unpack_from(order + "II", data, pos)
        if blen < 12 or pos + blen > len(data):
            return
        if btype == 1:
            links.append(struct.unpack_from(order + "H", data, pos + 8)[0])
        elif btype == 6:
            iface, _, _, caplen, wirelen = struct.unpack_from(order + "IIIII", data, pos + 8)
            yield links[iface], data[pos + 28 : pos + 28 + caplen], wirelen
        pos += blen


def _addr(raw: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET6 if len(raw) == 16 else socket.AF_INET, raw)


def _l3(linktype: int, buf: bytes):
    """dpkt's decode of the link layer: the network-layer object and its offset in the frame."""
    if linktype == 1:
        eth = dpkt.ethernet.Ethernet(buf)
        return eth.data, 14 + 4 * len(getattr(eth, "vlan_tags", []) or [])
    if linktype == 113:
        return dpkt.sll.SLL(buf).data, 16
    if linktype == 276:
        return dpkt.sll2.SLL2(buf).data, 20
    if linktype == 101:
        return (dpkt.ip6.IP6(buf) if buf[0] >> 4 == 6 else dpkt.ip.IP(buf)), 0
    raise ValueError(f"link type {linktype}")


class Totals(dict):
    """flow key -> {"packets", "ip_bytes", "payload_bytes"}; .kinds counts the frames that carry no flow."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: dict[str, int] = defaultdict(int)

    def add(self, key: FlowKey, packets: int, ip_bytes: int, payload: int) -> None:
        t = self.setdefault(key, {"packets": 0, "ip_bytes": 0, "payload_bytes": 0})
        t["packets"] += packets
        t["ip_bytes"] += ip_bytes
        t["payload_bytes"] += payload


def dpkt_flows(path: Path) -> Totals:
    """Per-flow packets, IP bytes and payload bytes as dpkt decodes the file."""
    out = Totals()
    fragments: dict[tuple, FlowKey] = {}  # (src, dst, id, proto) -> the flow of the first fragment
    for linktype, buf, wirelen in records(path):
        ip, offset = _l3(linktype, buf)
        if isinstance(ip, dpkt.arp.ARP):
            out.kinds["arp"] += 1
            continue
        if isinstance(ip, dpkt.ip.IP):
            hdr = ip.hl * 4
            total = ip.len or wirelen - offset  # 0 on an offloaded (BIG TCP) send: the frame tells
            frag_id, later, first = ip.id, ip.offset != 0, bool(ip.mf) and ip.offset == 0
            proto = ip.p
        elif isinstance(ip, dpkt.ip6.IP6):
            total = 40 + ip.plen if ip.plen else wirelen - offset
            frag = ip.extension_hdrs.get(dpkt.ip.IP_PROTO_FRAGMENT)
            hdr = 40 + sum(len(h) for h in ip.all_extension_headers)
            frag_id = frag.id if frag else None
            later, first = bool(frag and frag.frag_off), bool(frag and frag.m_flag and not frag.frag_off)
            proto = ip.p
        else:
            out.kinds["other_ethertype"] += 1
            continue
        src, dst = _addr(ip.src), _addr(ip.dst)
        name = {6: "tcp", 17: "udp"}.get(proto, f"ip-{proto}")
        if later:
            key = fragments[(src, dst, frag_id, proto)]
            out.add(key, 0, total, total - hdr)
            continue
        l4 = ip.data
        sport, dport = (l4.sport, l4.dport) if name in ("tcp", "udp") else (0, 0)
        l4hdr = l4.off * 4 if name == "tcp" else 8 if name == "udp" else 0
        key = (src, dst, sport, dport, name)
        if first:
            fragments[(src, dst, frag_id, proto)] = key
        out.add(key, 1, total, total - hdr - l4hdr)
    return out


TSHARK_FIELDS = [
    "ip.src",
    "ip.dst",
    "ip.len",
    "ip.id",
    "ip.frag_offset",
    "ip.proto",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.plen",
    "ipv6.fraghdr.offset",
    "ipv6.fraghdr.ident",
    "ipv6.fraghdr.nxt",
    "ipv6.nxt",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "frame.protocols",
]


def tshark_flows(path: Path) -> Totals:
    """Per-flow packets and IP bytes from tshark's per-packet IP fields (defragmentation off).

    Frames tshark cannot dissect to ports (an IPv6 packet with payload length 0) are counted in
    .kinds["undissected"] under their addresses in .undissected.
    """
    argv = [
        "tshark",
        "-n",
        "-r",
        str(path),
        "-o",
        "ip.defragment:FALSE",
        "-o",
        "ipv6.defragment:FALSE",
        "-T",
        "fields",
        "-E",
        "separator=\t",
        "-E",
        "occurrence=f",
    ]
    for f in TSHARK_FIELDS:
        argv += ["-e", f]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if run.returncode and "cut short in the middle of a packet" not in run.stderr:
        raise RuntimeError(f"tshark failed on {path}: {run.stderr.strip()}")
    text = run.stdout
    out = Totals()
    out.undissected = set()
    fragments: dict[tuple, FlowKey] = {}
    for line in text.splitlines():
        v = dict(zip(TSHARK_FIELDS, line.split("\t")))
        if v["ip.src"]:
            src, dst, total = v["ip.src"], v["ip.dst"], int(v["ip.len"])
            frag_id, later, proto = v["ip.id"], int(v["ip.frag_offset"] or 0) > 0, int(v["ip.proto"])
        elif v["ipv6.src"]:
            src, dst, total = v["ipv6.src"], v["ipv6.dst"], 40 + int(v["ipv6.plen"])
            frag_id, later = v["ipv6.fraghdr.ident"], int(v["ipv6.fraghdr.offset"] or 0) > 0
            proto = int(v["ipv6.fraghdr.nxt"] or v["ipv6.nxt"])
        else:
            kind = v["frame.protocols"].rsplit(":", 1)[-1]
            out.kinds["arp" if kind == "arp" else "other"] += 1
            continue
        name = {6: "tcp", 17: "udp"}.get(proto, f"ip-{proto}")
        if later:
            out.add(fragments[(src, dst, frag_id, proto)], 0, total, 0)
            continue
        sport, dport = (v[f"{name}.srcport"], v[f"{name}.dstport"]) if name in ("tcp", "udp") else ("0", "0")
        if not sport:
            out.kinds["undissected"] += 1
            out.undissected.add((src, dst))
            continue
        key = (src, dst, int(sport), int(dport), name)
        fragments[(src, dst, frag_id, proto)] = key
        out.add(key, 1, total, 0)
    return out

"""Captures whose traffic is known exactly: scapy builds the packets, small writers lay out the files.

Shared by fixtures/generate.py (the committed fixtures) and the tests (fresh captures in tmp dirs).
Every Frame carries its own ground truth (flow, IP bytes, payload bytes, retransmitted bytes) set from
the generator's parameters, so the expected numbers never come from a decoder. The file writers are
written by hand with struct: scapy's pcapng writer has one fixed µs resolution, no if_tsoffset, no
custom blocks and float timestamps, and one small writer per container keeps every timestamp an exact
integer whose recovered value (rounded down to the file's resolution) is known.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import struct
from functools import lru_cache
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.layers.inet import IP, TCP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment  # noqa: E402
from scapy.layers.l2 import ARP, CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether  # noqa: E402
from scapy.packet import Packet, Raw  # noqa: E402

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276
ETH_IPV4, ETH_IPV6, ETH_ARP, ETH_LLDP = 0x0800, 0x86DD, 0x0806, 0x88CC
BASE_NS = 1_700_000_000_000_000_000  # 2023-11-14, a plausible capture date
PCAP_MAGIC_US, PCAP_MAGIC_NS = 0xA1B2C3D4, 0xA1B23C4D
OPTIONS = {  # TCP options by name: what Linux puts on every segment, and on a SYN
    "ts": [("NOP", None), ("NOP", None), ("Timestamp", (1000, 2000))],
    "syn": [("MSS", 1460), ("SAckOK", b""), ("Timestamp", (1000, 0)), ("NOP", None), ("WScale", 7)],
    "sack": [("NOP", None), ("NOP", None), ("Timestamp", (1000, 2000)), ("NOP", None), ("NOP", None), ("SAck", (7, 9))],
    "none": [],
}


@dataclass(frozen=True, order=True)
class Flow:
    """A directed 5-tuple, written the way the analyzer's result writes it."""

    src: str
    dst: str
    sport: int
    dport: int
    proto: str  # "tcp" | "udp"


@dataclass(frozen=True)
class Link:
    """How frames are framed: a link type, Ethernet tags, and whether short frames arrive padded."""

    linktype: int = LINKTYPE_ETHERNET
    tags: tuple[str, ...] = ()  # "dot1q", "qinq"
    pad: bool = False  # receiver side of Ethernet: frames under 60 bytes padded with zeros
    outgoing: bool = True  # Linux cooked captures say which way the packet went


ETHERNET = Link()


@dataclass(frozen=True)
class Frame:
    """One record as written to a file, with the truth about what it carries."""

    ts_ns: int
    linktype: int
    data: bytes  # the bytes a full-snaplen capture would hold (payload may be cut for huge segments)
    wire_len: int  # original length on the link
    kind: str  # the analyzer's frame kind: tcp, udp, ip_fragment, arp, other_ethertype
    flow: Optional[Flow] = None
    ip_bytes: int = 0
    payload_bytes: int = 0
    new_packet: bool = True  # False for IP fragments after the first: one datagram, one packet
    retrans_bytes: int = 0


def mac(ip: str) -> str:
    """A stable locally administered MAC for an address, so frames look like a real LAN."""
    h = hashlib.sha1(ip.encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in h[:5])


def link_header(link: Link, ethertype: int, src_ip: str, dst_ip: str) -> Packet | None:
    """The link-layer header as a scapy packet (None for raw IP)."""
    if link.linktype == LINKTYPE_RAW:
        return None
    if link.linktype == LINKTYPE_LINUX_SLL:
        return CookedLinux(
            pkttype=4 if link.outgoing else 0,
            lladdrtype=1,
            lladdrlen=6,
            src=bytes.fromhex(mac(src_ip).replace(":", "")) + b"\0\0",
            proto=ethertype,
        )
    if link.linktype == LINKTYPE_LINUX_SLL2:
        return CookedLinuxV2(
            proto=ethertype,
            ifindex=2,
            lladdrtype=1,
            pkttype=4 if link.outgoing else 0,
            lladdrlen=6,
            src=bytes.fromhex(mac(src_ip).replace(":", "")) + b"\0\0",
        )
    if link.linktype != LINKTYPE_ETHERNET:
        raise ValueError(f"no framing for link type {link.linktype}")
    hdr: Packet = Ether(src=mac(src_ip), dst=mac(dst_ip))
    if link.tags == ("dot1q",):
        return hdr / Dot1Q(vlan=100, type=ethertype)
    if link.tags == ("qinq",):
        return hdr / Dot1AD(vlan=200) / Dot1Q(vlan=100, type=ethertype)
    if link.tags:
        raise ValueError(f"unknown tags {link.tags}")
    hdr.type = ethertype
    return hdr


@lru_cache(maxsize=None)
def _link_bytes(link: Link, ethertype: int, src_ip: str, dst_ip: str) -> bytes:
    hdr = link_header(link, ethertype, src_ip, dst_ip)
    return bytes(hdr) if hdr is not None else b""


def _frame(
    link: Link,
    ts_ns: int,
    l3: Packet | bytes,
    ethertype: int,
    src: str,
    dst: str,
    *,
    true_l3_len: int,
    kind: str,
    **truth,
) -> Frame:
    """Wrap L3 bytes in the link header; the wire length uses the true (uncut) L3 length."""
    head = _link_bytes(link, ethertype, src, dst)
    data = head + bytes(l3)
    wire = len(head) + true_l3_len
    if link.pad and link.linktype == LINKTYPE_ETHERNET and wire < 60:
        data += b"\0" * (60 - wire)
        wire = 60
    return Frame(ts_ns=ts_ns, linktype=link.linktype, data=data, wire_len=wire, kind=kind, **truth)


def _is_v6(addr: str) -> bool:
    return ":" in addr


def _ip(src: str, dst: str, **kw) -> Packet:
    if _is_v6(src):
        return IPv6(src=src, dst=dst, hlim=64, **kw)
    return IP(src=src, dst=dst, ttl=64, flags="DF", **kw)


def _checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@lru_cache(maxsize=None)
def _template(flow: Flow, flags: str, options: str) -> tuple[bytes, int]:
    """A packet shape's IP + TCP/UDP headers as scapy builds them, and the offset of the TCP/UDP header.

    Building every segment with scapy costs milliseconds; the example run has thousands, so each shape
    is built once and ip_packet patches lengths, sequence numbers and checksums into a copy.
    """
    if flow.proto == "tcp":
        l4 = TCP(sport=flow.sport, dport=flow.dport, flags=flags, window=502, options=OPTIONS[options])
    else:
        l4 = UDP(sport=flow.sport, dport=flow.dport)
    hdr = bytes(_ip(flow.src, flow.dst) / l4)
    return hdr, 40 if _is_v6(flow.src) else 20


def ip_packet(
    link: Link,
    ts_ns: int,
    flow: Flow,
    payload_len: int,
    *,
    seq: int = 0,
    ack: int = 0,
    flags: str = "PA",
    keep: Optional[int] = None,
    ip_len_field: Optional[int] = None,
    ip_id: int = 1,
    options: str = "ts",
    retrans_bytes: int = 0,
    window: int = 502,
) -> Frame:
    """One TCP segment or UDP datagram of `payload_len` zero bytes, with correct lengths and checksums.
    window: the TCP window field (unscaled; a SYN with options "syn" announces a scale of 7).

    keep: payload bytes actually built (None: all) — a 64 KB TSO segment needs only its headers.
    ip_len_field: force the IP length field (e.g. 0, as on an offloaded send); default: the true length.
    """
    keep = payload_len if keep is None else min(keep, payload_len)
    hdr, l4 = _template(flow, flags, options)
    true_len = len(hdr) + payload_len
    b = bytearray(hdr + b"\0" * keep)
    v6 = _is_v6(flow.src)
    if v6:
        struct.pack_into("!H", b, 4, (true_len - 40 if ip_len_field is None else ip_len_field) & 0xFFFF)
        addrs = b[8:40]
    else:
        struct.pack_into("!HH", b, 2, (true_len if ip_len_field is None else ip_len_field) & 0xFFFF, ip_id & 0xFFFF)
        struct.pack_into("!H", b, 10, 0)
        struct.pack_into("!H", b, 10, _checksum(bytes(b[:20])))
        addrs = b[12:20]
    l4_len = true_len - l4
    if flow.proto == "tcp":
        struct.pack_into("!II", b, l4 + 4, seq % 2**32, ack % 2**32)
        struct.pack_into("!H", b, l4 + 14, window)
        csum_at, proto = l4 + 16, 6
    else:
        struct.pack_into("!H", b, l4 + 4, l4_len & 0xFFFF)
        csum_at, proto = l4 + 6, 17
    struct.pack_into("!H", b, csum_at, 0)
    pseudo = bytes(addrs) + (
        struct.pack("!IxxxB", l4_len, proto) if v6 else struct.pack("!xBH", proto, l4_len & 0xFFFF)
    )
    csum = _checksum(pseudo + bytes(b[l4 : len(hdr)]))  # the zero payload adds nothing to the sum
    struct.pack_into("!H", b, csum_at, csum or (0xFFFF if proto == 17 else 0))
    return _frame(
        link,
        ts_ns,
        bytes(b),
        ETH_IPV6 if v6 else ETH_IPV4,
        flow.src,
        flow.dst,
        true_l3_len=true_len,
        kind=flow.proto,
        flow=flow,
        ip_bytes=true_len,
        payload_bytes=payload_len,
        retrans_bytes=retrans_bytes,
    )


def udp_fragments(
    link: Link, ts_ns: int, flow: Flow, payload_len: int, *, pieces: int = 3, ip_id: int = 0x4242, gap_ns: int = 1_000
) -> list[Frame]:
    """One UDP datagram cut into `pieces` IP fragments (IPv4 or IPv6 fragment header)."""
    whole = _ip(flow.src, flow.dst) / UDP(sport=flow.sport, dport=flow.dport) / Raw(b"\x5a" * payload_len)
    datagram = bytes(whole)[40 if _is_v6(flow.src) else 20 :]  # UDP header with its real checksum, and payload
    per_piece = -(-len(datagram) // pieces)
    step = (per_piece + 7) // 8 * 8  # fragment offsets count 8-byte units
    frames = []
    for i, off in enumerate(range(0, len(datagram), step)):
        chunk = datagram[off : off + step]
        more = off + step < len(datagram)
        if _is_v6(flow.src):
            l3 = (
                IPv6(src=flow.src, dst=flow.dst, hlim=64, nh=44)
                / IPv6ExtHdrFragment(nh=17, offset=off // 8, m=int(more), id=ip_id)
                / Raw(chunk)
            )
            ethertype, hdr = ETH_IPV6, 48
        else:
            l3 = IP(
                src=flow.src, dst=flow.dst, ttl=64, proto=17, id=ip_id, flags="MF" if more else 0, frag=off // 8
            ) / Raw(chunk)
            ethertype, hdr = ETH_IPV4, 20
        frames.append(
            _frame(
                link,
                ts_ns + i * gap_ns,
                l3,
                ethertype,
                flow.src,
                flow.dst,
                true_l3_len=hdr + len(chunk),
                kind="udp" if off == 0 else "ip_fragment",
                flow=flow,
                ip_bytes=hdr + len(chunk),
                payload_bytes=len(chunk) - (8 if off == 0 else 0),
                new_packet=off == 0,
            )
        )
    return frames


def arp_request(link: Link, ts_ns: int, src: str, dst: str) -> Frame:
    """Who-has: not IP, counted as an ARP frame."""
    pkt = ARP(op=1, hwsrc=mac(src), psrc=src, pdst=dst)
    return _frame(link, ts_ns, pkt, ETH_ARP, src, dst, true_l3_len=len(bytes(pkt)), kind="arp")


def lldp(link: Link, ts_ns: int, src: str) -> Frame:
    """An LLDP announcement (chassis, port, TTL, end), counted as another ethertype."""
    if link.linktype != LINKTYPE_ETHERNET:
        raise ValueError("LLDP is an Ethernet frame")
    chassis = b"\x02\x07\x04" + bytes.fromhex(mac(src).replace(":", ""))[:6].ljust(6, b"\0")
    port = b"\x04\x05\x05eth0"
    body = chassis + port + b"\x06\x02\x00\x78" + b"\x00\x00"
    hdr = Ether(src=mac(src), dst="01:80:c2:00:00:0e", type=ETH_LLDP)
    data = bytes(hdr) + body
    return Frame(ts_ns=ts_ns, linktype=link.linktype, data=data, wire_len=len(data), kind="other_ethertype")


class TcpConn:
    """A TCP connection whose every segment's truth is known: sequence space is tracked in relative bytes."""

    def __init__(
        self,
        link: Link,
        client: str,
        server: str,
        sport: int,
        dport: int,
        isn_c: int = 1000,
        isn_s: int = 500_000,
        rev_link: Optional[Link] = None,
    ) -> None:
        self.link, self.rev_link = link, rev_link or link
        self.fwd = Flow(client, server, sport, dport, "tcp")
        self.rev = Flow(server, client, dport, sport, "tcp")
        self.isn = {self.fwd: isn_c, self.rev: isn_s}
        self.high = {self.fwd: 0, self.rev: 0}  # relative bytes sent so far (highest end)
        self.ip_id = {self.fwd: 1, self.rev: 1}

    def _flow(self, forward: bool) -> Flow:
        return self.fwd if forward else self.rev

    def _send(self, ts_ns: int, forward: bool, rel: int, n: int, flags: str, options: str = "ts", **kw) -> Frame:
        f = self._flow(forward)
        other = self._flow(not forward)
        retrans = max(0, min(self.high[f], rel + n) - rel) if n else 0
        self.high[f] = max(self.high[f], rel + n)
        self.ip_id[f] += 1
        seq = self.isn[f] + 1 + rel if "S" not in flags else self.isn[f]
        ack = self.isn[other] + 1 + self.high[other] if "A" in flags else 0
        return ip_packet(
            self.link if forward else self.rev_link,
            ts_ns,
            f,
            n,
            seq=seq,
            ack=ack,
            flags=flags,
            ip_id=self.ip_id[f],
            options=options,
            retrans_bytes=retrans,
            **kw,
        )

    def handshake(self, ts_ns: int, rtt_ns: int = 40_000) -> list[Frame]:
        """SYN, SYN-ACK, ACK."""
        syn = self._send(ts_ns, True, 0, 0, "S", "syn")
        synack = self._send(ts_ns + rtt_ns // 2, False, 0, 0, "SA", "syn")
        return [syn, synack, self._send(ts_ns + rtt_ns, True, 0, 0, "A")]

    def data(self, ts_ns: int, n: int, forward: bool = True, **kw) -> Frame:
        """New data after the highest byte sent."""
        return self._send(ts_ns, forward, self.high[self._flow(forward)], n, "PA", **kw)

    def resend(self, ts_ns: int, rel: int, n: int, forward: bool = True, **kw) -> Frame:
        """Data starting at relative offset `rel`; the part already sent counts as retransmitted."""
        return self._send(ts_ns, forward, rel, n, "PA", **kw)

    def ack(self, ts_ns: int, forward: bool = False, **kw) -> Frame:
        """A pure ACK of everything the other side sent (kw: window, options)."""
        return self._send(ts_ns, forward, self.high[self._flow(forward)], 0, "A", **kw)


# ---- file writers ---------------------------------------------------------------------------------


def _quantize(ns: int, units_per_s: int, offset_s: int = 0) -> tuple[int, int]:
    """(raw timestamp in the file's units, the ns a reader recovers from it: rounded down)."""
    raw = (ns - offset_s * 10**9) * units_per_s // 10**9
    return raw, raw * 10**9 // units_per_s + offset_s * 10**9


def pcap_bytes(
    frames: Sequence[Frame], *, linktype: int, nano: bool = False, big_endian: bool = False, snaplen: int = 262144
) -> tuple[bytes, list[Frame]]:
    """A classic pcap; returns the bytes and the frames with the timestamps the file really holds."""
    order = ">" if big_endian else "<"
    out = [struct.pack(order + "IHHiIII", PCAP_MAGIC_NS if nano else PCAP_MAGIC_US, 2, 4, 0, 0, snaplen, linktype)]
    written = []
    for f in frames:
        if f.linktype != linktype:
            raise ValueError(f"frame of link type {f.linktype} in a link type {linktype} pcap")
        raw, ns = _quantize(f.ts_ns, 10**9 if nano else 10**6)
        sec, frac = divmod(raw, 10**9 if nano else 10**6)
        cap = f.data[:snaplen]
        out.append(struct.pack(order + "IIII", sec, frac, len(cap), f.wire_len) + cap)
        written.append(replace(f, ts_ns=ns))
    return b"".join(out), written


@dataclass(frozen=True)
class Interface:
    """A pcapng Interface Description Block: link type, if_tsresol byte (None: default µs), if_tsoffset."""

    linktype: int
    tsresol: Optional[int] = None  # 9 -> 10^-9 s; 0x94 -> 2^-20 s
    tsoffset_s: int = 0
    name: str = "eth0"
    snaplen: int = 262144

    @property
    def units_per_s(self) -> int:
        r = 6 if self.tsresol is None else self.tsresol
        return 2 ** (r & 0x7F) if r & 0x80 else 10**r


@dataclass(frozen=True)
class Block:
    """Any other pcapng block, written verbatim (type and body)."""

    btype: int
    body: bytes


@dataclass
class Section:
    """One pcapng section: its byte order, interfaces, and packets (iface index, frame) or blocks in order."""

    interfaces: list[Interface]
    items: list[Union[tuple[int, Frame], Block]] = field(default_factory=list)
    big_endian: bool = False


def _opt(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def _block(order: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = 12 + len(body)
    return struct.pack(order + "II", btype, n) + body + struct.pack(order + "I", n)


def pcapng_bytes(sections: Sequence[Section]) -> tuple[bytes, list[Frame]]:
    """A pcapng file of several sections; returns the bytes and the frames with their recovered timestamps."""
    out, written = [], []
    for sec in sections:
        o = ">" if sec.big_endian else "<"
        shb = struct.pack(o + "IHHq", 0x1A2B3C4D, 1, 0, -1) + _opt(o, 4, b"ringscope fixtures") + _opt(o, 0, b"")
        out.append(_block(o, 0x0A0D0D0A, shb))
        for itf in sec.interfaces:
            opts = _opt(o, 2, itf.name.encode())
            if itf.tsresol is not None:
                opts += _opt(o, 9, bytes([itf.tsresol]))
            if itf.tsoffset_s:
                opts += _opt(o, 14, struct.pack(o + "q", itf.tsoffset_s))
            out.append(_block(o, 1, struct.pack(o + "HHI", itf.linktype, 0, itf.snaplen) + opts + _opt(o, 0, b"")))
        for item in sec.items:
            if isinstance(item, Block):
                out.append(_block(o, item.btype, item.body))
                continue
            idx, f = item
            itf = sec.interfaces[idx]
            if f.linktype != itf.linktype:
                raise ValueError(f"frame of link type {f.linktype} on interface {idx} ({itf.linktype})")
            raw, ns = _quantize(f.ts_ns, itf.units_per_s, itf.tsoffset_s)
            cap = f.data[: itf.snaplen]
            body = struct.pack(o + "IIIII", idx, raw >> 32, raw & 0xFFFFFFFF, len(cap), f.wire_len) + cap
            body += b"\0" * (-len(body) % 4) + _opt(o, 1, b"generated") + _opt(o, 0, b"")
            out.append(_block(o, 6, body))
            written.append(replace(f, ts_ns=ns))
    return b"".join(out), written


def gzip_bytes(data: bytes) -> bytes:
    """gzip with a zero mtime, so regenerated fixtures are byte-identical."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def zstd_raw_bytes(data: bytes, block: int = 1 << 17) -> bytes:
    """One zstd frame of raw (stored) blocks: valid zstd that every zstd library version writes the same, so
    regenerated fixtures are byte-identical, and whose bytes a fuzzer flips reach the capture reader."""
    frame = struct.pack("<IBB", 0xFD2FB528, 0x00, 7 << 3)  # magic; no content size; a 128 KiB window
    chunks = [data[i : i + block] for i in range(0, len(data), block)] or [b""]
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        frame += (len(chunk) << 3 | int(last)).to_bytes(3, "little") + chunk  # block type 0: raw
    return frame


# ---- ground truth ----------------------------------------------------------------------------------


def truth(frames: Iterable[Frame]) -> dict:
    """What the frames carry, per flow and per frame kind, from the generator's own bookkeeping."""
    flows: dict[Flow, dict] = {}
    kinds: dict[str, int] = {}
    first = last = None
    records = 0
    for f in frames:
        records += 1
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
        first = f.ts_ns if first is None else min(first, f.ts_ns)
        last = f.ts_ns if last is None else max(last, f.ts_ns)
        if f.flow is None:
            continue
        t = flows.setdefault(
            f.flow,
            {
                "packets": 0,
                "ip_bytes": 0,
                "payload_bytes": 0,
                "retransmitted_bytes": 0,
                "first_ns": f.ts_ns,
                "last_ns": f.ts_ns,
            },
        )
        t["packets"] += int(f.new_packet)
        t["ip_bytes"] += f.ip_bytes
        t["payload_bytes"] += f.payload_bytes
        t["retransmitted_bytes"] += f.retrans_bytes
        t["first_ns"] = min(t["first_ns"], f.ts_ns)
        t["last_ns"] = max(t["last_ns"], f.ts_ns)
    return {
        "records": records,
        "first_ns": first,
        "last_ns": last,
        "frame_kinds": dict(sorted(kinds.items())),
        "flows": [
            {"src": k.src, "dst": k.dst, "sport": k.sport, "dport": k.dport, "proto": k.proto, **v}
            for k, v in sorted(flows.items())
        ],
    }


def flow_key(row: dict) -> tuple:
    """The directed 5-tuple of a truth or result flow row."""
    return (row["src"], row["dst"], int(row["sport"]), int(row["dport"]), row["proto"])


def record_offsets(pcap: bytes) -> list[int]:
    """Offsets where a classic little-endian pcap's records start (a test-side walk of a small file)."""
    offsets, pos = [], 24
    while pos + 16 <= len(pcap):
        offsets.append(pos)
        pos += 16 + struct.unpack_from("<I", pcap, pos + 8)[0]
    return offsets


def write(path: Path, data: bytes) -> Path:
    """Write bytes, creating folders; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path

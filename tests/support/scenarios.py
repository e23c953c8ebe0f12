"""The named captures under fixtures/: which traffic each holds and how its file lays it out.

Each scenario returns the file's bytes and its ground truth (pcapgen.truth of the frames the file really
holds, plus what the file is). fixtures/generate.py writes them with a `<file>.truth.json` beside each;
tests can rebuild any of them into a tmp dir and compare.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Callable

from tests.support.pcapgen import (
    BASE_NS,
    ETHERNET,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_RAW,
    Block,
    Flow,
    Frame,
    Interface,
    Link,
    Section,
    TcpConn,
    arp_request,
    gzip_bytes,
    zstd_raw_bytes,
    ip_packet,
    lldp,
    pcap_bytes,
    pcapng_bytes,
    truth,
    udp_fragments,
)

LINKTYPE_NAMES = {
    LINKTYPE_ETHERNET: "ethernet",
    LINKTYPE_RAW: "raw",
    LINKTYPE_LINUX_SLL: "linux_sll",
    LINKTYPE_LINUX_SLL2: "linux_sll2",
}
STEP_NS = 137_911  # not a whole number of µs, so µs files really round
MSS = 1448
TSO_PAYLOAD = 45 * MSS  # 65160: what tcpdump shows for a full TSO segment with timestamps


def v4(net: int, host: int) -> str:
    return f"10.{net}.0.{host}"


def v6(net: int, host: int) -> str:
    return f"fd00:{net}::{host}"


def _timed(frames: list[Frame], t0: int, step: int = STEP_NS) -> list[Frame]:
    """Lay frames out in order, one step apart; fragments keep their own microsecond spacing."""
    return [replace(f, ts_ns=t0 + i * step) for i, f in enumerate(frames)]


def mixed(link: Link, net: int, t0: int) -> list[Frame]:
    """A bit of everything a training host's link carries: TCP and UDP over IPv4 and IPv6, ARP, LLDP.

    Frames the host received (rev direction) arrive padded on Ethernet when short, as NICs deliver them.
    """
    rx = replace(link, pad=True, outgoing=False)
    c4 = TcpConn(link, v4(net, 1), v4(net, 2), 40000 + net, 5201, isn_c=1_000 * net, isn_s=7_000_000, rev_link=rx)
    c6 = TcpConn(link, v6(net, 1), v6(net, 2), 41000 + net, 5202, isn_c=3_000_000_000, isn_s=9, rev_link=rx)
    u4 = Flow(v4(net, 1), v4(net, 2), 50000 + net, 7000, "udp")
    u4r = Flow(v4(net, 2), v4(net, 1), 7000, 50000 + net, "udp")
    u6 = Flow(v6(net, 1), v6(net, 2), 51000 + net, 7001, "udp")
    frames = [
        *c4.handshake(0),
        c4.data(0, MSS),
        c4.data(0, MSS),
        c4.ack(0),
        c4.data(0, 300),
        ip_packet(link, 0, u4, 1000, ip_id=77),
        ip_packet(link, 0, u4, 200, ip_id=78),
        ip_packet(rx, 0, u4r, 6, ip_id=5),  # 34 IP bytes in a 60-byte padded frame
        *c6.handshake(0),
        c6.data(0, 1000),
        c6.data(0, 1428),
        c6.ack(0),
        ip_packet(link, 0, u6, 512),
        c4.ack(0),
    ]
    if link.linktype != LINKTYPE_RAW:
        frames.insert(0, arp_request(link, 0, v4(net, 1), v4(net, 2)))
    if link.linktype == LINKTYPE_ETHERNET:
        frames.insert(5, lldp(link, 0, v4(net, 1)))
    return _timed(frames, t0)


def _pcap(frames: list[Frame], linktype: int = LINKTYPE_ETHERNET, **kw) -> tuple[bytes, list[Frame]]:
    return pcap_bytes(frames, linktype=linktype, **kw)


def _truth(frames: list[Frame], fmt: str, linktypes: list[int], **extra) -> dict:
    return {"format": fmt, "linktypes": sorted({LINKTYPE_NAMES[x] for x in linktypes}), **truth(frames), **extra}


def _classic(nano: bool, big: bool) -> Callable[[], tuple[bytes, dict]]:
    def build() -> tuple[bytes, dict]:
        data, frames = _pcap(mixed(ETHERNET, 1, BASE_NS + 123_456_789), nano=nano, big_endian=big)
        return data, _truth(frames, f"pcap-{'ns' if nano else 'us'}-{'be' if big else 'le'}", [LINKTYPE_ETHERNET])

    return build


def _nrb() -> Block:
    """A Name Resolution Block: 10.1.0.1 is "h1"."""
    rec = bytes([10, 1, 0, 1]) + b"h1\0"
    return Block(4, (1).to_bytes(2, "little") + len(rec).to_bytes(2, "little") + rec + b"\0" + b"\0" * 4)


def multi_pcapng() -> tuple[list[Section], list[int]]:
    """Two sections (little- then big-endian), five interfaces of four link types and four clocks.

    Section 1: Ethernet at 10^-9 s, Linux cooked v2 at 2^-20 s with if_tsoffset, raw IP at the default µs;
    a name resolution block, an unknown block (0x00000BAD), a custom block (0x40000BAD) and interface
    statistics between the packets. Section 2 (big-endian): Linux cooked v1 at µs, 802.1Q Ethernet at ns.
    """
    t = BASE_NS + 2_000_000_000
    s1_ifaces = [
        Interface(LINKTYPE_ETHERNET, tsresol=9, name="eth0"),
        Interface(LINKTYPE_LINUX_SLL2, tsresol=0x94, tsoffset_s=1_700_000_000, name="any"),
        Interface(LINKTYPE_RAW, name="tun0"),
    ]
    s1 = sorted(
        [(0, f) for f in mixed(ETHERNET, 1, t)]
        + [(1, f) for f in mixed(Link(LINKTYPE_LINUX_SLL2), 2, t + 40_001)]
        + [(2, f) for f in mixed(Link(LINKTYPE_RAW), 3, t + 80_003)],
        key=lambda p: p[1].ts_ns,
    )
    items1: list = [
        _nrb(),
        Block(0x00000BAD, b"an unknown block type"),
        *s1[:10],
        Block(0x40000BAD, (32473).to_bytes(4, "little") + b"custom block, copyable"),
        *s1[10:],
        Block(5, (0).to_bytes(4, "little") + (0).to_bytes(8, "little")),
    ]
    t2 = t + 50_000_000
    s2_ifaces = [
        Interface(LINKTYPE_LINUX_SLL, tsresol=6, name="any"),
        Interface(LINKTYPE_ETHERNET, tsresol=9, name="vlan100"),
    ]
    s2 = sorted(
        [(0, f) for f in mixed(Link(LINKTYPE_LINUX_SLL), 4, t2)]
        + [(1, f) for f in mixed(Link(tags=("dot1q",)), 5, t2 + 7_777)],
        key=lambda p: p[1].ts_ns,
    )
    items2: list = [*s2[:7], Block(0x40000BAD, (32473).to_bytes(4, "big") + b"big-endian custom block"), *s2[7:]]
    sections = [Section(s1_ifaces, items1), Section(s2_ifaces, items2, big_endian=True)]
    linktypes = [i.linktype for s in sections for i in s.interfaces]
    return sections, linktypes


def _multi() -> tuple[bytes, dict]:
    sections, linktypes = multi_pcapng()
    data, frames = pcapng_bytes(sections)
    return data, _truth(frames, "pcapng", linktypes)


def _gz(build: Callable[[], tuple[bytes, dict]]) -> Callable[[], tuple[bytes, dict]]:
    def gz() -> tuple[bytes, dict]:
        data, t = build()
        return gzip_bytes(data), {**t, "format": t["format"] + "+gzip"}

    return gz


def _zst(build: Callable[[], tuple[bytes, dict]]) -> Callable[[], tuple[bytes, dict]]:
    def zst() -> tuple[bytes, dict]:
        data, t = build()
        return zstd_raw_bytes(data), {**t, "format": t["format"] + "+zstd"}

    return zst


def _link(link: Link, nano: bool = False) -> Callable[[], tuple[bytes, dict]]:
    def build() -> tuple[bytes, dict]:
        data, frames = _pcap(mixed(link, 7, BASE_NS + 5_000_000_000), link.linktype, nano=nano)
        return data, _truth(frames, f"pcap-{'ns' if nano else 'us'}-le", [link.linktype])

    return build


def _fragments() -> tuple[bytes, dict]:
    """UDP datagrams in 3 IP fragments (IPv4 and IPv6), interleaved with whole datagrams of the same hosts."""
    f4 = Flow(v4(8, 1), v4(8, 2), 50008, 7000, "udp")
    g4 = Flow(v4(8, 1), v4(8, 2), 50009, 7000, "udp")
    f6 = Flow(v6(8, 1), v6(8, 2), 51008, 7001, "udp")
    frames = [
        ip_packet(ETHERNET, 0, f4, 100, ip_id=1),
        *udp_fragments(ETHERNET, 0, f4, 3200, ip_id=0x1001),
        ip_packet(ETHERNET, 0, g4, 700, ip_id=2),
        *udp_fragments(ETHERNET, 0, g4, 2500, ip_id=0x1002),
        *udp_fragments(ETHERNET, 0, f6, 3000, ip_id=0xABCDEF),
        ip_packet(ETHERNET, 0, f6, 64),
    ]
    data, frames = _pcap(_timed(frames, BASE_NS + 6_000_000_000, 10_000))
    return data, _truth(frames, "pcap-us-le", [LINKTYPE_ETHERNET])


def _tso() -> tuple[bytes, dict]:
    """Headers-only (snaplen 96) capture of TSO segments: the IP header says ~65 KB, 96 bytes were kept."""
    c4 = TcpConn(ETHERNET, v4(9, 1), v4(9, 2), 40009, 29500, isn_c=123)
    c6 = TcpConn(ETHERNET, v6(9, 1), v6(9, 2), 41009, 29501, isn_c=456)
    frames = [
        *c4.handshake(0),
        c4.data(0, TSO_PAYLOAD, keep=64),
        c4.data(0, TSO_PAYLOAD, keep=64),
        c4.ack(0),
        c4.data(0, 20 * MSS, keep=64),
        c4.data(0, MSS),
        c4.ack(0),
        *c6.handshake(0),
        c6.data(0, 45 * 1428, keep=64),
        c6.data(0, 1428),
        c6.ack(0),
    ]
    data, frames = _pcap(_timed(frames, BASE_NS + 7_000_000_000, 530_000), nano=True, snaplen=96)
    return data, _truth(frames, "pcap-ns-le", [LINKTYPE_ETHERNET], snaplen=96)


def _iplen0() -> tuple[bytes, dict]:
    """BIG TCP sends: IPv4 total length 0 and IPv6 payload length 0; only the frame length tells the size."""
    c4 = TcpConn(ETHERNET, v4(10, 1), v4(10, 2), 40010, 29500, isn_c=5)
    c6 = TcpConn(Link(LINKTYPE_ETHERNET, tags=("dot1q",)), v6(10, 1), v6(10, 2), 41010, 29501, isn_c=6)
    frames = [
        c4.data(0, 150_000, keep=64, ip_len_field=0),
        c4.data(0, TSO_PAYLOAD, keep=64),
        c4.ack(0),
        c4.data(0, 100 * MSS, keep=64, ip_len_field=0),
        c6.data(0, 120_000, keep=64, ip_len_field=0),
        c6.data(0, 1000),
        c6.ack(0),
    ]
    data, frames = _pcap(_timed(frames, BASE_NS + 8_000_000_000, 1_300_000), nano=True, snaplen=128)
    return data, _truth(frames, "pcap-ns-le", [LINKTYPE_ETHERNET], snaplen=128)


def _retrans() -> tuple[bytes, dict]:
    """Retransmissions with known bytes: whole segments, a partial overlap, and across the 2^32 wrap."""
    c = TcpConn(ETHERNET, v4(11, 1), v4(11, 2), 40011, 29500, isn_c=2**32 - 4 * MSS)
    frames = (
        [*c.handshake(0)]
        + [c.data(0, MSS) for _ in range(5)]
        + [
            c.ack(0),
            c.resend(0, MSS, MSS),  # segment 2 again: 1448 retransmitted
            c.resend(0, 5 * MSS - 500, MSS),  # 500 old bytes + 948 new
            c.data(0, MSS),
            c.data(0, MSS),  # new data, past the sequence wrap
            c.resend(0, 6 * MSS + 448, 2 * MSS),  # after the wrap: 1948 old bytes, 948 new
            c.ack(0),
            c.ack(0),  # a duplicate ACK carries no payload: nothing retransmitted
        ]
    )
    data, frames = _pcap(_timed(frames, BASE_NS + 9_000_000_000, 25_000))
    return data, _truth(frames, "pcap-us-le", [LINKTYPE_ETHERNET])


def _reordered() -> tuple[bytes, dict]:
    """What the sender knows, captured out of order: segments the tap saw a few µs out of sequence are not
    retransmissions (a one-segment hole, a hole filled from its end, then from its start, two holes open at
    once); a quick resend of bytes already seen is one; a segment lost before the tap and resent 5 ms later
    fills its hole late: one."""
    c = TcpConn(ETHERNET, v4(12, 1), v4(12, 2), 40012, 29500, isn_c=77)
    s = [c.data(0, MSS) for _ in range(18)]
    again = c.resend(0, 3 * MSS, MSS)  # segment 3 again at once: 1448 retransmitted
    lost_at = c.high[c.fwd]
    c.data(0, MSS)  # lost before the tap: never captured
    after = c.data(0, MSS)
    two_holes = [s[12], s[14], s[16], s[13], s[15], s[17]]  # two holes open at once, both filled
    frames = _timed(
        [
            *c.handshake(0),
            s[0],
            s[2],
            s[1],
            s[3],
            again,
            s[5],
            s[6],
            s[4],
            s[7],
            s[8],
            s[11],
            s[10],
            s[9],
            *two_holes,
            c.ack(0),
            after,
        ],
        BASE_NS + 9_500_000_000,
        25_000,
    )
    late = replace(c.resend(0, lost_at, MSS), ts_ns=frames[-1].ts_ns + 5_000_000)
    data, frames = _pcap([*frames, late, replace(c.ack(0), ts_ns=late.ts_ns + 25_000)])
    return data, _truth(frames, "pcap-us-le", [LINKTYPE_ETHERNET])


def truncated() -> tuple[bytes, dict]:
    """A pcap whose last record was cut in half (tcpdump killed mid-write): the rest is valid."""
    data, frames = _pcap(mixed(ETHERNET, 12, BASE_NS + 10_000_000_000))
    last = 16 + len(frames[-1].data)
    cut = len(data) - last // 2
    return data[:cut], _truth(
        frames[:-1],
        "pcap-us-le",
        [LINKTYPE_ETHERNET],
        truncated_at=len(data) - last,
        ignored_bytes=cut - (len(data) - last),
    )


def corrupt() -> tuple[bytes, dict]:
    """A pcap whose magic number was overwritten: not a capture at all."""
    data, _ = _pcap(mixed(ETHERNET, 13, BASE_NS))
    return b"\xde\xad\xbe\xef" + data[4:], {"error": "not a pcap, pcapng or gzip file", "error_offset": 0}


# relative path under fixtures/ -> builder returning (file bytes, ground truth)
SCENARIOS: dict[str, Callable[[], tuple[bytes, dict]]] = {
    "formats/pcap-us-le.pcap": _classic(False, False),
    "formats/pcap-us-be.pcap": _classic(False, True),
    "formats/pcap-ns-le.pcap": _classic(True, False),
    "formats/pcap-ns-be.pcap": _classic(True, True),
    "formats/multi.pcapng": _multi,
    "formats/gzip-pcap.pcap.gz": _gz(_classic(False, True)),
    "formats/gzip-pcapng.pcapng.gz": _gz(_multi),
    "formats/zstd-pcap.pcap.zst": _zst(_classic(True, False)),
    "linktypes/eth-dot1q.pcap": _link(Link(LINKTYPE_ETHERNET, tags=("dot1q",))),
    "linktypes/eth-qinq.pcap": _link(Link(LINKTYPE_ETHERNET, tags=("qinq",))),
    "linktypes/linux-sll.pcap": _link(Link(LINKTYPE_LINUX_SLL)),
    "linktypes/linux-sll2.pcap": _link(Link(LINKTYPE_LINUX_SLL2), nano=True),
    "linktypes/raw-ip.pcap": _link(Link(LINKTYPE_RAW)),
    "accounting/fragments.pcap": _fragments,
    "accounting/tso-headers-only.pcap": _tso,
    "accounting/iplen0.pcap": _iplen0,
    "accounting/retransmissions.pcap": _retrans,
    "accounting/reordered.pcap": _reordered,
    "bad/truncated.pcap": truncated,
    "bad/corrupt.pcap": corrupt,
}


def truth_path(capture: Path) -> Path:
    """Where a capture's ground truth lives: beside it."""
    return capture.with_name(capture.name + ".truth.json")


def render(name: str) -> dict[str, bytes]:
    """One scenario's files (capture and truth JSON) as relative path -> bytes."""
    data, t = SCENARIOS[name]()
    t = {"file": Path(name).name, **t}
    return {name: data, str(truth_path(Path(name))): (json.dumps(t, indent=1) + "\n").encode()}


def write_scenarios(root: Path, names: list[str] | None = None) -> list[Path]:
    """Write scenarios (default: all) under root; returns the capture paths."""
    out = []
    for name in names or list(SCENARIOS):
        for rel, data in render(name).items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        out.append(root / name)
    return out


def load_truth(capture: Path) -> dict:
    """The ground truth written beside a capture."""
    return json.loads(truth_path(capture).read_text())

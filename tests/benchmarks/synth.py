"""Generate a large, realistic ring all-reduce capture of one host, fast (numpy, no per-packet Python).

What one host of an N-host ring sees with headers-only tcpdump (snaplen 96): C long-lived TCP
connections to its ring predecessor carrying its sends (TSO-sized and MTU-sized segments), C from its
successor carrying what it receives, and the ACKs of both, in bursts once per iteration separated by
compute gaps. The ground truth (per-flow packets and IP bytes) comes from the generator's own arrays.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ETH_IP_TCP = 14 + 20 + 32  # TCP with the timestamp option, as Linux sends it
DATA_CAPLEN = 96
ACK_CAPLEN = ETH_IP_TCP
CHUNK = 500_000


@dataclass
class Truth:
    """Per-flow ground truth: one row per directed 5-tuple."""

    src: list[str]
    dst: list[str]
    sport: np.ndarray
    dport: np.ndarray
    packets: np.ndarray
    ip_bytes: np.ndarray
    first_ns: int
    last_ns: int

    def as_dict(self) -> dict[tuple[str, str, int, int], tuple[int, int]]:
        """(src, dst, sport, dport) -> (packets, ip bytes)."""
        return {
            (s, d, int(a), int(b)): (int(p), int(y))
            for s, d, a, b, p, y in zip(self.src, self.dst, self.sport, self.dport, self.packets, self.ip_bytes)
        }


def host_address(me: Any) -> tuple[Any, Any]:
    """Host ME's (1-based) last two octets in 10.77.0.0/16: 254 hosts a /24 (.1 to .254), then the next /24, so a
    ring of thousands of hosts never reuses an address (the third octet once wrapped: hosts 257-512 of a 512-host
    ring were 1-256 again, and the ring was read twice)."""
    return (me - 1) // 254, (me - 1) % 254 + 1


def host_ip(me: int) -> str:
    """Host ME's address as text."""
    third, fourth = host_address(me)
    return f"10.77.{third}.{fourth}"


def ring_capture(
    path: Path,
    *,
    packets: int,
    hosts: int = 4,
    me: int = 1,
    conns: int = 8,
    iterations: int = 50,
    fmt: str = "pcap",
    seed: int = 0,
    start_ns: int = 1_763_000_000_000_000_000,
) -> Truth:
    """Write host `me`'s capture (1..hosts) of a ring all-reduce with `packets` records; returns the ground truth.

    Host host_ip(me) sends to its ring predecessor and receives from its successor, so the captures
    of me = 1..hosts are the same ring seen from each host (byte counts differ: each is its own draw).
    """
    rng = np.random.default_rng(seed)
    pred, succ = (me - 2) % hosts + 1, me % hosts + 1
    n_data = packets * 2 // 3
    n_ack = packets - n_data
    # flows 0..C-1: me -> pred (tx); C..2C-1: succ -> me (rx)
    data_flow = rng.integers(0, 2 * conns, n_data)
    tso = rng.random(n_data) < 0.3
    payload = np.where(tso, rng.integers(16_000, 65_000, n_data), 1448).astype(np.int64)
    # bursts: each iteration communicates for 60 % of its period, then computes
    period_ns = 200_000_000
    it = rng.integers(0, iterations, n_data)
    t_data = start_ns + it * period_ns + rng.integers(0, period_ns * 6 // 10, n_data)
    ack_of = rng.integers(0, n_data, n_ack)
    t_ack = t_data[ack_of] + rng.integers(5_000, 50_000, n_ack)
    ack_flow = data_flow[ack_of] + 2 * conns  # flows 2C..4C-1: the reverse (ACK) directions

    flow = np.concatenate([data_flow, ack_flow])
    ts = np.concatenate([t_data, t_ack])
    ip_len = np.concatenate([payload + 52, np.full(n_ack, 52, dtype=np.int64)])
    caplen = np.concatenate([np.full(n_data, DATA_CAPLEN), np.full(n_ack, ACK_CAPLEN)])
    order = np.argsort(ts, kind="stable")
    flow, ts, ip_len, caplen = flow[order], ts[order], ip_len[order], caplen[order]

    nflows = 4 * conns
    fidx = np.arange(nflows)
    base = fidx % (2 * conns)
    is_tx_side = base < conns  # data me->pred, or its ACK pred->me
    data_src = np.where(is_tx_side, me, succ)
    data_dst = np.where(is_tx_side, pred, me)
    reverse = fidx >= 2 * conns
    src = np.where(reverse, data_dst, data_src)
    dst = np.where(reverse, data_src, data_dst)
    conn = base % conns
    data_sport, data_dport = 50_000 + conn, 43_000 + conn
    sport = np.where(reverse, data_dport, data_sport)
    dport = np.where(reverse, data_sport, data_dport)

    seq = _sequence_numbers(flow, ip_len - 52, nflows)
    ack = _ack_numbers(flow, seq, ip_len - 52, conns)
    _write(path, fmt, ts, caplen, ip_len, src[flow], dst[flow], sport[flow], dport[flow], seq, ack)
    pk = np.bincount(flow, minlength=nflows)
    by = np.bincount(flow, weights=ip_len, minlength=nflows).astype(np.int64)
    return Truth(
        src=[host_ip(int(a)) for a in src],
        dst=[host_ip(int(a)) for a in dst],
        sport=sport,
        dport=dport,
        packets=pk,
        ip_bytes=by,
        first_ns=int(ts[0]),
        last_ns=int(ts[-1]),
    )


def _sequence_numbers(flow: np.ndarray, payload: np.ndarray, nflows: int) -> np.ndarray:
    """Per-flow running TCP sequence numbers (mod 2^32), so no segment looks retransmitted."""
    order = np.argsort(flow, kind="stable")
    csum = np.cumsum(payload[order])
    starts = np.searchsorted(flow[order], np.arange(nflows))
    before = np.concatenate([[0], csum])[starts]
    within = csum - payload[order] - np.repeat(before, np.diff(np.append(starts, len(flow))))
    seq = np.empty(len(flow), dtype=np.int64)
    seq[order] = (within + 1_000_000) & 0xFFFFFFFF
    return seq


def _ack_numbers(flow: np.ndarray, seq: np.ndarray, payload: np.ndarray, conns: int) -> np.ndarray:
    """ACKs acknowledge everything their data flow has sent so far; data segments ack the idle reverse side.

    Real cumulative ACKs matter: tshark's sequence analysis keeps every unacknowledged segment.
    """
    import pandas as pd

    is_ack = flow >= 2 * conns
    data_flow = np.where(is_ack, flow - 2 * conns, flow)
    end = pd.Series(np.where(is_ack, np.nan, (seq + payload) & 0xFFFFFFFF))
    acked = end.groupby(data_flow).ffill().fillna(1_000_000).to_numpy(np.int64)
    return np.where(is_ack, acked, 1_000_000)


def _headers(
    caplen: np.ndarray,
    ip_len: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    sport: np.ndarray,
    dport: np.ndarray,
    seq: np.ndarray,
    ack: np.ndarray,
) -> np.ndarray:
    """Frame bytes (Ethernet/IPv4/TCP, payload zeros) as an n x 96 matrix; each record uses its caplen."""
    n = len(caplen)
    h = np.zeros((n, DATA_CAPLEN), dtype=np.uint8)
    h[:, 0:6] = [2, 0, 0, 0, 0, 2]
    h[:, 6:12] = [2, 0, 0, 0, 0, 1]
    h[:, 12:14] = [8, 0]
    h[:, 14] = 0x45
    h[:, 16] = ip_len >> 8
    h[:, 17] = ip_len & 255
    h[:, 20] = 0x40  # don't fragment
    h[:, 22] = 64
    h[:, 23] = 6
    h[:, 26:28] = [10, 77]
    h[:, 28], h[:, 29] = host_address(src)
    h[:, 30:32] = [10, 77]
    h[:, 32], h[:, 33] = host_address(dst)
    for off, val, width in ((34, sport, 2), (36, dport, 2), (38, seq, 4), (42, ack, 4)):
        for k in range(width):
            h[:, off + k] = (val >> (8 * (width - 1 - k))) & 255
    h[:, 46] = 0x80  # data offset 8 words: 32-byte TCP header
    h[:, 47] = 0x10  # ACK
    h[:, 48:50] = 0xFF  # receive window
    return h


def _write(
    path: Path,
    fmt: str,
    ts: np.ndarray,
    caplen: np.ndarray,
    ip_len: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    sport: np.ndarray,
    dport: np.ndarray,
    seq: np.ndarray,
    ack: np.ndarray,
) -> None:
    with open(path, "wb") as out:
        if fmt == "pcap":
            out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, DATA_CAPLEN, 1))
        else:
            out.write(_pcapng_header())
        for lo in range(0, len(ts), CHUNK):
            sl = slice(lo, lo + CHUNK)
            frames = _headers(caplen[sl], ip_len[sl], src[sl], dst[sl], sport[sl], dport[sl], seq[sl], ack[sl])
            out.write(_records(fmt, ts[sl], caplen[sl], ip_len[sl] + 14, frames))


def _records(fmt: str, ts: np.ndarray, caplen: np.ndarray, wirelen: np.ndarray, frames: np.ndarray) -> bytes:
    """Serialise records by scattering each field into a flat byte buffer (vectorized)."""
    if fmt == "pcap":
        hdr = np.zeros((len(ts), 4), dtype="<u4")
        hdr[:, 0] = ts // 1_000_000_000
        hdr[:, 1] = ts % 1_000_000_000
        hdr[:, 2] = caplen
        hdr[:, 3] = wirelen
        pad = np.zeros(len(ts), dtype=np.int64)
        lead = 16
    else:
        padded = (caplen + 3) // 4 * 4
        blen = 28 + padded + 4
        hdr = np.zeros((len(ts), 7), dtype="<u4")
        hdr[:, 0] = 6
        hdr[:, 1] = blen
        hdr[:, 3] = ts >> 32
        hdr[:, 4] = ts & 0xFFFFFFFF
        hdr[:, 5] = caplen
        hdr[:, 6] = wirelen
        pad = padded - caplen
        lead = 28
    size = lead + caplen + pad + (4 if fmt == "pcapng" else 0)
    starts = np.concatenate([[0], np.cumsum(size)[:-1]])
    buf = np.zeros(int(size.sum()), dtype=np.uint8)
    hb = hdr.view(np.uint8).reshape(len(ts), lead)
    buf[(starts[:, None] + np.arange(lead)).ravel()] = hb.ravel()
    for cl in np.unique(caplen):
        rows = np.nonzero(caplen == cl)[0]
        buf[(starts[rows, None] + lead + np.arange(cl)).ravel()] = frames[rows, :cl].ravel()
    if fmt == "pcapng":
        tail = starts + size - 4
        buf[(tail[:, None] + np.arange(4)).ravel()] = (
            np.asarray(size, dtype="<u4").view(np.uint8).reshape(-1, 4).ravel()
        )
    return buf.tobytes()


def _pcapng_header() -> bytes:
    shb = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    opt = struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)  # if_tsresol = 10^-9
    body = struct.pack("<HHI", 1, 0, DATA_CAPLEN) + opt
    idb = struct.pack("<II", 1, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))
    return shb + idb


ROCE_QPS = 32  # queue pairs: 2 per connection of 8 each way, and the ACK queue pairs back
ETH_IP_UDP_BTH = 14 + 20 + 8 + 12


def roce_capture(path: Path, *, packets: int, me: int = 1, iterations: int = 50, seed: int = 0) -> dict[int, int]:
    """Write a RoCEv2 capture of one host with `packets` records as NCCL's IB transport sends a ring: RDMA WRITE
    first (RETH) / middle / last with immediate (ImmDt) packets of 4 KiB on 16 queue pairs each way, and ACKs
    (AETH) on their reverse queue pairs, PSNs in order per queue pair; headers only (the kernel cut). Returns the
    ground truth: packets per destination QP."""
    rng = np.random.default_rng(seed)
    n_ack = packets // 10
    n_data = packets - n_ack
    qp = np.concatenate([rng.integers(0, ROCE_QPS // 2, n_data), rng.integers(ROCE_QPS // 2, ROCE_QPS, n_ack)])
    period_ns = 200_000_000
    it = rng.integers(0, iterations, packets)
    ts = 1_763_000_000_000_000_000 + it * period_ns + rng.integers(0, period_ns * 6 // 10, packets)
    order = np.argsort(ts, kind="stable")
    qp, ts = qp[order], ts[order]
    is_ack = qp >= ROCE_QPS // 2
    position = np.zeros(packets, np.int64)  # each packet's number within its queue pair: its PSN
    for q in range(ROCE_QPS):
        rows = np.flatnonzero(qp == q)
        position[rows] = np.arange(len(rows))
    kind = position % 32  # messages of 32 packets: first, 30 middles, last with immediate
    op = np.where(is_ack, 0x11, np.where(kind == 0, 0x06, np.where(kind == 31, 0x09, 0x07)))
    ext = np.where(op == 0x06, 16, np.where((op == 0x09) | (op == 0x11), 4, 0))
    payload = np.where(is_ack, 0, 4096)
    ip_len = 20 + 8 + 12 + ext + payload + 4
    caplen = ETH_IP_UDP_BTH + ext
    width = int(caplen.max())
    h = np.zeros((packets, width), dtype=np.uint8)
    h[:, 0:6] = [2, 0, 0, 0, 0, 2]
    h[:, 6:12] = [2, 0, 0, 0, 0, 1]
    h[:, 12:14] = [8, 0]
    h[:, 14] = 0x45
    h[:, 15] = 26 << 2 | 2  # DSCP 26, ECT(0)
    h[:, 16] = ip_len >> 8
    h[:, 17] = ip_len & 255
    h[:, 20] = 0x40
    h[:, 22] = 64
    h[:, 23] = 17
    peer = np.where(is_ack, me % 4 + 1, me % 4 + 1)
    h[:, 26:29] = [10, 77, 0]
    h[:, 29] = np.where(is_ack, peer, me)
    h[:, 30:33] = [10, 77, 0]
    h[:, 33] = np.where(is_ack, me, peer)
    h[:, 34] = 0xC0
    h[:, 35] = qp
    h[:, 36:38] = [ROCE_UDP_HI, ROCE_UDP_LO]
    udp_len = ip_len - 20
    h[:, 38] = udp_len >> 8
    h[:, 39] = udp_len & 255
    h[:, 42] = op
    h[:, 43] = 0x40
    h[:, 44:46] = 0xFF
    dest_qp = 0x100 + qp
    h[:, 47] = dest_qp >> 16
    h[:, 48] = (dest_qp >> 8) & 255
    h[:, 49] = dest_qp & 255
    h[:, 50] = np.where(kind == 31, 0x80, 0)  # AckReq on each message's last packet
    psn = position & 0xFFFFFF
    h[:, 51] = psn >> 16
    h[:, 52] = (psn >> 8) & 255
    h[:, 53] = psn & 255
    h[is_ack, 54] = 0x1F  # AETH: ACK
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, width, 1))
        for lo in range(0, packets, CHUNK):
            sl = slice(lo, lo + CHUNK)
            out.write(_records("pcap", ts[sl], caplen[sl], ip_len[sl] + 14, h[sl]))
    return {0x100 + q: int(c) for q, c in enumerate(np.bincount(qp, minlength=ROCE_QPS))}


ROCE_UDP_HI, ROCE_UDP_LO = 4791 >> 8, 4791 & 255

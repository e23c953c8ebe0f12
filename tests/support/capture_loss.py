"""A capture that lost records, made from a whole one: records removed in bursts, as a sniffer that falls behind
a busy link drops them (issue 47). The truth is what was removed, counted here with dpkt's own decoding, apart
from the analyzer under test."""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tests.support.requirements import require_module


@dataclass(frozen=True)
class Removed:
    """What removing records took from one capture file."""

    records: int
    of_records: int
    tcp_payload: int  # TCP payload bytes (IP total length less headers) in the removed records
    of_tcp_payload: int  # of the whole file, or of the part records were removed from
    between_ns: tuple[int, int] | None = None  # that part, in capture time

    @property
    def payload_share(self) -> float:
        return self.tcp_payload / self.of_tcp_payload if self.of_tcp_payload else 0.0


def keep_mask(n: int, share: float, burst: int, seed: int) -> np.ndarray:
    """False for about SHARE of N records, in runs of BURST (a run may overlap another)."""
    rng = np.random.default_rng(seed)
    keep = np.ones(n, bool)
    while n and (~keep).mean() < share:
        start = int(rng.integers(0, max(1, n - burst)))
        keep[start : start + burst] = False
    return keep


def remove_in_bursts(
    path: Path, share: float, burst: int = 200, seed: int = 1, between: tuple[float, float] | None = None
) -> Removed:
    """Rewrite the classic pcap at PATH (gzip-compressed when it ends in .gz) without about SHARE of its
    records, taken in bursts of BURST records; with BETWEEN (fractions of the file's TCP payload, in capture order),
    only records of that part of it are removed, and what was removed is counted against that part."""
    dpkt = require_module("dpkt")
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    head, records, stamps = raw[:24], [], []
    endian = "<" if raw[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    tick = 1 if raw[:4] in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1000  # ns or us resolution
    at = 24
    while at + 16 <= len(raw):
        sec, frac, incl = struct.unpack(endian + "III", raw[at : at + 12])
        records.append(raw[at : at + 16 + incl])
        stamps.append(sec * 10**9 + frac * tick)
        at += 16 + incl
    t = np.array(stamps, dtype=np.int64)
    payload = np.zeros(len(records), np.int64)
    for i, rec in enumerate(records):
        ip = dpkt.ethernet.Ethernet(rec[16:]).data
        if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
            payload[i] = ip.len - ip.hl * 4 - ip.data.off * 4
    inside = np.ones(len(records), bool)
    lo = hi = 0
    if between is not None and len(t):
        reached = np.cumsum(payload) / max(int(payload.sum()), 1)
        inside = (reached > between[0]) & (reached <= between[1])
        lo, hi = int(t[inside].min()), int(t[inside].max())
    keep = keep_mask(len(records), share, burst, seed) | ~inside
    body = head + b"".join(r for r, k in zip(records, keep) if k)
    path.write_bytes(gzip.compress(body) if path.suffix == ".gz" else body)
    removed = Removed(int((~keep).sum()), len(records), int(payload[~keep].sum()), int(payload.sum()))
    return (
        removed if between is None else replace(removed, of_tcp_payload=int(payload[inside].sum()), between_ns=(lo, hi))
    )


def tcp_payload_between(path: Path, lo_ns: int, hi_ns: int) -> int:
    """TCP payload bytes (dpkt's decoding) of the records of the classic pcap at PATH captured in [LO_NS, HI_NS)."""
    dpkt = require_module("dpkt")
    opener = gzip.open if path.suffix == ".gz" else open
    total = 0
    with opener(path, "rb") as f:
        for ts, frame in dpkt.pcap.Reader(f):
            ns = int(round(float(ts) * 1e9))
            ip = dpkt.ethernet.Ethernet(frame).data
            if lo_ns <= ns < hi_ns and isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                total += ip.len - ip.hl * 4 - ip.data.off * 4
    return total

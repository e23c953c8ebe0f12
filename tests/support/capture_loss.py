"""A capture that lost records, made from a whole one: records removed in bursts, as a sniffer that falls behind
a busy link drops them (issue 47). The truth is what was removed, counted here with dpkt's own decoding, apart
from the analyzer under test."""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.support.requirements import require_module


@dataclass(frozen=True)
class Removed:
    """What removing records took from one capture file."""

    records: int
    of_records: int
    tcp_payload: int  # TCP payload bytes (IP total length less headers) in the removed records
    of_tcp_payload: int

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


def remove_in_bursts(path: Path, share: float, burst: int = 200, seed: int = 1) -> Removed:
    """Rewrite the classic pcap at PATH (gzip-compressed when it ends in .gz) without about SHARE of its
    records, taken in bursts of BURST records."""
    dpkt = require_module("dpkt")
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    head, records = raw[:24], []
    endian = "<" if raw[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    at = 24
    while at + 16 <= len(raw):
        incl = struct.unpack(endian + "I", raw[at + 8 : at + 12])[0]
        records.append(raw[at : at + 16 + incl])
        at += 16 + incl
    keep = keep_mask(len(records), share, burst, seed)
    payload = np.zeros(len(records), np.int64)
    for i, rec in enumerate(records):
        ip = dpkt.ethernet.Ethernet(rec[16:]).data
        if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
            payload[i] = ip.len - ip.hl * 4 - ip.data.off * 4
    body = head + b"".join(r for r, k in zip(records, keep) if k)
    path.write_bytes(gzip.compress(body) if path.suffix == ".gz" else body)
    return Removed(int((~keep).sum()), len(records), int(payload[~keep].sum()), int(payload.sum()))

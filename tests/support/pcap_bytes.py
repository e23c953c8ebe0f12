"""Count TCP bytes in a headers-only pcap with dpkt, independently of the analyzer under test."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def tcp_bytes(pcap: Path, src: str | None = None, dport: int | None = None) -> tuple[int, int]:
    """(stream, wire) TCP payload bytes, optionally only from SRC / to DPORT.

    Lengths come from the IP and TCP headers (the capture holds headers only). stream counts each
    byte of every connection once (the sequence-number span: what the application sent); wire adds
    retransmissions, which a loaded machine can cause even on loopback.
    """
    dpkt = pytest.importorskip("dpkt")
    first, end, wire = {}, {}, 0
    with open(pcap, "rb") as f:
        for _ts, buf in dpkt.pcap.UniversalReader(f):
            ip = dpkt.ethernet.Ethernet(buf).data
            if not (isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP)):
                continue
            tcp = ip.data
            if (src is not None and socket.inet_ntoa(ip.src) != src) or (dport is not None and tcp.dport != dport):
                continue
            payload = ip.len - ip.hl * 4 - tcp.off * 4
            if payload <= 0:
                continue
            wire += payload
            flow = (ip.src, tcp.sport, ip.dst, tcp.dport)
            start = first.setdefault(flow, tcp.seq)
            end[flow] = max(end.get(flow, 0), (tcp.seq - start) % 2**32 + payload)
    return sum(end.values()), wire

"""The dpkt baseline users write by hand: a per-packet decode loop summing IP bytes per flow."""

from __future__ import annotations

import socket
import sys
from collections import defaultdict

import dpkt

if __name__ == "__main__":
    totals: dict[tuple[str, str, int, int], int] = defaultdict(int)
    with open(sys.argv[1], "rb") as fh:
        reader = dpkt.pcap.UniversalReader(fh)
        for _ts, buf in reader:
            eth = dpkt.ethernet.Ethernet(buf)
            ip = eth.data
            if not isinstance(ip, dpkt.ip.IP):
                continue
            tcp = ip.data
            sport, dport = (tcp.sport, tcp.dport) if isinstance(tcp, (dpkt.tcp.TCP, dpkt.udp.UDP)) else (0, 0)
            totals[(socket.inet_ntoa(ip.src), socket.inet_ntoa(ip.dst), sport, dport)] += ip.len
    for (s, d, a, b), n in totals.items():
        print(s, d, a, b, n)

"""Time scapy or pyshark on the first N packets of a capture (they are too slow for the whole file).

Prints seconds, the IP bytes the tool counted, and the IP bytes dpkt counts on the same prefix.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import dpkt


def write_prefix(path: str, n: int) -> tuple[str, int]:
    """Copy the first n packets into a temporary classic pcap; also their IP bytes as dpkt reads them."""
    out = tempfile.NamedTemporaryFile(suffix=".pcap", delete=False)
    ip_bytes = 0
    with open(path, "rb") as fh:
        reader = dpkt.pcap.UniversalReader(fh)
        writer = dpkt.pcap.Writer(out, snaplen=65535, nano=True)
        for i, (ts, buf) in enumerate(reader):
            if i == n:
                break
            writer.writepkt(buf, ts)
            eth = dpkt.ethernet.Ethernet(buf)
            if isinstance(eth.data, dpkt.ip.IP):
                ip_bytes += eth.data.len
    out.close()
    return out.name, ip_bytes


def count(tool: str, prefix: str) -> int:
    """The IP bytes TOOL (scapy or pyshark) counts in the capture PREFIX."""
    total = 0
    if tool == "scapy":
        from scapy.all import IP, PcapReader

        for pkt in PcapReader(prefix):
            if IP in pkt:
                total += pkt[IP].len
        return total
    import pyshark

    cap = pyshark.FileCapture(prefix, keep_packets=False)
    for pkt in cap:
        if hasattr(pkt, "ip"):
            total += int(pkt.ip.len)
    cap.close()
    return total


if __name__ == "__main__":
    tool, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    prefix, expected = write_prefix(path, n)
    try:
        t0 = time.perf_counter()
        total = count(tool, prefix)
        print(time.perf_counter() - t0, total, expected)
    finally:
        os.unlink(prefix)  # a temporary file: the benchmark leaves nothing behind

"""Guard against the hot path losing its compiled, vectorized shape (not a timing benchmark).

The bound is relative to reading the same file measured in the same test, and generous (a per-packet
Python loop is ~100x slower than the kernel, so it cannot hide inside it), so machine noise cannot flake it.
"""
from __future__ import annotations

import time
from pathlib import Path

from analyze.scan import scan_stream
from tests.benchmarks.synth import ring_capture

PACKETS = 1_000_000


def _read_all(path: Path) -> float:
    """Seconds to read the file once, like `cat` (page cache warm after the first pass)."""
    buf = bytearray(1 << 22)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass
    return time.perf_counter() - t0


def test_one_million_packets_read_near_the_speed_of_cat(tmp_path: Path) -> None:
    path = tmp_path / "ring.pcap"
    truth = ring_capture(path, packets=PACKETS)
    scan_stream([path], bin_ns=10_000_000, byte_mode=0)  # JIT load, page cache warm
    cat = min(_read_all(path) for _ in range(3))
    t0 = time.perf_counter()
    scan = scan_stream([path], bin_ns=10_000_000, byte_mode=0)
    elapsed = time.perf_counter() - t0
    assert scan.records == PACKETS
    assert int(scan.agg[:, 1].sum()) == int(truth.ip_bytes.sum())
    assert elapsed < 40 * cat + 0.75, f"scan {elapsed:.3f} s vs cat {cat:.3f} s: is the hot path still compiled?"

"""Guard against the hot path losing its compiled, vectorized shape (not a timing benchmark).

The bounds are relative to work measured in the same test on the same file: a bare per-record Python loop
(any per-packet Python loop takes at least that long; the scan must take under half of it and takes about
a seventh) and reading the file like `cat`.
"""
from __future__ import annotations

import struct
import time
from pathlib import Path

from analyze.scan import scan_stream
from tests.benchmarks.catlike import CAT_BLOCK, read_like_cat
from tests.benchmarks.synth import ring_capture

PACKETS = 1_000_000


def _python_walk(path: Path, records: int) -> float:
    """Seconds for the leanest per-record Python loop: each record's length and its IP total length."""
    data = path.read_bytes()
    t0 = time.perf_counter()
    pos, total = 24, 0
    for _ in range(records):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        total += struct.unpack_from(">H", data, pos + 16 + 14 + 2)[0]
        pos += 16 + caplen
    return time.perf_counter() - t0


def test_one_million_packets_read_far_faster_than_any_python_loop(tmp_path: Path) -> None:
    path = tmp_path / "ring.pcap"
    truth = ring_capture(path, packets=PACKETS)
    scan_stream([path], bin_ns=10_000_000, byte_mode=0)  # kernel loaded, page cache warm
    block = bytearray(CAT_BLOCK)
    cat = min(read_like_cat(path, block) for _ in range(3))  # page cache warm after the scan above
    loop = min(_python_walk(path, PACKETS // 10) for _ in range(3)) * 10  # a tenth, extrapolated
    t0 = time.perf_counter()
    scan = scan_stream([path], bin_ns=10_000_000, byte_mode=0)
    elapsed = time.perf_counter() - t0
    assert scan.records == PACKETS
    assert int(scan.agg[:, 1].sum()) == int(truth.ip_bytes.sum())
    # both bounds measured in this test, on this machine, at this moment: noise moves them together
    assert elapsed < loop / 2, f"scan {elapsed:.3f} s vs a bare Python loop {loop:.3f} s: is the hot path compiled?"
    assert elapsed < 40 * cat + 0.25, f"scan {elapsed:.3f} s vs cat {cat:.3f} s"

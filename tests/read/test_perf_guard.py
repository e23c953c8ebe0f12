"""Guard against the hot path losing its compiled, vectorized shape (not a timing benchmark).

The bounds are relative to work measured in the same test on the same file: a bare per-record Python loop
(any per-packet Python loop takes at least that long; the scan must take under half of it and takes about
a seventh) and reading the file like `cat`. After the reading, the pandas frames built are counted, so the
tables cannot go back to a frame per host.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from unittest import mock

import pandas as pd

from analyze.api import finish
from analyze.read.reading import ReadOptions, start_reading
from analyze.read.scan import scan_stream
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
    elapsed = float("inf")
    for _ in range(3):  # the best of three, as the bounds are: one scan slowed by a neighbour read 0.128 s in CI
        t0 = time.perf_counter()
        scan = scan_stream([path], bin_ns=10_000_000, byte_mode=0)
        elapsed = min(elapsed, time.perf_counter() - t0)
    assert scan.records == PACKETS
    assert int(scan.agg[:, 1].sum()) == int(truth.ip_bytes.sum())
    # both bounds measured in this test, on this machine, at this moment: noise moves them together
    assert elapsed < loop / 2, f"scan {elapsed:.3f} s vs a bare Python loop {loop:.3f} s: is the hot path compiled?"
    assert elapsed < 40 * cat + 0.25, f"scan {elapsed:.3f} s vs cat {cat:.3f} s"


def _frames_built_after_reading(root: Path, hosts: int) -> tuple[int, str]:
    """pandas frames constructed while a ring of `hosts` small captures is turned into its Result."""
    root.mkdir()
    files = []
    for i in range(hosts):
        files.append(root / f"host{i + 1:02d}.pcap")
        ring_capture(files[-1], packets=3000, hosts=hosts, me=i + 1, seed=i)
    reading = start_reading(files, ReadOptions(bin_ns=10_000_000, byte_mode="ip", workers=1))
    built = [0]
    construct = pd.DataFrame.__init__

    def counting(self: pd.DataFrame, *args: object, **kwargs: object) -> None:
        built[0] += 1
        construct(self, *args, **kwargs)

    with mock.patch.object(pd.DataFrame, "__init__", counting):
        result = finish(reading, link_speed_bps=25e9)
    return built[0], result.topology.kind


def test_tables_after_reading_do_not_take_a_frame_per_host(tmp_path: Path) -> None:
    """Everything after the last file (tables, topology, iterations, what-if) builds its pandas frames from
    whole columns across hosts: a frame per host cost ~1 ms each, a second at hundreds of hosts. Counted, not
    timed: 4 and 16 hosts build the same number of frames (this code built 25 and 73 before)."""
    small = _frames_built_after_reading(tmp_path / "four", 4)
    large = _frames_built_after_reading(tmp_path / "sixteen", 16)
    assert small[1] == large[1] == "ring"
    assert large[0] == small[0]

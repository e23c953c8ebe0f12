"""A packet dated decades away from the rest of its capture is named by offset, kept in the byte totals and left
out of the time series; memory and time do not grow with the span its date would open."""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from analyze.read import layouts as L
from analyze.read.outliers import span
from tests.support.expect import ROOT, run
from tests.support.pcapgen import record_offsets
from tests.benchmarks.synth import ring_capture

Y2104 = int(datetime(2104, 3, 1, tzinfo=timezone.utc).timestamp())
MEMORY_BOUND_MB = 256
BIN_NS = 10_000_000  # the default --bin


def _with_strays(tmp_path: Path, at: tuple[int, int], compressed: bool) -> tuple[Path, dict[int, str], dict]:
    """A second of ring traffic (3,003 packets, 5 iterations) with record at[0] dated 2104 and at[1] dated
    1970; the file, {offset: the year it now claims}, and the generator's per-flow IP bytes."""
    plain = tmp_path / "plain.pcap"
    truth = ring_capture(plain, packets=3_003, iterations=5)
    data = bytearray(plain.read_bytes())
    offsets = record_offsets(bytes(data))
    strays = {offsets[at[0]]: "2104", offsets[at[1]]: "1970"}
    for offset, year in strays.items():
        struct.pack_into("<I", data, offset, Y2104 if year == "2104" else 7)
    path = tmp_path / ("eth0.pcap.gz" if compressed else "eth0.pcap")
    path.write_bytes(gzip.compress(bytes(data), 6) if compressed else bytes(data))
    want = {
        (s, d, int(a), int(b)): int(y)
        for s, d, a, b, y in zip(*[getattr(truth, k) for k in ("src", "dst", "sport", "dport", "ip_bytes")])
    }
    return path, strays, {"bytes": want, "first_ns": truth.first_ns, "last_ns": truth.last_ns}


@pytest.mark.parametrize("at", [(1000, 2000), (0, 3002), (1500, 1501)], ids=["middle", "first-and-last", "adjacent"])
@pytest.mark.parametrize("compressed", [False, True], ids=["pcap", "gzip"])
def test_two_stray_dates_are_named_counted_and_kept_out_of_the_series(
    tmp_path: Path, at: tuple[int, int], compressed: bool
) -> None:
    path, strays, truth = _with_strays(tmp_path, at, compressed)
    result = run([path])
    said = [w for w in result.warnings if "outside the capture's span" in w]
    assert len(said) == 1, result.warnings
    for offset, year in strays.items():
        assert f"offset {offset} ({year}-" in said[0], said[0]
    assert "kept in the byte totals, left out of the time series" in said[0]
    got = {(f.src, f.dst, f.sport, f.dport): f.bytes for f in result.flows}
    assert got == truth["bytes"]  # the stray packets' bytes are counted
    cap = result.captures[0]  # times set aside are clamped into the span, to the bin
    assert truth["first_ns"] - BIN_NS <= cap.first_ns and cap.last_ns <= truth["last_ns"] + BIN_NS
    series = result.tables.flow_series
    assert series["t_ns"].min() >= truth["first_ns"] - BIN_NS and series["t_ns"].max() <= truth["last_ns"]
    assert series["bytes"].sum() == sum(truth["bytes"].values()) - _stray_bytes(path, strays, compressed)
    for f in result.flows:
        assert truth["first_ns"] - BIN_NS <= f.start_ns <= f.end_ns <= truth["last_ns"] + BIN_NS


def _stray_bytes(path: Path, strays: dict[int, str], compressed: bool) -> int:
    """IP bytes of the stray records (their IPv4 total length, after a 14-byte Ethernet header)."""
    data = gzip.decompress(path.read_bytes()) if compressed else path.read_bytes()
    return sum(struct.unpack_from(">H", data, offset + 16 + 14 + 2)[0] for offset in strays)


def test_the_stray_capture_costs_what_the_data_does(tmp_path: Path) -> None:
    """The whole process, as a user runs it: under the fuzz bound of 256 MB for an input of 1 MB or less, and
    the JSON's warnings name both offsets."""
    path, strays, _ = _with_strays(tmp_path, (1000, 2000), False)
    out = tmp_path / "r.json"
    argv = [sys.executable, str(ROOT / "cli.py"), "analyze", str(path), "--workers", "1", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.fuzz", "--measure", "--", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    code, peak_kb = (int(x) for x in proc.stdout.split())
    assert code == 0, proc.stderr
    assert peak_kb / 1024 < MEMORY_BOUND_MB
    warnings = json.loads(out.read_text())["warnings"]
    assert all(any(f"offset {o} " in w for w in warnings) for o in strays), warnings


def test_the_span_is_the_heaviest_run_and_what_lies_within_its_reach() -> None:
    """Runs of bins more than a day apart: the heaviest is the capture; a run joins it while the gap is at most
    a day or the capture's duration so far; anything further is outside."""
    day = L.JUMP_NS
    bin_ns = 10_000_000

    def cells(*runs: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
        """Cells of (start ns, end ns, bytes per bin) runs."""
        bins = [np.arange(a // bin_ns, b // bin_ns) for a, b, _ in runs]
        return np.concatenate(bins), np.concatenate([np.full(len(b), w) for b, (_, _, w) in zip(bins, runs)])

    t0 = 1_763_000_000 * 10**9
    s = 10**9
    main = (t0, t0 + 10 * s, 1000)
    assert span(*cells(main), bin_ns) == (t0, t0 + 10 * s)
    far = (t0 + 30 * 365 * day, t0 + 30 * 365 * day + s, 10)  # thirty years later, lighter: outside
    assert span(*cells(main, far), bin_ns) == (t0, t0 + 10 * s)
    heavy = (far[0], far[1], 10**6)  # the same run holding more bytes is the capture, and main is outside
    assert span(*cells(main, heavy), bin_ns) == (heavy[0], heavy[1])
    near = (t0 + 10 * s + day // 2, t0 + 10 * s + day // 2 + s, 5)  # half a day after: within a day
    assert span(*cells(main, near), bin_ns) == (t0, near[1])
    long_main = (t0, t0 + 3 * day, 1000)  # a three-day capture: a gap of two days is within its reach
    later = (t0 + 5 * day, t0 + 5 * day + s, 5)
    assert span(*cells(long_main, later), bin_ns) == (t0, later[1])
    stray = (t0 + 20 * day, t0 + 20 * day + bin_ns, 5)
    assert span(*cells(long_main, stray), bin_ns) == (t0, long_main[1])

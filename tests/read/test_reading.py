"""The first half of an analysis (find inputs, start the scans) runs without pandas, and a local pool is
already reading when it returns, so the caller's imports overlap the reading."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path
from unittest import mock


import numpy as np

from analyze.read import engine
from analyze.read import layouts as L
from analyze.read.engine import POOL_MIN_BYTES
from analyze.read.fold import merge_host
from analyze.read.reading import ReadOptions, start_reading
from analyze.read.scan import scan_stream
from tests.support.expect import FIXTURES, ROOT, same_scan
from tests.benchmarks.synth import ring_capture


def test_starting_a_run_imports_no_pandas() -> None:
    code = (
        "import sys; from analyze.read.reading import ReadOptions, start_reading; "
        f"r = start_reading([{str(FIXTURES / 'example')!r}], "
        "ReadOptions(bin_ns=10_000_000, byte_mode='ip', workers=1)); "
        "print(sorted(m for m in ('pandas', 'numba') if m in sys.modules), len(r.collect()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True, timeout=120
    )
    assert out.stdout.strip() == "[] 4"  # four hosts read, and still neither library loaded


def test_the_pool_is_reading_when_start_returns(tmp_path: Path) -> None:
    """Two hosts' captures above the pool threshold: the workers exist before collect() is called, and
    what they return equals an in-process read of the same files, host by host."""
    paths, truths = [], []
    for i in range(2):
        paths.append(tmp_path / f"h{i}.pcap")
        truths.append(ring_capture(paths[-1], packets=400_000, seed=i))
    assert sum(p.stat().st_size for p in paths) > POOL_MIN_BYTES
    reading = start_reading(paths, ReadOptions(bin_ns=10_000_000, byte_mode="ip", workers=2))
    try:
        workers_running = len(multiprocessing.active_children())
    finally:
        pooled = reading.collect()
    assert workers_running == 2
    assert multiprocessing.active_children() == []
    here = start_reading(paths, ReadOptions(bin_ns=10_000_000, byte_mode="ip", workers=1)).collect()
    assert [s.records for s in pooled] == [s.records for s in here] == [400_000, 400_000]
    assert [int(s.agg[:, 1].sum()) for s in pooled] == [int(t.ip_bytes.sum()) for t in truths]
    for a, b in zip(pooled, here):
        same_scan(a, b)


def test_one_stream_that_cannot_be_cut_still_goes_to_a_worker(tmp_path: Path) -> None:
    """A single pcapng capture is read whole, by one worker process, so the caller's imports of pandas and
    the table code run on the other core meanwhile (in-process they waited for the read); same result."""
    path = tmp_path / "h.pcapng"
    truth = ring_capture(path, packets=50_000, fmt="pcapng")
    with mock.patch.object(engine, "POOL_MIN_BYTES", 0):
        reading = start_reading([path], ReadOptions(bin_ns=10_000_000, byte_mode="ip", workers=2))
    try:
        workers_running = len(multiprocessing.active_children())
    finally:
        pooled = reading.collect()
    assert workers_running == 1
    here = start_reading([path], ReadOptions(bin_ns=10_000_000, byte_mode="ip", workers=1)).collect()
    assert int(pooled[0].agg[:, 1].sum()) == int(truth.ip_bytes.sum())
    same_scan(pooled[0], here[0])


def test_a_pool_gets_no_more_workers_than_finish_before_the_caller(tmp_path: Path) -> None:
    """Two hosts' captures: while the caller's own work lasts as long as reading both, one worker reads them
    (a second would end no sooner and take a core from the caller); when it lasts as long as one, two do.
    Either way the scans equal an in-process read."""
    paths = [tmp_path / f"h{i}.pcap" for i in range(2)]
    truths = [ring_capture(p, packets=30_000, seed=i) for i, p in enumerate(paths)]
    size = paths[0].stat().st_size
    here = start_reading(paths, ReadOptions(bin_ns=10_000_000, byte_mode="ip", workers=1)).collect()
    per_host = size + engine.STREAM_COST_BYTES
    for busy_bytes, want in ((2 * per_host, 1), (per_host, 2)):
        with mock.patch.object(engine, "POOL_MIN_BYTES", 0):
            reading = start_reading(
                paths, ReadOptions(bin_ns=10_000_000, byte_mode="ip", workers=4), busy_bytes=busy_bytes
            )
        try:
            workers_running = len(multiprocessing.active_children())
        finally:
            pooled = reading.collect()
        assert workers_running == want
        assert [int(s.agg[:, 1].sum()) for s in pooled] == [int(t.ip_bytes.sum()) for t in truths]
        for a, b in zip(pooled, here):
            same_scan(a, b)


def test_workers_beside_the_callers_work() -> None:
    mib = 1 << 20
    assert engine.workers_beside(510 * mib, 1, 1024 * mib, 2) == 1  # one 5 M-packet capture on 2 cores
    assert engine.workers_beside(4080 * mib, 8, 1024 * mib, 2) == 2  # 8 of them: both cores
    assert engine.workers_beside(1500 * mib, 1, 1024 * mib, 16) == 2
    assert engine.workers_beside(256 * mib, 128, 1024 * mib, 16) == 2  # many small hosts: each costs a little
    assert engine.workers_beside(1500 * mib, 1, 0, 16) == 16  # the caller has nothing to do meanwhile


def test_a_whole_stream_is_folded_where_it_is_read(tmp_path: Path) -> None:
    """A pool worker returns the host's flows and cells already folded, as the main process would fold them
    (so that work runs beside the other reads); a rotation set's files fold into one table the same way."""
    rot = [tmp_path / "r.pcap", tmp_path / "r.pcap1"]  # one host: a tcpdump -C rotation set
    ring_capture(rot[0], packets=20_000, seed=1)
    ring_capture(rot[1], packets=20_000, seed=2, start_ns=1_763_000_100_000_000_000)
    with mock.patch.object(engine, "POOL_MIN_BYTES", 0):
        reading = start_reading([tmp_path], ReadOptions(bin_ns=10_000_000, byte_mode="ip", workers=2))
        pooled = reading.collect()
    assert [s.folded for s in pooled] == [True]
    assert reading.bin_ns == 1_000_000  # read at 1 ms whatever --bin says (analyze.read.bin_choice.read_width)
    got, want = merge_host("h", pooled), merge_host("h", [scan_stream(rot, bin_ns=reading.bin_ns, byte_mode=0)])
    for field in ("keys", "agg", "cell_flow", "cell_bin", "cell_bytes"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field
    assert got.agg[:, L.AGG_PACKETS].sum() == 40_000

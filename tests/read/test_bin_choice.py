"""The bin chosen from the traffic (analyze/read/bin_choice.py), on scans whose bursts are known by construction:
one flow sending BURST_MS-long bursts every PERIOD_MS, PACKETS_PER_MS packets (of 1,000 B) a millisecond."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyze.read import layouts as L
from analyze.read.bin_choice import BASE_BIN_NS, choose, coarsen, read_width
from analyze.tables.build import coarser_series
from analyze.read.fold import fold_scans
from analyze.read.scan import StreamScan


def _scan(burst_ms: int, period_ms: int, per_ms: float, bursts: int = 10) -> StreamScan:
    """A folded one-flow scan at BASE_BIN_NS: a packet every 1/per_ms ms inside each burst."""
    times = np.concatenate(
        [k * period_ms + np.arange(0, burst_ms, 1 / per_ms) for k in range(bursts)]
    )  # ms from the start
    cell_bin, counts = np.unique((times * 1e6).astype(np.int64) // BASE_BIN_NS, return_counts=True)
    agg = np.zeros((1, L.N_AGG), np.int64)
    agg[0, L.AGG_PACKETS] = times.size
    raw = StreamScan(
        files=[],
        keys=np.zeros((1, 5), np.uint64),
        agg=agg,
        cell_flow=np.zeros(cell_bin.size, np.int32),
        cell_bin=cell_bin,
        cell_bytes=counts * 1000,
        samples=np.zeros((0, L.N_SAMPLE), np.int64),
    )
    folded = fold_scans([raw])
    return StreamScan(files=[], **folded._asdict(), folded=True)


@pytest.mark.parametrize(
    "burst_ms, per_ms, expected_ms",
    [
        (9, 1000.0, 1),  # a 100 Gbit/s RoCE ring's 9 ms of sends an iteration: a tenth is under 1 ms
        (25, 50.0, 2),  # a tenth of 25 ms
        (60, 2.0, 5),  # 1 Gbit/s TSO segments: 2 a ms, ten in 5 ms
        (60, 1.0, 10),  # 1 a ms: eight need 8 ms, so 10 although a tenth of the burst is 6
        (2000, 0.2, 10),  # a link-bound 100 Mbit/s ring: never coarser than the 10 ms default
    ],
)
def test_the_width_follows_the_bursts_and_the_packets(burst_ms: int, per_ms: float, expected_ms: int) -> None:
    choice = choose([_scan(burst_ms, burst_ms * 3, per_ms)], BASE_BIN_NS)
    assert choice.bin_ns == expected_ms * 1_000_000, choice
    assert choice.why


def test_no_bursts_give_the_default_and_a_read_width_is_never_undercut() -> None:
    assert choose([], BASE_BIN_NS).bin_ns == 10_000_000
    # a dataset converted at 2 ms: no finer, and only multiples of it
    assert choose([_scan(9, 27, 1000.0)], 2_000_000).bin_ns == 2_000_000


def test_coarsening_keeps_every_byte_and_sums_per_wider_bin() -> None:
    scan = _scan(25, 75, 50.0)
    wide = coarsen(scan, 5)
    assert int(wide.cell_bytes.sum()) == int(scan.cell_bytes.sum())
    expect = np.bincount(scan.cell_bin // 5 - (scan.cell_bin // 5).min(), weights=scan.cell_bytes)
    assert np.array_equal(wide.cell_bytes, expect[expect > 0].astype(np.int64))
    assert np.all(np.diff(wide.cell_bin) > 0)


@pytest.mark.parametrize(
    "given_ns, read_ns", [(None, 1_000_000), (10_000_000, 1_000_000), (250_000, 250_000), (1_500_000, 500_000)]
)
def test_captures_are_read_finer_than_both_widths(given_ns: int | None, read_ns: int) -> None:
    """Read at 1 ms whatever --bin says, or at the widest divisor of 1 ms that --bin is a multiple of: both the
    given width and the chosen one (1, 2, 5 or 10 ms) are sums of the cells read."""
    assert read_width(given_ns) == read_ns


def test_a_series_summed_into_wider_bins_keeps_its_bytes_and_order() -> None:
    """coarser_series: two flows' 1 ms cells summed into 5 ms ones, in (flow, time) order, by hand."""
    ms = 1_000_000
    fine = pd.DataFrame(
        {
            "flow_id": [0, 0, 0, 0, 1, 1],
            "t_ns": [0, 3 * ms, 5 * ms, 11 * ms, 4 * ms, 9 * ms],
            "bytes": [1, 2, 4, 8, 16, 32],
        }
    )
    wide = coarser_series(fine, 5 * ms)
    assert wide["flow_id"].tolist() == [0, 0, 0, 1, 1]
    assert wide["t_ns"].tolist() == [0, 5 * ms, 10 * ms, 0, 5 * ms]
    assert wide["bytes"].tolist() == [3, 4, 8, 16, 32]

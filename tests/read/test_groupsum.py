"""Group sums (series cells, per-iteration maps) against a dictionary oracle on every path: counted,
hashed, and sorted for key spaces too big for one int64."""

from __future__ import annotations


import numpy as np
import pytest

from analyze.read.fold import sum_cells
from analyze.read.groupsum import group_sum


def _oracle(codes: list[np.ndarray], values: np.ndarray) -> dict[tuple[int, ...], int]:
    out: dict[tuple[int, ...], int] = {}
    for row, v in zip(zip(*[c.tolist() for c in codes]), values.tolist()):
        out[row] = out.get(row, 0) + v
    return dict(sorted(out.items()))


@pytest.mark.parametrize("sizes", [[7, 5], [3, 2_000_000], [1 << 40, 1 << 30]], ids=["counted", "hashed", "sorted"])
def test_group_sum_matches_oracle_in_code_order(sizes: list[int]) -> None:
    rng = np.random.default_rng(sum(sizes) % 1000)
    n = 5000
    # few distinct values per column so that groups repeat, spread over the whole code range
    codes = [rng.choice(rng.integers(0, s, 40), n) for s in sizes]
    values = rng.integers(0, 10**12, n)
    values[:50] = 0  # a group whose rows carry no bytes is still a group
    cols, sums = group_sum(codes, sizes, values)
    got = {tuple(int(c[i]) for c in cols): int(sums[i]) for i in range(len(sums))}
    want = _oracle(codes, values)
    assert list(got) == list(want) and got == want
    assert sums.dtype == np.int64


def test_sum_cells_adds_twins_over_a_huge_bin_span() -> None:
    """A capture with one record stamped near 1970 and the rest in 2026 at 1 µs bins: (flow, bin) keys
    do not fit one int64 once there are many flows; the twins must still be added, in (flow, bin) order."""
    flow = np.array([3, 0, 3, 2_000_000, 0, 3], dtype=np.int64)
    bins = np.array([5, 1_763_000_000_000_000, 5, 7, 1_763_000_000_000_000, 1_763_000_000_000_001], dtype=np.int64)
    values = np.array([10, 20, 30, 40, 50, 60], dtype=np.int64)
    f, b, v = sum_cells(flow, bins, values)
    assert f.tolist() == [0, 3, 3, 2_000_000]
    assert b.tolist() == [1_763_000_000_000_000, 5, 1_763_000_000_000_001, 7]
    assert v.tolist() == [70, 40, 60, 40]


@pytest.mark.parametrize("case", ["time-ordered", "a-late-cell", "no-twins"])
def test_sum_cells_matches_oracle_on_interleaved_flows(case: str) -> None:
    """A scan's cells: flows interleaved, each flow's bins ascending with twins, or one cell out of time order,
    or no twins at all (one file's cells, the sort by flow alone: analyze.read.fold._by_flow); the same sums in
    (flow, bin) order each way."""
    rng = np.random.default_rng(7)
    flow = rng.integers(0, 32, 3000)
    bins = np.sort(rng.integers(0, 900, 3000))  # time order across the flows: each flow's bins ascend
    if case == "a-late-cell":
        bins[[100, 2900]] = bins[[2900, 100]]
    if case == "no-twins":
        keys = np.unique(flow * 1000 + bins)
        flow, bins = keys // 1000, keys % 1000
        order = np.argsort(bins, kind="stable")  # back in time order, the flows interleaved
        flow, bins = flow[order], bins[order]
        assert len(flow) > 1000
    values = rng.integers(0, 1500, len(flow))
    f, b, v = sum_cells(flow, bins, values)
    want = _oracle([flow, bins], values)
    assert list(zip(f.tolist(), b.tolist())) == list(want)
    assert v.tolist() == list(want.values()) and v.dtype == np.int64

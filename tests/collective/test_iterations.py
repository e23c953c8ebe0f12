"""Iterations: markers windows, per-iteration sums against a cell-by-cell oracle, the ring theory check, and
iterations found in generated captures whose iteration count is known (the inference itself:
tests/collective/test_staircase.py)."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]

from fixtures.collective import collective_synth as synth  # noqa: E402

from analyze.read import groupsum  # noqa: E402
from analyze.api import analyze  # noqa: E402
from analyze.collective.inference import _check_anchors  # noqa: E402
from analyze.collective.iterations import per_iteration, ring_theory, windows_from_markers  # noqa: E402
from analyze.collective.staircase import Staircase  # noqa: E402

BIN = 10_000_000


def test_ring_theory_farhat_ghobadi_factor():
    s = 97_500_000
    t = ring_theory(1.875 * s, 16, s)  # 2(N-1)/N at N=16 is 1.875
    assert t.theory_ratio == pytest.approx(1.0) and t.implied_gradient_bytes == pytest.approx(s)
    assert t.implied_params_fp32 == pytest.approx(s / 4) and t.implied_params_fp16 == pytest.approx(s / 2)
    assert ring_theory(None, 16, s).theory_ratio is None


@pytest.mark.parametrize("with_markers", [False, True])
def test_generated_run_iterations_and_bytes(tmp_path, with_markers):
    n, s, iters = 6, 3_000_000, 7
    root = synth.build("ring", tmp_path / "r", n, nbytes=s, iterations=iters, gap_ns=150_000_000, markers=with_markers)
    res = analyze([root], workers=1, gradient_bytes=s)
    it = res.iterations
    assert it.source == ("markers" if with_markers else "inferred") and it.count == iters
    assert it.period_ns == pytest.approx(190_000_000, abs=10_000_000)
    per = 2 * (n - 1) * s // n
    segments = -(-per // synth.SEGMENT)
    expected_ip = per + segments * synth.HEADERS  # ip bytes: every planned segment's 40 header bytes
    for row in it.per_iteration:
        assert row.bytes_by_host == {f"h{i}": expected_ip for i in range(n)}
        assert row.rx_bytes_by_host == row.bytes_by_host
        assert row.bytes_by_edge == {f"h{i}->h{(i - 1) % n}": expected_ip for i in range(n)}
        assert 0 < row.comm_ns <= 60_000_000
    assert it.bytes_per_iteration_per_host.median == expected_ip
    assert it.theory_ratio == pytest.approx(expected_ip / per)
    assert it.gradient_bytes_source == "option"
    res = analyze([root], workers=1, byte_mode="payload")
    assert res.iterations.implied_gradient_bytes == pytest.approx(s, rel=1e-6)


def test_iterations_option_against_markers(tmp_path):
    """Markers win, and a count that disagrees with them is said, not obeyed."""
    root = synth.build("ring", tmp_path / "r", 4, nbytes=1_000_000, iterations=5, gap_ns=150_000_000, markers=True)
    it = analyze([root], workers=1, iterations=7).iterations
    assert it.source == "markers" and it.count == 5
    assert any(n.startswith("DISAGREEMENT: --iterations 7") for n in it.notes)
    assert not any("DISAGREEMENT" in n for n in analyze([root], workers=1, iterations=5).iterations.notes)


def test_non_ring_has_no_theory(tmp_path):
    res = analyze([synth.build("star", tmp_path / "s", 4, iterations=3)], workers=1, gradient_bytes=1e6)
    it = res.iterations
    assert it.count == 3 and it.theory_ratio is None and it.implied_gradient_bytes is None


def _cells(rows: list[tuple[str, str, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["src_host", "dst_host", "t_ns", "bytes"])


def _marks(rows: list[tuple[str, int, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["host", "iteration", "start_ns", "end_ns"]).assign(rank=0)


def test_a_bin_cut_by_the_boundary_goes_to_the_iteration_that_ends_in_it():
    """Each step sleeps (forward pass), then all-reduces; the all-reduce's last bin holds the next step's
    marker start. Judged by bin centres, iteration 0's tail went to iteration 1 whenever the boundary fell
    in the first half of that bin."""
    ms = BIN // 10
    marks = _marks([("a", 0, 0, 63 * ms), ("a", 1, 63 * ms, 128 * ms)])
    # iteration 0 sends in the bins at 50 and 60 ms (the second cut at 63 ms), iteration 1 in 110 and 120 ms
    cells = _cells(
        [("a", "b", 50 * ms, 700), ("a", "b", 60 * ms, 300), ("a", "b", 110 * ms, 900), ("a", "b", 120 * ms, 100)]
    )
    out = per_iteration(cells, windows_from_markers(marks), [("a", "b")], BIN, marks)
    assert [it.bytes_by_host for it in out] == [{"a": 1000}, {"a": 1000}]
    assert [it.rx_bytes_by_host for it in out] == [{"b": 1000}, {"b": 1000}]


def test_each_host_is_cut_at_its_own_markers():
    """Host b runs 20 ms behind host a. The shared window 1 opens at a's marker, 95 ms; at 100 ms b still
    receives the tail of a's iteration-0 bytes (a's all-reduce returned with them in its socket buffer), inside
    b's own window 0, which ends at 115 ms."""
    ms = BIN // 10
    marks = _marks(
        [("a", 0, 0, 95 * ms), ("a", 1, 95 * ms, 180 * ms), ("b", 0, 30 * ms, 115 * ms), ("b", 1, 115 * ms, 200 * ms)]
    )
    cells = _cells(
        [
            ("a", "b", 80 * ms, 600),
            ("a", "b", 100 * ms, 400),
            ("a", "b", 170 * ms, 1000),
            ("b", "a", 70 * ms, 1000),
            ("b", "a", 150 * ms, 1000),
            ("a", "ff02::2", 20 * ms, 32),
        ]
    )
    windows = windows_from_markers(marks)
    assert windows["start_ns"].tolist() == [0, 95 * ms]
    out = per_iteration(cells, windows, [("a", "b"), ("b", "a")], BIN, marks, ["a", "b"])
    assert [it.bytes_by_host for it in out] == [{"a": 1032, "b": 1000}, {"a": 1000, "b": 1000}]
    assert [it.rx_bytes_by_host for it in out] == [{"a": 1000, "b": 1000}] * 2  # no multicast group
    # without the markers every host is cut at the shared windows: a's 400 bytes move to iteration 1
    shared = per_iteration(cells, windows, [("a", "b"), ("b", "a")], BIN)
    assert [it.bytes_by_host["a"] for it in shared] == [632, 1400]


def _per_iteration_oracle(
    rows: list[tuple[str, str, int, int]],
    starts: list[int],
    last_end: int,
    edges: list[tuple[str, str]],
    hosts: list[str] | None,
) -> list[dict]:
    """per_iteration written out cell by cell: a cell belongs to window k when start_k <= t < start_k+1 (the last
    window stops at its end); an edge's bins at >= 1 % of the 90th-percentile (iteration, edge, bin) sum are
    active; the communication starts at the first active bin of any edge and lasts as long as the longest
    first-to-last-active span of one edge (each edge on one capture's clock)."""
    stops = starts[1:] + [last_end]

    def window(t: int) -> int:
        return next((k for k, (a, b) in enumerate(zip(starts, stops)) if a <= t < b), -1)

    per_bin: dict[tuple[int, int], int] = {}
    out = [{"tx": {}, "rx": {}, "edge": {}} for _ in starts]
    for src, dst, t, n in rows:
        k = window(t)
        if k < 0:
            continue
        if hosts is None or src in hosts:
            out[k]["tx"][src] = out[k]["tx"].get(src, 0) + n
        if hosts is None or dst in hosts:
            out[k]["rx"][dst] = out[k]["rx"].get(dst, 0) + n
        if not edges or (src, dst) in edges:
            out[k]["edge"][f"{src}->{dst}"] = out[k]["edge"].get(f"{src}->{dst}", 0) + n
            per_bin[(k, (src, dst), t)] = per_bin.get((k, (src, dst), t), 0) + n
    floor = 0.01 * np.percentile(list(per_bin.values()), 90) if per_bin else 0
    active = [(k, e, t) for (k, e, t), n in per_bin.items() if n >= floor]
    result = []
    for k, o in enumerate(out):
        spans: dict[tuple[str, str], list[int]] = {}
        for kk, e, t in active:
            if kk == k:
                spans.setdefault(e, []).append(t)
        first = min((min(ts) for ts in spans.values()), default=0)
        last = first + max((max(ts) - min(ts) + BIN for ts in spans.values()), default=0)
        busiest = max(o["tx"].values(), default=0)
        result.append(
            {
                "bytes_by_host": dict(sorted(o["tx"].items())),
                "rx_bytes_by_host": dict(sorted(o["rx"].items())),
                "bytes_by_edge": {e: o["edge"][e] for e in sorted(o["edge"], key=lambda e: tuple(e.split("->")))},
                "comm_start_ns": first,
                "comm_ns": last - first,
                "rate_bps": busiest * 8e9 / (last - first) if last > first else 0.0,
            }
        )
    return result


_HOSTS = ["a", "b", "c", "d", "10.0.0.9"]


@settings(max_examples=150, deadline=None)
@given(
    cells=st.lists(
        st.tuples(st.sampled_from(_HOSTS), st.sampled_from(_HOSTS), st.integers(0, 40), st.integers(1, 10**9)),
        min_size=1,
        max_size=60,
    ),
    gaps=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    first=st.integers(0, 10),
    edges=st.sets(st.tuples(st.sampled_from(_HOSTS), st.sampled_from(_HOSTS)), max_size=6),
    hosts=st.one_of(st.none(), st.lists(st.sampled_from(_HOSTS), unique=True)),
)
def test_per_iteration_sums_each_cell_once_into_its_window(cells, gaps, first, edges, hosts):
    """Every cell's bytes land in exactly one window's host, receiver and edge maps (names in sorted order,
    as the JSON keeps them), and the communication span is the oracle's, for any cells, windows and edges."""
    rows = [(s, d, t * BIN, n) for s, d, t, n in cells if s != d]
    assume(rows)
    starts = list(np.cumsum([first] + gaps[:-1]) * BIN)
    windows = pd.DataFrame(
        {
            "iteration": range(len(starts)),
            "start_ns": starts,
            "end_ns": [s + BIN for s in starts[:-1]] + [starts[-1] + gaps[-1] * BIN],
        }
    )
    edge_list = sorted(edges)
    want = _per_iteration_oracle(rows, starts, starts[-1] + gaps[-1] * BIN, edge_list, hosts)
    keys = ["bytes_by_host", "rx_bytes_by_host", "bytes_by_edge", "comm_start_ns", "comm_ns", "rate_bps"]
    for dense_keys in (groupsum.DENSE_KEYS, -(10**9)):  # group sums counted directly, then all hashed
        with mock.patch.object(groupsum, "DENSE_KEYS", dense_keys):
            got = per_iteration(_cells(rows), windows, edge_list, BIN, None, hosts)
        assert [{k: getattr(it, k) for k in keys} for it in got] == want
        assert [[list(getattr(it, k)) for k in keys[:3]] for it in got] == [
            [list(w[k]) for k in keys[:3]] for w in want
        ]


def test_steps_too_short_for_the_bins_name_a_finer_bin():
    """Steps of 44 ms found at 4 bins of 10 ms are unsure for want of resolution, and the doubt names the widest
    round bin at or under a twelfth of a step; steps of six bins and more, or with no round bin finer, name none."""
    from analyze.confidence.doubt import _finer_bin

    assert _finer_bin(4.0, 44e6, 10_000_000, 6) == "2ms"
    assert _finer_bin(5.5, 130e6, 20_000_000, 6) == "10ms"
    assert _finer_bin(3.0, 30e6, 10_000_000, 6) == "2ms"
    assert _finer_bin(6.0, 60e6, 10_000_000, 6) is None  # six bins: resolved
    assert _finer_bin(8.0, 88e6, 10_000_000, 12) == "5ms"  # an unsure count at 8 bins: perhaps two steps in one
    assert _finer_bin(4.0, 8e3, 2_000, 6) is None  # nothing round under a twelfth of 8 µs is coarser than a µs
    assert _finer_bin(None, 44e6, 10_000_000, 6) is None


def test_an_anchor_the_traffic_agrees_with_never_lowers_its_confidence():
    """--iterations N where the traffic alone reads N, surer than the search bounded by N does (a pipeline at 1 ms
    bins: 0.77 alone, 0.53 given its count): the surer reading stands; a count it contradicts leaves it unsure."""
    ev = {"bytes_spread": 0.05, "teeth_on_pauses": 1.0, "left_over": 0.0, "edges_agreeing": 1.0}
    free = Staircase(count=12, confidence=0.77, evidence=ev)
    anchored = Staircase(count=12, confidence=0.53, evidence=ev)
    assert _check_anchors(anchored, free, 12, None, None).confidence == 0.77
    worse = Staircase(count=12, confidence=0.4, evidence=ev)  # the traffic alone less sure: the anchored stands
    assert _check_anchors(Staircase(count=12, confidence=0.53, evidence=ev), worse, 12, None, None).confidence == 0.53
    other = _check_anchors(Staircase(count=15, confidence=0.6, evidence=ev), free, 15, None, None)
    assert other.count == 12 and other.confidence <= 0.5

"""Iterations: burst segmentation and autocorrelation on series built by hand, markers windows, the ring
theory check, and iterations found in generated captures whose iteration count is known."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures" / "collective"))

import collective_synth as synth  # noqa: E402

from analyze.api import analyze  # noqa: E402
from analyze.iterations import (  # noqa: E402
    autocorr_period, gap_segments, infer_windows, per_iteration, ring_theory, windows_from_markers,
)

BIN = 10_000_000


def _series(per_bin: np.ndarray) -> pd.DataFrame:
    t = np.nonzero(per_bin)[0]
    return pd.DataFrame({"t_ns": 5 * BIN + t * BIN, "bytes": per_bin[t]})


def _bursts(count: int, width: int, gap: int, jitter: int = 0, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        burst = rng.integers(5_000, 10_000, width)
        burst[width // 2] = 0  # a pause inside the burst (a ring step waiting) must not split it
        out += [burst, np.zeros(gap + int(rng.integers(0, jitter + 1)), np.int64)]
    return np.concatenate(out[:-1])


@pytest.mark.parametrize("count", [2, 7, 40])
def test_gap_segmentation_counts_bursts(count):
    a = _bursts(count, width=6, gap=25, jitter=3)
    bursts, cut = gap_segments(a.astype(float))
    assert len(bursts) == count and cut >= 25
    w, info = infer_windows(_series(a), BIN)
    assert len(w) == count and info["confidence"] >= (0.3 if count == 2 else 0.8)


def test_autocorrelation_period():
    a = _bursts(12, width=4, gap=16).astype(float)
    period, peak = autocorr_period(a)
    assert period == 20 and peak > 0.5


def test_continuous_traffic_uses_autocorrelation():
    t = np.arange(400)
    a = (1000 + 900 * np.sin(2 * np.pi * t / 25)).astype(np.int64)  # no silences, period 25 bins
    w, info = infer_windows(_series(a), BIN)
    assert info["method"] == "autocorrelation" and len(w) == 16
    assert abs((w["start_ns"].diff().median()) - 25 * BIN) < BIN


def test_setup_burst_left_out():
    a = np.concatenate([[300, 0, 0, 0] + [0] * 30, _bursts(5, width=5, gap=30)])
    w, info = infer_windows(_series(a), BIN)
    assert len(w) == 5 and any("setup" in n for n in info["notes"])


def test_ring_theory_farhat_ghobadi_factor():
    s = 97_500_000
    t = ring_theory(1.875 * s, 16, s)  # 2(N-1)/N at N=16 is 1.875
    assert t["theory_ratio"] == pytest.approx(1.0) and t["implied_gradient_bytes"] == pytest.approx(s)
    assert t["implied_params_fp32"] == pytest.approx(s / 4) and t["implied_params_fp16"] == pytest.approx(s / 2)
    assert ring_theory(None, 16, s)["theory_ratio"] is None


@pytest.mark.parametrize("with_markers", [False, True])
def test_generated_run_iterations_and_bytes(tmp_path, with_markers):
    n, s, iters = 6, 3_000_000, 7
    root = synth.build("ring", tmp_path / "r", n, nbytes=s, iterations=iters, gap_ns=150_000_000, markers=with_markers)
    res = analyze([root], workers=1, gradient_bytes=s)
    it = res.extra["iterations"]
    assert it["source"] == ("markers" if with_markers else "inferred") and it["count"] == iters
    assert it["period_ns"] == pytest.approx(190_000_000, abs=10_000_000)
    per = 2 * (n - 1) * s // n
    segments = -(-per // synth.SEGMENT)
    expected_ip = per + segments * synth.HEADERS  # ip bytes: every planned segment's 40 header bytes
    for row in it["per_iteration"]:
        assert row["bytes_by_host"] == {f"h{i}": expected_ip for i in range(n)}
        assert row["rx_bytes_by_host"] == row["bytes_by_host"]
        assert row["bytes_by_edge"] == {f"h{i}->h{(i - 1) % n}": expected_ip for i in range(n)}
        assert 0 < row["comm_ns"] <= 60_000_000
    assert it["bytes_per_iteration_per_host"]["median"] == expected_ip
    assert it["theory_ratio"] == pytest.approx(expected_ip / per)
    assert it["gradient_bytes_source"] == "option"
    res = analyze([root], workers=1, byte_mode="payload")
    assert res.extra["iterations"]["implied_gradient_bytes"] == pytest.approx(s, rel=1e-6)


def test_non_ring_has_no_theory(tmp_path):
    res = analyze([synth.build("star", tmp_path / "s", 4, iterations=3)], workers=1, gradient_bytes=1e6)
    it = res.extra["iterations"]
    assert it["count"] == 3 and it["theory_ratio"] is None and it["implied_gradient_bytes"] is None


def _uneven_bursts(seed: int, period: int = 31, count: int = 6) -> np.ndarray:
    """`count` all-reduces `period` bins apart (±2), each 4 to 13 bins long: communication time varies under load."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        width = int(rng.integers(4, 14))
        out += [rng.integers(1_000, 10_000, width).astype(float), np.zeros(period - width + int(rng.integers(-2, 3)))]
    return np.concatenate(out)


def test_autocorrelation_prefers_the_period_to_its_multiples():
    """Six uneven bursts: the overlap-normalised autocorrelation often peaks higher at twice the spacing
    (the gloo e2e run once reported "does not confirm the spacing" for exactly this). Over 200 seeded
    series the period found is the spacing in at least 90 % (63 % before the sub-multiple check)."""
    found = [autocorr_period(_uneven_bursts(seed))[0] for seed in range(200)]
    right = sum(p is not None and abs(p - 31) <= 0.15 * 31 + 1 for p in found)
    assert right >= 180, f"{right} of 200"


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
    cells = _cells([("a", "b", 50 * ms, 700), ("a", "b", 60 * ms, 300), ("a", "b", 110 * ms, 900),
                    ("a", "b", 120 * ms, 100)])
    out = per_iteration(cells, windows_from_markers(marks), [("a", "b")], BIN, marks)
    assert [it["bytes_by_host"] for it in out] == [{"a": 1000}, {"a": 1000}]
    assert [it["rx_bytes_by_host"] for it in out] == [{"b": 1000}, {"b": 1000}]


def test_each_host_is_cut_at_its_own_markers():
    """Host b runs 20 ms behind host a. The shared window 1 opens at a's marker, 95 ms; at 100 ms b still
    receives the tail of a's iteration-0 bytes (a's all-reduce returned with them in its socket buffer), inside
    b's own window 0, which ends at 115 ms."""
    ms = BIN // 10
    marks = _marks([("a", 0, 0, 95 * ms), ("a", 1, 95 * ms, 180 * ms),
                    ("b", 0, 30 * ms, 115 * ms), ("b", 1, 115 * ms, 200 * ms)])
    cells = _cells([("a", "b", 80 * ms, 600), ("a", "b", 100 * ms, 400), ("a", "b", 170 * ms, 1000),
                    ("b", "a", 70 * ms, 1000), ("b", "a", 150 * ms, 1000), ("a", "ff02::2", 20 * ms, 32)])
    windows = windows_from_markers(marks)
    assert windows["start_ns"].tolist() == [0, 95 * ms]
    out = per_iteration(cells, windows, [("a", "b"), ("b", "a")], BIN, marks, ["a", "b"])
    assert [it["bytes_by_host"] for it in out] == [{"a": 1032, "b": 1000}, {"a": 1000, "b": 1000}]
    assert [it["rx_bytes_by_host"] for it in out] == [{"a": 1000, "b": 1000}] * 2  # no multicast group
    # without the markers every host is cut at the shared windows: a's 400 bytes move to iteration 1
    shared = per_iteration(cells, windows, [("a", "b"), ("b", "a")], BIN)
    assert [it["bytes_by_host"]["a"] for it in shared] == [632, 1400]

"""The paper's what-if model: hand-computed cases, an independent replay, and the paper's own conclusions.

Hand cases use no reduction-cost table (or a flat one) so every number is a line of arithmetic here.
The paper's inputs (netx-repo/training-bottleneck, data only) are the repo copy in
fixtures/training-bottleneck/; when it is missing the shared data directory is used ($RINGSCOPE_SHARED or
../shared); when none is present the tests skip — except under CI=true, where a missing input fails.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from analyze.whatif.backward_profile import BackwardProfile, ReduceCostTable, load_profile, load_reduce_cost
from analyze.whatif.gradient_buckets import MiB, horovod_buckets
from analyze.whatif.calculation import what_if
from analyze.whatif.replay import Replay
from analyze.whatif.paper import PaperModel
from tests.support.requirements import require

REPO = Path(__file__).resolve().parents[2]
PAPER_FILES = ("resnet50.bk.log", "resnet101.bk.log", "vgg16.bk.log", "cuda_vec_add.log", "single_gpu_batch_time.json")
MODELS = ("resnet50", "resnet101", "vgg16")


def _shared_dirs() -> list[Path]:
    roots = [Path(os.environ["RINGSCOPE_SHARED"])] if os.environ.get("RINGSCOPE_SHARED") else []
    roots.append(Path(__file__).resolve().parents[2] / "shared")
    return [r / "data" / "training-bottleneck" for r in roots]


def _find(name: str, base: Path) -> Path:
    return (
        base / "bk_time_logs" / name if name.endswith(".bk.log") and (base / "bk_time_logs").is_dir() else base / name
    )


def paper_dir() -> Path:
    """Where the paper's inputs are: the repo copy first, then the shared data directory."""
    bases = [REPO / "fixtures" / "training-bottleneck", *_shared_dirs()]
    found = next((base for base in bases if all(_find(n, base).is_file() for n in PAPER_FILES)), None)
    require(
        found is not None,
        "the paper's inputs are missing (fixtures/training-bottleneck/ and ../shared/data/training-bottleneck/)",
    )
    return found  # not None: require() skipped or failed otherwise


@pytest.fixture(scope="module")
def paper() -> dict:
    base = paper_dir()
    times = json.loads(_find("single_gpu_batch_time.json", base).read_text())
    return {
        "T": {m: float(times[m]) for m in MODELS},
        "profile": {m: load_profile(_find(f"{m}.bk.log", base)) for m in MODELS},
        "model": PaperModel(load_reduce_cost(_find("cuda_vec_add.log", base))),
    }


def _profile(waits_ms: list[float], sizes: list[float]) -> BackwardProfile:
    return BackwardProfile(np.array(waits_ms) / 1e3, np.array(sizes, dtype=float))


# ---- hand-computed cases ------------------------------------------------------------------------


def test_one_bucket() -> None:
    # Two 1 MB tensors 1 ms apart: 2 ms < 5 ms cycle, 2 MB < 64 MiB → one bucket sent at backward end (2 ms).
    prof = _profile([1, 1], [1e6, 1e6])
    replay = Replay(PaperModel(), prof)
    assert [b.count for b in replay.batches] == [1]
    # N=2, B=1 Gbit/s: 2·(1/2)·8·2e6 / 1e9 = 16 ms, all of it after backward.
    assert replay.overhead_s(2, 1e9)[0] == pytest.approx(0.016, rel=1e-12)
    assert replay.scaling_factor(0.1, 2, 1e9)[0] == pytest.approx(0.1 / 0.116, rel=1e-12)
    # A flat 1 ms reduction cost adds (N−1)·1 ms = 1 ms; compression 4 shrinks only the wire: 16/4 + 1 = 5 ms.
    flat = ReduceCostTable(np.array([0.0, 1e9]), np.array([1e-3, 1e-3]))
    assert Replay(PaperModel(flat), prof).overhead_s(2, 1e9)[0] == pytest.approx(0.017, rel=1e-12)
    assert Replay(PaperModel(flat), prof).overhead_s(2, 1e9, 4)[0] == pytest.approx(0.005, rel=1e-12)


def test_two_buckets_compute_longer_than_communication() -> None:
    # 6 ms ≥ 5 ms → bucket 1 (1 MB) at 6 ms; the other two tensors go at backward end (8 ms), 2 MB.
    prof = _profile([6, 1, 1], [1e6, 1e6, 1e6])
    (buckets,) = horovod_buckets(prof)
    assert buckets.ready_s.tolist() == pytest.approx([0.006, 0.008])
    assert buckets.size_bytes.tolist() == [1e6, 2e6]
    # N=4, B=10 Gbit/s: 2·(3/4)·8/1e10 = 1.2 ns per byte → 1.2 ms and 2.4 ms.
    # Bucket 1 runs 6 → 7.2 ms, done before bucket 2 is ready at 8 ms; bucket 2 runs 8 → 10.4 ms.
    overhead = Replay(PaperModel(), prof).overhead_s(4, 10e9)[0]
    assert overhead == pytest.approx(0.0024, rel=1e-9)  # only the last bucket is exposed


def test_two_buckets_communication_longer_than_compute() -> None:
    prof = _profile([6, 1, 1], [1e6, 1e6, 1e6])
    # N=4, B=1 Gbit/s: 12 ns per byte → 12 ms and 24 ms. Bucket 1: 6 → 18 ms. Bucket 2 waits for it:
    # 18 → 42 ms. Overhead = 42 − 8 = 34 ms; with T = 100 ms, SF = 100/134.
    replay = Replay(PaperModel(), prof)
    assert replay.overhead_s(4, 1e9)[0] == pytest.approx(0.034, rel=1e-9)
    assert replay.scaling_factor(0.1, 4, 1e9)[0] == pytest.approx(0.1 / 0.134, rel=1e-9)


def test_fusion_buffer_and_cycle_thresholds() -> None:
    # 40 MiB, then 30 MiB (70 ≥ 64 MiB → send at 0.2 ms), then 1 MiB at backward end (0.3 ms).
    (b,) = horovod_buckets(_profile([0.1, 0.1, 0.1], [40 * MiB, 30 * MiB, 1 * MiB]))
    assert b.size_bytes.tolist() == [70 * MiB, 1 * MiB]
    assert b.ready_s.tolist() == pytest.approx([0.0002, 0.0003])
    # Exactly 5 ms since the last send counts (acc_time >= 5 ms); a gradient ready exactly at backward end
    # that triggers a send leaves no remainder.
    (b,) = horovod_buckets(_profile([5, 2, 3], [1, 2, 4]))
    assert b.size_bytes.tolist() == [1, 6] and b.ready_s.tolist() == pytest.approx([0.005, 0.010])


def test_one_worker_and_empty_profile_cost_nothing() -> None:
    prof = _profile([6, 1, 1], [1e6, 1e6, 1e6])
    assert Replay(PaperModel(), prof).overhead_s(1, 1e9)[0] == 0.0
    assert Replay(PaperModel(), _profile([1, 1], [0, 0])).overhead_s(8, 1e9)[0] == 0.0


def _reference_overhead(
    waits_s: np.ndarray, sizes: np.ndarray, n: int, bw: float, c: float, table: ReduceCostTable
) -> float:
    """An independent event-by-event transcription of the README's description (no vectorization)."""
    events, now, acc_t, acc_b = [], 0.0, 0.0, 0.0
    for w, s in zip(waits_s, sizes):
        now, acc_t, acc_b = now + w, acc_t + w, acc_b + s
        if acc_t >= 0.005 or acc_b >= 64 * 1024 * 1024:
            events.append((now, acc_b))
            acc_t, acc_b = 0.0, 0.0
    if acc_b > 0:
        events.append((now, acc_b))
    free = 0.0
    for ready, size in events:
        stage = size * 8 * (n - 1) / n / bw / c
        free = max(free, ready) + stage + (n - 1) * float(np.interp(size / n, table.size_bytes, table.seconds)) + stage
    return free - now


def test_vectorized_replay_matches_event_by_event_reference(paper: dict) -> None:
    for name in MODELS:
        prof = paper["profile"][name]
        replay = Replay(paper["model"], prof)
        grid = [(n, bw, c) for n in (2, 8, 64) for bw in (1e9, 10e9, 25e9, 100e9) for c in (1, 10)]
        got = replay.overhead_s(*map(np.array, zip(*grid)))
        want = [
            _reference_overhead(prof.wait_s[0], prof.size_bytes, n, bw, c, paper["model"].reduce_cost)
            for n, bw, c in grid
        ]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


# ---- the paper's inputs and conclusions ---------------------------------------------------------


def test_profiles_read_as_published(paper: dict) -> None:
    # Tensor counts from line 3 of each log; byte totals are the models' fp32 parameter sizes.
    assert {m: paper["profile"][m].tensors for m in MODELS} == {"resnet50": 161, "resnet101": 314, "vgg16": 58}
    assert paper["profile"]["resnet50"].gradient_bytes == 102_228_128  # 25,557,032 parameters × 4 bytes
    assert paper["profile"]["vgg16"].gradient_bytes == 553_463_968  # 138,365,992 parameters × 4 bytes


def test_repo_copy_is_verbatim() -> None:
    repo = REPO / "fixtures" / "training-bottleneck"
    for shared in _shared_dirs():
        if shared.is_dir() and repo.is_dir():
            for n in PAPER_FILES:
                if _find(n, shared).is_file():
                    assert (repo / n).read_bytes() == _find(n, shared).read_bytes(), n


def test_resnet50_at_64_workers_and_100g_scales(paper: dict) -> None:
    sf = Replay(paper["model"], paper["profile"]["resnet50"]).scaling_factor(paper["T"]["resnet50"], 64, 100e9)[0]
    assert sf >= 0.99


@pytest.mark.parametrize("name", ["resnet50", "resnet101"])
@pytest.mark.parametrize("workers", [8, 16, 32, 64])
def test_resnets_hide_communication_at_about_25g(paper: dict, name: str, workers: int) -> None:
    """The paper's plateau: ≈25 Gbit/s. Tolerance 20–40 Gbit/s: the paper swept 1/10/25/40/100 Gbit/s and saw
    the curve flat from 25 on, so its grid cannot place the knee more finely than "above 10-20, by 40";
    our exact replay puts it at 24–32 Gbit/s depending on N. Lower bound by hand: the link must at least
    carry 2(N−1)/N·8S bits within the backward pass."""
    prof = paper["profile"][name]
    hide = Replay(paper["model"], prof).hide_bandwidth_bps(paper["T"][name], workers)[0]
    assert 20e9 <= hide <= 40e9
    assert hide >= 2 * (workers - 1) / workers * 8 * prof.gradient_bytes / prof.backward_s


@pytest.mark.parametrize("name", ["resnet50", "resnet101"])
def test_ten_gbit_needs_only_a_few_x_compression(paper: dict, name: str) -> None:
    replay = Replay(paper["model"], paper["profile"][name])
    t = paper["T"][name]
    need = replay.needed_compression(t, [8, 16, 32, 64], 10e9, 0.99)
    assert np.all((need >= 2) & (need <= 5)), need  # "a few ×": 2.4–3.2 here
    # …and that ratio really reaches 0.99 while 0.9× of it does not.
    assert np.all(replay.scaling_factor(t, [8, 16, 32, 64], 10e9, need) >= 0.99 - 1e-9)
    assert np.all(replay.scaling_factor(t, [8, 16, 32, 64], 10e9, need * 0.9) < 0.99)


@pytest.mark.parametrize("name", ["resnet50", "vgg16"])
def test_the_link_speed_that_reaches_a_scaling_factor(paper: dict, name: str) -> None:
    """The speed a user could buy: the slowest link reaching the target really reaches it, and 0.9 x that speed
    does not; a target above what infinite bandwidth gives has none (NaN)."""
    replay = Replay(paper["model"], paper["profile"][name])
    t, workers = paper["T"][name], [8, 16, 32, 64]
    for target in (0.9, 0.95):
        speed = replay.needed_bandwidth_bps(t, workers, target)
        best = replay.scaling_factor(t, workers, 1e18)
        assert np.all(np.isnan(speed) == (best < target)), (speed, best)
        ok = ~np.isnan(speed)
        assert np.all(replay.scaling_factor(t, np.array(workers)[ok], speed[ok]) >= target - 1e-9)
        assert np.all(replay.scaling_factor(t, np.array(workers)[ok], 0.9 * speed[ok]) < target)
    assert np.isnan(replay.needed_bandwidth_bps(t, 8, 0.99999999)[0])


@pytest.mark.parametrize("name", MODELS)
def test_no_compression_needed_at_100g(paper: dict, name: str) -> None:
    need = Replay(paper["model"], paper["profile"][name]).needed_compression(
        paper["T"][name], [16, 32, 64], 100e9, 0.99
    )
    assert need.tolist() == [1.0, 1.0, 1.0]


def test_sweep_is_fast(paper: dict) -> None:
    start = time.perf_counter()
    result = what_if(
        paper["profile"]["resnet50"],
        paper["T"]["resnet50"],
        paper["model"],
        [8, 16, 32, 64],
        [1e9, 10e9, 25e9, 40e9, 100e9],
        [1, 2, 5, 10],
    )
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0
    curve = next(c for c in result.sweep.curves if c.workers == 64 and c.compression == 1)
    bws = result.sweep.bandwidths_bps
    assert bws[0] == pytest.approx(0.1e9) and bws[-1] == pytest.approx(400e9)
    assert np.all(np.diff(curve.scaling_factor) >= -1e-12)  # more bandwidth never hurts
    assert len(result.points) == 4 * 5 * 4

"""The ringscope model: with every refinement off it is the paper's model; each switch moves the answer the
right way by an amount computed by hand here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analyze.whatif.backward_profile import BackwardProfile, load_profile, load_reduce_cost
from analyze.whatif.gradient_buckets import MiB, ddp_buckets
from analyze.whatif.replay import Replay
from analyze.whatif.model import RingscopeModel, RingscopeOptions
from analyze.whatif.paper import PaperModel
from tests.support.requirements import require

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "training-bottleneck"
OFF = RingscopeOptions(latency_s=0.0)  # every refinement off
S = 1e6  # one bucket of 1 MB, sent at backward end → the overhead is exactly its cost
ONE_BUCKET = BackwardProfile(np.array([0.001]), np.array([S]))


def overhead(
    options: RingscopeOptions,
    workers: int,
    bandwidth: float,
    compression: float = 1.0,
    profile: BackwardProfile = ONE_BUCKET,
) -> float:
    return float(Replay(RingscopeModel(options), profile).overhead_s(workers, bandwidth, compression)[0])


def test_all_refinements_off_is_the_paper_model() -> None:
    require((FIXTURES / "resnet50.bk.log").is_file(), "fixtures/training-bottleneck/ is missing")
    prof = load_profile(FIXTURES / "resnet50.bk.log")
    table = load_reduce_cost(FIXTURES / "cuda_vec_add.log")
    grid = [
        np.array(x, dtype=float)
        for x in zip(*[(n, b, c) for n in (2, 8, 64) for b in (1e9, 25e9, 100e9) for c in (1, 3)])
    ]
    paper = Replay(PaperModel(table), prof).overhead_s(*grid)
    ours = Replay(RingscopeModel(OFF, table), prof).overhead_s(*grid)
    np.testing.assert_array_equal(ours, paper)


def test_baseline_one_bucket() -> None:
    # N=8, B=10 Gbit/s: 2·7/8·8·1e6/1e10 = 1.4 ms.
    assert overhead(OFF, 8, 10e9) == pytest.approx(1.4e-3, rel=1e-12)


def test_latency_adds_two_n_minus_one_steps() -> None:
    # α = 10 µs, N = 8: 2·7 steps → +140 µs.
    with_latency = RingscopeOptions(latency_s=10e-6)
    assert overhead(with_latency, 8, 10e9) - overhead(OFF, 8, 10e9) == pytest.approx(140e-6, rel=1e-9)
    # …and it does not shrink with compression: at c = 1000 the wire is 1.4 µs, latency still 140 µs.
    assert overhead(with_latency, 8, 10e9, 1000) == pytest.approx(1.4e-6 + 140e-6, rel=1e-9)


def test_fp16_halves_the_bytes() -> None:
    fp16 = RingscopeOptions(latency_s=0.0, fp16=True)
    assert overhead(fp16, 8, 10e9) == pytest.approx(0.7e-3, rel=1e-12)


def test_transport_efficiency_slows_the_network_term() -> None:
    # Half of line rate while communicating: 1.4 ms → 2.8 ms.
    half = RingscopeOptions(latency_s=0.0, transport_efficiency=0.5)
    assert overhead(half, 8, 10e9) == pytest.approx(2.8e-3, rel=1e-12)
    with pytest.raises(ValueError):
        RingscopeOptions(transport_efficiency=1.5)


def test_hierarchical_servers() -> None:
    # N = 16 as 4 servers × G = 4 GPUs, NIC 10 Gbit/s, inside 100 Gbit/s, α = 10 µs on the network only:
    #   intra: 2·3/4·8e6/1e11 = 0.12 ms;  inter: 2·3/4·8e6/1e10 = 1.2 ms + 2·3·10 µs = 60 µs  → 1.38 ms
    # flat ring of 16:  2·15/16·8e6/1e10 = 1.5 ms + 2·15·10 µs = 300 µs                       → 1.8 ms
    hier = RingscopeOptions(latency_s=10e-6, gpus_per_server=4, intra_bandwidth_bps=100e9)
    flat = RingscopeOptions(latency_s=10e-6)
    assert overhead(hier, 16, 10e9) == pytest.approx(0.12e-3 + 1.2e-3 + 60e-6, rel=1e-9)
    assert overhead(flat, 16, 10e9) == pytest.approx(1.5e-3 + 300e-6, rel=1e-9)
    # Fewer workers than G: one server, only the intra-server ring (2·3/4·8e6/1e11 = 0.12 ms for N = 4).
    assert overhead(
        RingscopeOptions(latency_s=0.0, gpus_per_server=8, intra_bandwidth_bps=100e9), 4, 10e9
    ) == pytest.approx(0.12e-3)
    # The efficiency applies to the NIC only: inter 1.2 → 2.4 ms, intra unchanged.
    half = RingscopeOptions(latency_s=0.0, gpus_per_server=4, intra_bandwidth_bps=100e9, transport_efficiency=0.5)
    assert overhead(half, 16, 10e9) == pytest.approx(0.12e-3 + 2.4e-3, rel=1e-9)


DDP_PROFILE = BackwardProfile(np.full(5, 0.001), np.array([0.5, 0.6, 10, 20, 1]) * MiB)


def test_ddp_buckets_by_hand() -> None:
    # First bucket closes at ≥ 1 MiB (0.5 + 0.6), then at ≥ 25 MiB (10 + 20), the 1 MiB rest at the end.
    (b,) = ddp_buckets(DDP_PROFILE)
    assert b.size_bytes.tolist() == pytest.approx([1.1 * MiB, 30 * MiB, 1 * MiB])
    assert b.ready_s.tolist() == pytest.approx([0.002, 0.004, 0.005])


def test_ddp_sends_earlier_than_the_horovod_cycle() -> None:
    # Horovod: 5 × 1 ms reaches the 5 ms cycle only at the last tensor → one 32.1 MiB bucket at 5 ms.
    # N = 2, B = 100 Gbit/s: 8 bits per byte / 1e11 (2·(1/2) = 1).
    per_byte = 8 / 100e9
    horovod = overhead(OFF, 2, 100e9, profile=DDP_PROFILE)
    assert horovod == pytest.approx(32.1 * MiB * per_byte, rel=1e-9)
    # DDP: 1.1 MiB at 2 ms (done 2.09 ms); 30 MiB at 4 ms → 4 ms + 2.517 ms; the 1 MiB waits for it.
    ddp = overhead(RingscopeOptions(latency_s=0.0, buckets="ddp"), 2, 100e9, profile=DDP_PROFILE)
    assert ddp == pytest.approx(0.004 + 30 * MiB * per_byte + 1 * MiB * per_byte - 0.005, rel=1e-9)
    assert ddp < horovod


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="horovod"):
        RingscopeOptions(buckets="nccl")
    with pytest.raises(ValueError):
        RingscopeOptions(gpus_per_server=0)

"""A pipeline boundary's micro-batches and schedule from its bursts (analyze/collective/microbatches.py), on
sequences and bins built from the schedules' definitions; the live captures are in test_pipeline.py."""

from __future__ import annotations

import numpy as np

from analyze.collective.microbatches import burst_bins, read_schedule, sequence, unit

BIN = 10_000_000


def test_each_schedule_is_read_with_its_bubble():
    gpipe = read_schedule("FFFFBBBB" * 12, 12, 2)
    assert (gpipe.micro_batches, gpipe.in_flight, gpipe.kind, gpipe.confidence) == (4, 4, "gpipe", 1.0)
    assert gpipe.bubble_share == 0.2  # (p - 1) / (m + p - 1) = 1/5
    one = read_schedule("FB" * 4 * 12, 12, 2)  # periodic in FB: the iteration count says m
    assert (one.micro_batches, one.in_flight, one.kind, one.bubble_share) == (4, 1, "one_at_a_time", 0.5)
    assert unit(4, 2) == "FFBFBFBB"
    mid = read_schedule(unit(4, 2) * 10, 10, 3)  # 1F1B at the boundary after the middle of 3 stages
    assert (mid.micro_batches, mid.in_flight, mid.kind) == (4, 2, "1f1b") and mid.bubble_share == round(2 / 6, 4)


def test_cut_ends_are_forgiven_and_noise_costs_confidence():
    cut = read_schedule("BB" + "FFFFBBBB" * 11 + "FFF", 12, 2)  # the capture began and ended mid-iteration
    assert (cut.micro_batches, cut.kind) == (4, "gpipe") and cut.confidence == 1.0
    noisy = read_schedule(("FFFFBBBB" + "FB") * 12, 12, 2)  # a stray exchange every iteration: 80 % explained
    assert noisy.micro_batches == 4 and 0.5 < noisy.confidence < 1.0


def test_merged_bins_leave_it_unread():
    assert read_schedule("F??B" * 12, 12, 2) is None  # forward and backward in one bin: no order, no count
    assert read_schedule("FFFFBBBB" * 6, 12, 2) is None  # half the iterations: not once an iteration
    assert read_schedule("FFBB" * 12, 12, 1) is None  # one stage: no pipeline


def test_bursts_are_busy_runs_and_a_shared_bin_is_unordered():
    t = np.array([0, 1, 2, 5, 6, 9], dtype=np.int64) * BIN
    b = np.array([100, 90, 5, 80, 100, 2], dtype=np.float64)  # bins 2 and 9: ACK-sized, not bursts
    starts, ends = burst_bins(t, b, BIN)
    assert starts.tolist() == [0, 5] and ends.tolist() == [1, 6]
    forward = (np.array([0, 10]), np.array([1, 11]))
    assert sequence(forward, (np.array([3]), np.array([4]))) == "FBF"
    assert sequence(forward, (np.array([1]), np.array([2]))) == "??F"  # bin 1 holds both directions


def test_one_at_a_time_with_bursts_colliding_is_unsure():
    """FB repeated, but with a forward and a backward sharing a bin in most iterations: 1F1B's steady state, whose
    first forwards merged, looks so; one micro-batch at a time never sends both ways at once."""
    seq = ("FBFB??FB" * 12).replace("??", "FB", 3)
    clashing = read_schedule(seq, 12, 2)
    assert clashing is None or clashing.confidence <= 0.5
    clean = read_schedule("FBFBFBFB" * 12, 12, 2)
    assert clean.confidence == 1.0

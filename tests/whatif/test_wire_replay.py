"""The wire what-if on timelines whose answer is known by construction (analyze.whatif.wire_replay).

One host on a 1 Gbit/s link in 1 ms bins (125,000 bytes a full bin). Each iteration: the link idles 60 ms
(compute), then sends 20 full bins, idles 10 bins (it waited for the last bucket: backward had not ended) and
sends 10 full bins; 100 ms in all. So the wire shows: V = 3.75 MB at line rate (efficiency 1), backward ended no
earlier than 30 ms into the 40 ms window, and at any speed B the queue replay is exact arithmetic.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from analyze.model.findings import TimelineIteration, WireTimeline
from analyze.whatif.calculation import wire_what_if
from analyze.whatif.inputs import WhatIfInputs
from analyze.whatif.wire_replay import EFFICIENCY_BAND, SLOWER_BAND, wire_replays

FULL = 125_000  # bytes in a 1 ms bin at 1 Gbit/s
MS = 1e-3


def timeline(
    bins: list[int], idle: list[int], period_ms: int = 100, count: int = 4, peak_bps: float = 1e9
) -> WireTimeline:
    rows = [
        TimelineIteration(
            index=i,
            host="h1",
            period_ns=period_ms * 1_000_000,
            comm_start_ns=60_000_000,
            bytes_per_bin=bins,
            idle_bins=idle,
        )
        for i in range(count)
    ]
    return WireTimeline(bin_ns=1_000_000, hosts=1, link_speed_bps=1e9, peak_rate_bps=peak_bps, iterations=rows)


GAPPED = timeline([FULL] * 20 + [0] * 10 + [FULL] * 10, list(range(20, 30)))
SATURATED = timeline([FULL] * 40, [])


def test_what_the_wire_shows_is_read_exactly() -> None:
    r = wire_replays(GAPPED, 2, 0.100)
    assert r is not None
    fit = r.fit
    assert fit.efficiency == pytest.approx(1.0) and fit.window_ns / 1e9 == pytest.approx(40 * MS)
    assert fit.idle_ns / 1e9 == pytest.approx(60 * MS)
    assert fit.backward_end_ns_low / 1e9 == pytest.approx(30 * MS) and fit.backward_end_ns_high / 1e9 == pytest.approx(
        40 * MS
    )
    assert fit.hidden is False  # 10 ms of 100: the last bucket's wait shows when backward ended


def test_the_replay_reproduces_the_measured_iteration() -> None:
    r = wire_replays(GAPPED, 2, 0.100)
    assert r is not None
    assert float(r.point.iteration_s(2, 1e9)[0]) == pytest.approx(0.100, abs=1e-9)
    assert float(r.fast.iteration_s(2, 1e9)[0]) == pytest.approx(0.100, abs=1e-9)


def test_a_window_sent_at_half_rate_is_read_as_half_efficiency() -> None:
    # 80 bins at half of line rate (a ring's host waiting half of each bin for its predecessor's chunk): the
    # replay takes the 80 ms it took only at half of line rate, and at a 500 Mbit/s link, sending at half of it,
    # twice as long (the efficiency is carried to every speed)
    half = timeline([FULL // 2] * 80, [], period_ms=150, peak_bps=0.5e9)
    r = wire_replays(half, 2, 0.150)
    assert r is not None
    assert r.fit.efficiency == pytest.approx(0.5, rel=1e-6)
    assert float(r.point.iteration_s(2, 1e9)[0]) == pytest.approx(0.150, abs=1e-6)
    assert float(r.point.iteration_s(2, 0.5e9)[0]) == pytest.approx(0.150 + 0.080, abs=1e-6)
    # the waits inside the bins may be compute a slower link hides: the interval's fast edge fills a slower link
    # at line rate (5 MB at 500 Mbit/s: 80 ms, where the window took 80 ms); no faster link is filled so
    low, _ = r.interval_s(2, 0.5e9)
    assert float(low[0]) == pytest.approx(0.150, abs=1e-6)
    # at 2 Gbit/s it is no faster than the peak the capture showed, half of line rate: 70 ms and 5 MB at 1 Gbit/s
    low, _ = r.interval_s(2, 2e9)
    assert float(low[0]) == pytest.approx(0.070 + 0.040, abs=1e-6)


def test_a_slower_link_queues_the_bytes_behind_each_other() -> None:
    # at 500 Mbit/s: the first 2.5 MB take 40 ms (to 40 ms), the last 1.25 MB, ready at 30 ms, follow at once
    # (20 ms): the window ends at 60 ms, so the iteration is 60 + 60 = 120 ms whenever backward ended
    r = wire_replays(GAPPED, 2, 0.100)
    assert r is not None
    assert float(r.point.iteration_s(2, 0.5e9)[0]) == pytest.approx(0.120, abs=1e-9)
    # on a link slower than the captured 1 Gbit/s the interval's slow edge sends at (1 − SLOWER_BAND) of the
    # efficiency: 3.75 MB at 375 Mbit/s from the window's start; at the captured speed, (1 − EFFICIENCY_BAND): the
    # last 1.25 MB, ready as they left up to the window's end, follow the idle bins at 30 ms
    low, high = r.interval_s(2, 0.5e9)
    assert float(low[0]) == pytest.approx(0.120, abs=1e-9)
    assert float(high[0]) == pytest.approx(0.060 + 3.75e6 * 8 / (0.5e9 * (1 - SLOWER_BAND)), abs=1e-9)
    _, high = r.interval_s(2, 1e9)
    assert float(high[0]) == pytest.approx(0.060 + 0.030 + 1.25e6 * 8 / (1e9 * (1 - EFFICIENCY_BAND)), abs=1e-9)


def test_a_faster_link_waits_for_the_last_bucket() -> None:
    # at 2 Gbit/s: the last bucket, ready at 30 ms at the earliest, takes 5 ms: 60 + 35 = 95 ms; at the latest its
    # bytes became ready as they left, up to the window's end: then no speed ends it sooner, 100 ms
    r = wire_replays(GAPPED, 2, 0.100)
    assert r is not None
    low, high = r.interval_s(2, 2e9)
    assert float(low[0]) == pytest.approx(0.095, abs=1e-9)
    assert float(high[0]) == pytest.approx(0.100, abs=1e-9)
    point = float(r.point.iteration_s(2, 2e9)[0])
    assert float(low[0]) <= point <= float(high[0])


def test_more_workers_send_more_per_byte_of_gradient() -> None:
    # 2 workers send 2(2−1)/2 = 1 × S; 4 send 1.5 × S: at 500 Mbit/s the 3.75 MB become 5.625 MB, 90 ms of sending
    r = wire_replays(GAPPED, 2, 0.100)
    assert r is not None
    assert float(r.point.iteration_s(4, 0.5e9)[0]) == pytest.approx(0.060 + 5.625e6 * 8 / 0.5e9, abs=1e-9)


def test_a_link_busy_all_through_backward_is_a_range_and_the_verdict_says_so() -> None:
    r = wire_replays(SATURATED, 2, 0.100)
    assert r is not None and r.fit.hidden
    assert r.fit.backward_end_ns_low / 1e9 == 0.0 and r.fit.backward_end_ns_high / 1e9 == pytest.approx(40 * MS)
    inputs = WhatIfInputs(workers=2, link_speed_bps=1e9, iteration_time_s=0.100, gradient_bytes=5e6)
    w = wire_what_if(r, [2], [1e9, 10e9], measured=inputs)
    assert w.replay is not None and abs(w.replay.error) < 1e-6
    at_10g = [p for p in w.points if p.bandwidth_bps == 10e9][0]
    # as fast as 60 + 4 ms (every byte ready at once) or no faster than the 100 ms measured
    assert at_10g.iteration_ns_low / 1e9 == pytest.approx(0.064, abs=1e-9)
    assert at_10g.iteration_ns_high / 1e9 == pytest.approx(0.100, abs=1e-9)
    assert w.wire is not None and w.wire.scaling_factor_low is not None
    assert "busy all through backward" in w.verdict


def test_windows_longer_than_the_period_are_not_replayed() -> None:
    """A count read wrong (2 iterations for 80 on a CI run) cut 1.08 s windows for a 1.04 s period: no T is
    positive, and nothing is replayed. A 40 ms window cut alone (no idle bin) is replayed for a period of 41 ms
    and refused for 40 or 39 ms. A link-bound job whose windows fill the period (a DDP capture at 100 Mbit/s:
    windows 1.448 s, period 1.443 s, cut periods 1.467 s) is replayed: T is at least the link's idle time, 1 ms
    here, and the point reproduces the period."""
    alone = timeline([FULL] * 40, [], period_ms=40)
    assert wire_replays(alone, 2, 0.041) is not None
    assert wire_replays(alone, 2, 0.040) is None and wire_replays(alone, 2, 0.039) is None
    filled = wire_replays(timeline([FULL] * 40, [], period_ms=41), 2, 0.0395)
    assert filled is not None
    assert filled.fast.single_iteration_time_s == pytest.approx(1 * MS)
    assert min(filled.point.single_iteration_time_s, filled.slow.single_iteration_time_s) > 0
    assert filled.point.iteration_s(2, 1e9)[0] == pytest.approx(0.0395)


def test_the_ranks_profiles_set_the_backward_the_busy_link_hid() -> None:
    """SATURATED hides when backward ended (anywhere in 0-40 ms; the point: the idle 60 ms, clipped to the window).
    The ranks' profiles time it: per rank-step spans of 8, 10 and 12 ms give the point 10 ms, the interval's bounds
    their 10th and 90th percentiles, and T = 100 - 40 + 10 ms, what an infinitely fast link leaves."""
    bare = wire_replays(SATURATED, 2, 0.100)
    assert bare is not None and bare.fit.hidden and bare.fit.backward_profiled_steps is None
    assert bare.fit.backward_end_ns / 1e9 == pytest.approx(40 * MS)  # 1 x the 60 ms idle, inside 0-40 ms
    spans = [0.008, 0.010, 0.012] * 4
    profiled = wire_replays(replace(SATURATED, profiled_backward_ns=[round(x * 1e9) for x in spans]), 2, 0.100)
    assert profiled is not None
    fit = profiled.fit
    assert fit.backward_profiled_steps == 12 and fit.hidden is False
    assert fit.backward_end_ns / 1e9 == pytest.approx(10 * MS)
    assert (fit.backward_end_ns_low / 1e9, fit.backward_end_ns_high / 1e9) == (
        pytest.approx(8 * MS),
        pytest.approx(12 * MS),
    )
    assert profiled.point.single_iteration_time_s == pytest.approx(70 * MS)
    assert float(profiled.point.iteration_s(2, 1e15)[0]) == pytest.approx(70 * MS, abs=1e-6)
    assert float(profiled.point.iteration_s(2, 1e9)[0]) == pytest.approx(0.100, abs=1e-9)  # the replay still holds


# ---- chained readiness (sharded, pipeline): the idle stretches inside the window move with the link ------------
# GAPPED with 5 ms of idle link: runs of 20 ms (2.5 MB) and 10 ms (1.25 MB) around a 10 ms stretch of compute that
# waited for the first. The compute the link showed is 5 + 10 ms, so 15 ms runs under the runs (BACKWARD_PER_IDLE
# = 1), spread by their lengths: 10 ms under the first, 5 ms under the second.
CHAINED = timeline([FULL] * 20 + [0] * 10 + [FULL] * 10, list(range(20, 30)), period_ms=45)


def test_chained_readiness_moves_the_compute_between_runs_with_the_link() -> None:
    r = wire_replays(CHAINED, 2, 0.045, chained=True)
    assert r is not None and r.fit.readiness == "chained"
    assert r.fit.efficiency == pytest.approx(1.0) and r.fit.window_ns / 1e9 == pytest.approx(40 * MS)
    # the capture's own point: 5 + 20 + 10 + 10 ms
    assert float(r.point.iteration_s(2, 1e9)[0]) == pytest.approx(0.045, abs=1e-9)
    # at 2 Gbit/s each run takes its bytes' 10 and 5 ms, no less than the compute under it: 5 + 10 + 10 + 5 ms;
    # fixed readiness holds the second run's bytes until 30 ms into the window: 5 + 30 + 5 ms
    assert float(r.point.iteration_s(2, 2e9)[0]) == pytest.approx(0.030, abs=1e-9)
    assert float(wire_replays(CHAINED, 2, 0.045).point.iteration_s(2, 2e9)[0]) == pytest.approx(0.040, abs=1e-9)
    # at 500 Mbit/s the runs take 40 and 20 ms: 5 + 40 + 10 + 20
    assert float(r.point.iteration_s(2, 0.5e9)[0]) == pytest.approx(0.075, abs=1e-9)
    assert r.point.single_iteration_time_s == pytest.approx(0.030)  # 5 + 10 + 15 ms: the link infinitely fast


def test_chained_bounds_take_no_compute_and_all_of_it_under_the_runs() -> None:
    r = wire_replays(CHAINED, 2, 0.045, chained=True)
    assert r is not None
    fit = r.fit
    assert (fit.backward_end_ns_low / 1e9, fit.backward_end_ns / 1e9, fit.backward_end_ns_high / 1e9) == pytest.approx(
        (0.010, 0.025, 0.040)
    )
    assert fit.hidden is True  # 30 ms of 45 unknown: how much compute the busy runs hid
    low, high = r.interval_s(2, 2e9)
    # none under the runs, the link at line rate: 5 + 10 + 10 + 5 ms; all of it, each run as long as at 1 Gbit/s:
    # no faster than measured
    assert float(low[0]) == pytest.approx(0.030, abs=1e-9) and float(high[0]) == pytest.approx(0.045, abs=1e-9)


def test_chained_windows_longer_than_the_period_replay_to_it() -> None:
    # a saturated link cuts iterations anywhere: 12 of them may span more than 12 periods (FSDP at 100 Mbit/s
    # read 3.14 s windows for a 3.11 s period); each window replays to the period less its own idle time
    long = timeline([FULL // 2] * 40, [], period_ms=41, peak_bps=0.5e9)
    r = wire_replays(long, 2, 0.0395, chained=True)
    assert r is not None
    assert float(r.point.iteration_s(2, 1e9)[0]) == pytest.approx(0.0395, abs=1e-9)
    assert r.fit.efficiency == pytest.approx(0.5 * 40 / 38.5, rel=1e-9)  # 2.5 MB in 38.5 ms, as fast as it must go
    assert wire_replays(long, 2, 0.0009, chained=True) is None  # the idle time alone outlasts the period


def test_a_chained_what_if_says_what_it_read_and_what_hides_behind_what() -> None:
    r = wire_replays(CHAINED, 2, 0.045, chained=True)
    assert r is not None
    inputs = WhatIfInputs(workers=2, link_speed_bps=1e9, iteration_time_s=0.045, gradient_bytes=3.75e6)
    w = wire_what_if(r, [2], [1e9, 2e9], measured=inputs)
    assert w.replay is not None and abs(w.replay.error) < 1e-6
    assert w.model_options["readiness"] == "chained" and w.wire is not None and w.wire.readiness == "chained"
    assert any(a.startswith("wire model, chained readiness") for a in w.assumptions), w.assumptions
    # its communication overlaps all its compute, not a backward pass; the busy runs hid how much
    assert "behind backward" not in w.verdict and "hid how much compute ran under it" in w.verdict, w.verdict
    fixed = wire_what_if(wire_replays(CHAINED, 2, 0.045), [2], [1e9], measured=inputs)
    assert "readiness" not in fixed.model_options and fixed.wire is not None and fixed.wire.readiness is None

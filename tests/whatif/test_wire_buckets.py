"""The wire's reading of compute and overlap against the ranks' own bucket record (issue 44).

The what-if reads three things from each host's capture (analyze.wire.timeline, analyze.whatif.wire_replay): how
long the link idles per iteration (forward, the optimizer, the backward before the first bucket), how long the
communication window lasts, and when the backward pass ended inside it (a range where the busy link hid it).
Ground truth comes from outside the analyzer: every rank of a real DDP job records, through a communication hook
(capture.workloads.bucket_log), when it handed each gradient bucket to the process group and when that bucket's
all-reduce completed. A ring's bytes go round only once its last rank has handed a bucket over, so per step and
bucket the latest hand-off and completion over the ranks count. Per step:

* idle = the next step's first bucket ready less this step's last completion;
* window = the last completion less the first bucket ready;
* backward end = the last bucket ready less the first (from the window's start).

But a host's first bytes can leave at its own rank's hand-off, before the last rank joins (they fill the
neighbour's socket buffers), and on two cores four ranks' backward passes drift apart by up to 200 ms. So the
same three are also taken from each rank's own first hand-off, as medians over ranks and steps (the wire's
medians are over hosts and iterations). What the wire reads must lie between the two, widened by TOLERANCE_BINS
bins plus TOLERANCE_SHARE of the period, for idle and window; for the backward end, the range the wire gives must
meet theirs, widened as much. The medians leave the first two steps and the last out, as the wire's sample leaves
out warm-up and teardown. Before the ranks' own times were taken, a CI run (2026-11-29, 1 Gbit/s) read the window
206 ms against the ring's 169 (37 ms apart, 35 allowed); in a run after, the wire read 183 ms between the ring's 166
and the ranks' own 210 (idle 299 between 282 and 307); at 300 Mbit/s the window 430 between 430 and 453, idle 73
between 53 and 69.

Two cases (2.5 M parameters in two 5 MB layers, 4 MB buckets: two buckets per step). Measured 2026-11-28 on this
2-core VM, four runs: batch 1024 at 1 Gbit/s, where the link idles between the buckets: idle 324-369 ms on the wire
against 332-369 recorded, window 186-217 against 180-204, the backward's end 105-126 ms recorded, 9-19 ms under the
wire's lower bound (114-144: the window opens with the earlier ranks' first bytes, before the last rank hands its
first bucket over, and every time from it reads that much longer); batch 256 at 300 Mbit/s, the link busy all
through backward: idle 77-89 against 78-91, window 429-433 against 425-429, the backward's end 16-24 ms inside
0-433.

Not held, and why issue 44 stays open: the what-if's point inside that range. It takes the backward after the first
bucket as long as the link's idle time (real models' profiles: 0.88-1.33 times it, analyze.whatif.wire_replay),
and these two layers' backward after the first bucket is a quarter to a third of it (the first layer's backward
computes no input gradient): 82 ms against 16 at 300 Mbit/s (twice the idle time, the rule before: 179 against 21,
and that capture predicted 1 Gbit/s 29 % slow). The wire cannot tell it where the link hid the buckets; the ranks'
profiles can (the test below).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.netns import netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.training_capture import Job, live_capture, measured_step_s
from tests.support.tries import record as record_tries
from tests.whatif.test_whatif_speeds import POINT_TOLERANCE

TOLERANCE_BINS = 2
TOLERANCE_SHARE = 0.05


def recorded(truth: dict[str, Any]) -> dict[str, float]:
    """Median idle, window and backward end (seconds) over the steps, from the ranks' bucket records, as the ring
    sees them: a bucket's bytes can only go round once its last rank has handed it over, so per step and bucket
    (by its index) the latest hand-off and the latest completion over the ranks count. The same times from each
    rank's own first hand-off, medians over ranks and steps (keys ending in _own): a host's first bytes can leave
    then, before the ring's last rank has joined, and the wire's median is over hosts and iterations."""
    ready: dict[int, dict[int, int]] = {}  # step -> bucket -> the last rank's hand-off
    own: dict[int, dict[int, int]] = {}  # step -> rank -> its first hand-off
    complete: dict[int, int] = {}  # step -> the last rank's last completion
    for rank, rows in truth["buckets"].items():
        for s in (s for s in truth["steps"] if int(s["rank"]) == int(rank)):
            at = int(s["iteration"])
            for index, _size, handed, done in (r for r in rows if s["start_ns"] <= r[2] <= s["end_ns"]):
                ready.setdefault(at, {})[index] = max(ready.get(at, {}).get(index, 0), handed)
                own.setdefault(at, {})[int(rank)] = min(own.get(at, {}).get(int(rank), handed), handed)
                complete[at] = max(complete.get(at, 0), done)
    order = sorted(ready)
    kept, following = order[2:-1], order[3:]
    assert kept, f"no bucket records in {sorted(truth['buckets'])}"
    first = {at: min(ready[at].values()) for at in order}  # the ring's first bucket ready
    last = {at: max(ready[at].values()) for at in order}  # and its last
    rows = {
        "idle_s": [first[n] - complete[at] for at, n in zip(kept, following)],
        "window_s": [complete[at] - first[at] for at in kept],
        "backward_end_s": [last[at] - first[at] for at in kept],
        "idle_s_own": [t - complete[at] for at, n in zip(kept, following) for t in own[n].values()],
        "window_s_own": [complete[at] - t for at in kept for t in own[at].values()],
        "backward_end_s_own": [last[at] - t for at in kept for t in own[at].values()],
    }
    return {key: float(np.median(values)) / 1e9 for key, values in rows.items()}


@pytest.mark.parametrize("rate,batch", [("1gbit", 1024), ("300mbit", 256)])
def test_the_wire_reads_the_ranks_bucket_times(
    tmp_path: Path,
    netns_cluster: Any,  # noqa: F811
    rate: str,
    batch: int,
) -> None:
    from analyze.api import analyze
    from analyze.whatif.calculation import wire_scaling
    from analyze.whatif.inputs import inputs_from_result

    job = Job(workload="ddp", hosts=4, batch=batch, params=2_500_000, iters=14, rate=rate, bucket_log=True)
    run, truth = live_capture(tmp_path, netns_cluster, job)
    record_tries(1, [])
    result = analyze([run], workers=1)
    measured = inputs_from_result(result)
    scaling = wire_scaling(measured, [measured.workers or 0], [measured.link_speed_bps or 0.0], [1.0])
    assert scaling is not None and scaling.wire is not None, "the wire what-if needs the capture's timeline"
    fit = scaling.wire
    truth_times = recorded(truth)
    bin_s = result.bin_ns / 1e9
    allowed = TOLERANCE_BINS * bin_s + TOLERANCE_SHARE * fit.period_ns / 1e9
    wire = {
        "idle_s": fit.idle_ns / 1e9,
        "window_s": fit.window_ns / 1e9,
        "backward_end_s": fit.backward_end_ns / 1e9,
        "low": fit.backward_end_ns_low / 1e9,
        "high": fit.backward_end_ns_high / 1e9,
        "hidden": fit.hidden,
    }
    print(json.dumps({"rate": rate, "bin_s": bin_s, "allowed_s": allowed, "wire": wire, "recorded": truth_times}))
    # each between the ring's times and the ranks' own (recorded), within the tolerance
    for key in ("idle_s", "window_s"):
        ends = sorted((truth_times[key], truth_times[key + "_own"]))
        assert ends[0] - allowed <= wire[key] <= ends[1] + allowed, (key, wire, truth_times)
    ends = sorted((truth_times["backward_end_s"], truth_times["backward_end_s_own"]))
    assert wire["low"] - allowed <= ends[1] and ends[0] <= wire["high"] + allowed, (wire, truth_times)


def test_the_ranks_profiles_time_the_backward_the_busy_link_hid(
    tmp_path: Path,
    netns_cluster: Any,  # noqa: F811
) -> None:
    """Batch 256 at 300 Mbit/s hides the backward's end from the wire (0-429 ms above). Given the ranks' profiles
    (torch.profiler traces, `analyze --trace-beside`), the what-if reads it from their collective calls: the point
    within the tolerance above of the ranks' bucket record, the replay within 3 %, and from that capture the step
    the same job recorded at 1 Gbit/s predicted within the speeds test's POINT_TOLERANCE. A second capture at
    300 Mbit/s where the first count is unsure, as every live test; both are counted.

    Measured 2026-11-28: the profiles' backward end 29.5 and 23.8 ms against 28.0 and 21.6 recorded (the wire's
    point without them 82-89 ms, 179 under the rule before). From them 1 Gbit/s was predicted at 232 ms (222-256)
    for 236 recorded, and at 200 ms (191-223) for 227: at 1 Gbit/s this job's steps on two cores are paced by
    the CPU the ranks' gloo threads share (the speeds test's batch 256 recorded 197-272 ms there over runs), which
    neither the capture nor the profiles at 300 Mbit/s can see, so the interval narrowed by the profiles is not
    held here: issue 44 stays open for it. Without the profiles that point is the same (communication outlasts
    the backward at 1 Gbit/s either way); what the profiles change is T, the link speeds the verdict names and
    where communication hides."""
    from analyze.api import analyze
    from analyze.whatif.calculation import wire_scaling
    from analyze.whatif.inputs import inputs_from_result

    spec: dict[str, Any] = dict(workload="ddp", hosts=4, batch=256, params=2_500_000, iters=14, bucket_log=True)
    unsure: list[str] = []
    for attempt in (1, 2):
        (tmp_path / f"300mbit-{attempt}").mkdir()
        run, truth = live_capture(
            tmp_path / f"300mbit-{attempt}", netns_cluster, Job(**spec, profile=True, rate="300mbit")
        )
        profiles = [Path(p) for p in truth["profiles"]]
        result = analyze([run], workers=1, profiles=profiles)
        if result.iterations is not None and result.iterations.confident:
            break
        unsure.append(f"300mbit: {result.iterations.count if result.iterations else None} unsure")
    (tmp_path / "1gbit").mkdir()
    _, faster = live_capture(tmp_path / "1gbit", netns_cluster, Job(**spec, profile=True, rate="1gbit"))
    record_tries(attempt, unsure)  # one set of speeds, and the recapture of an unsure source
    assert result.iterations is not None and result.iterations.confident, unsure
    assert len(profiles) == 4, truth["profiles"]
    measured = inputs_from_result(result)
    scaling = wire_scaling(measured, [4], [300e6, 1e9], [1.0])
    assert scaling is not None and scaling.wire is not None
    fit = scaling.wire
    truth_times = recorded(truth)
    allowed = TOLERANCE_BINS * result.bin_ns / 1e9 + TOLERANCE_SHARE * fit.period_ns / 1e9
    at = {p.bandwidth_bps: p for p in scaling.points}
    step = measured_step_s(faster)
    # the same capture without the profiles, for the record (not held: the point the wire guesses, module docstring)
    bare = replace(measured, timeline=replace(measured.timeline, profiled_backward_ns=None))
    unprofiled = wire_scaling(bare, [4], [1e9], [1.0])
    row = {
        "backward_end_s": fit.backward_end_ns / 1e9,
        "low": fit.backward_end_ns_low / 1e9,
        "high": fit.backward_end_ns_high / 1e9,
        "profiled_steps": fit.backward_profiled_steps,
        "recorded_backward_end_s": truth_times["backward_end_s"],
        "replay_error": scaling.replay.error if scaling.replay else None,
        "predicted_1g_s": at[1e9].iteration_ns / 1e9,
        "interval_1g_s": [at[1e9].iteration_ns_low / 1e9, at[1e9].iteration_ns_high / 1e9],
        "recorded_1g_s": step,
        "inside": at[1e9].iteration_ns_low / 1e9 <= step <= at[1e9].iteration_ns_high / 1e9,
        "unprofiled_1g_s": unprofiled.points[0].iteration_ns / 1e9 if unprofiled else None,
    }
    print(json.dumps(row))
    assert fit.backward_profiled_steps and fit.backward_profiled_steps >= 4 * (spec["iters"] - 2), row
    assert abs(fit.backward_end_ns / 1e9 - truth_times["backward_end_s"]) <= allowed, row
    assert scaling.replay is not None and abs(scaling.replay.error) <= 0.03, row
    assert abs(at[1e9].iteration_ns / 1e9 / step - 1) <= POINT_TOLERANCE, row

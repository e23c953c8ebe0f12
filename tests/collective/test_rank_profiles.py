"""The ranks' profiles against the packets' stragglers (analyze/wire/rank_profiles.py), on traces written in
Kineto's trace-event format by hand: four ranks of six steps, each step a backward with two bucket all-reduces and
an optimizer step, rank 1 calling its first all-reduce LATE_MS after the others. The live check, real
torch.profiler traces of a real job, is tests/collective/test_stragglers.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyze.model.findings import Iterations, Straggler
from analyze.model.result import Result
from analyze.wire.rank_profiles import backward_spans, check_with_profiles, read_entries

HOSTS = ["h1", "h2", "h3", "h4"]
BASE = 1_790_000_000_000_000_000
STEP_US = 300_000


def _profile(folder: Path, rank: int, late_us: int) -> Path:
    events = []
    for k in range(6):
        t0 = k * STEP_US + (late_us if rank == 1 else 0)
        events += [
            {"ph": "X", "name": "aten::mm", "ts": t0 + 1_000, "dur": 50_000, "pid": 1, "tid": 1},
            {"ph": "X", "name": "c10d::allreduce_", "ts": t0 + 60_000, "dur": 30, "pid": 1, "tid": 1},
            {"ph": "X", "name": "gloo:all_reduce", "ts": t0 + 60_010, "dur": 40_000, "pid": 1, "tid": 2},
            {"ph": "X", "name": "c10d::allreduce_", "ts": t0 + 90_000, "dur": 30, "pid": 1, "tid": 1},
            {"ph": "X", "name": "Optimizer.step#SGD.step", "ts": t0 + 200_000, "dur": 5_000, "pid": 1, "tid": 1},
        ]
    doc = {"distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 4}, "traceEvents": events}
    doc["baseTimeNanoseconds"] = BASE
    path = folder / f"rank{rank}.pt.trace.json"
    path.write_text(json.dumps(doc))
    return path


def _result(named: list[Straggler]) -> Result:
    result = Result("ip", 10_000_000, 0.5, [], [], [], [], [], run={"hosts": HOSTS})
    result.iterations = Iterations(source="inferred", count=6, confident=True, confidence=1.0, period_ns=3e8)
    result.stragglers = named
    return result


def _late(lost_ms: float) -> Straggler:
    return Straggler("h2", 1, "compute", lost_ms * 1e6, 5, ["h2 enters late"], 0.9)


def test_entries_are_the_first_collective_call_after_each_optimizer_step(tmp_path):
    entries = read_entries(_profile(tmp_path, 1, 120_000))
    assert entries.rank == 1 and len(entries.entries) == 6
    assert entries.entries[2] == BASE + (2 * STEP_US + 120_000 + 60_000) * 1000


@pytest.mark.parametrize("late_ms, agrees", [(120, True), (40, False)])
def test_a_straggler_learns_whether_the_profiles_agree(tmp_path, late_ms, agrees):
    result = _result([_late(120)])
    check_with_profiles(result, [_profile(tmp_path, r, late_ms * 1000) for r in range(4)])
    (s,) = result.stragglers
    if agrees:
        assert s.confidence == 0.9 and "the ranks' profiles agree: rank 1's" in s.evidence[-1], s.evidence
        assert "120 ms" in s.evidence[-1]
    else:
        assert s.confidence == 0.5 and s.evidence[-1].startswith("DISAGREEMENT: rank 1's profile"), s.evidence


def test_a_late_rank_the_packets_did_not_name_is_said(tmp_path):
    result = _result([])
    check_with_profiles(result, [_profile(tmp_path, r, 120_000) for r in range(4)])
    assert any(w.startswith("DISAGREEMENT: rank 1's profile has it entering") for w in result.warnings)


def test_a_trace_of_one_process_is_merged_only(tmp_path):
    single = tmp_path / "one.json"
    single.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}]}))
    result = _result([_late(120)])
    check_with_profiles(result, [single])
    assert "not a profile of one rank" in result.assumptions[-1] and result.stragglers[0].confidence == 0.9


def test_a_steps_calls_time_its_backward_for_the_what_if(tmp_path: Path) -> None:
    """Per rank and step, the last collective call less the first: the two bucket all-reduces 30 ms apart (the
    gloo event, on another thread, starts 10 µs after the first call and is inside the span); each rank's first
    step left out, 4 ranks x 5 steps."""
    paths = [_profile(tmp_path, r, 120_000) for r in range(4)]
    assert read_entries(paths[0]).spans == [30_000_000] * 6  # type: ignore[union-attr]
    spans = backward_spans(paths)
    assert len(spans) == 20 and spans == pytest.approx([0.030] * 20, abs=1e-9)
    assert backward_spans([]) == []


def test_a_buffer_broadcast_before_forward_is_no_part_of_the_backward(tmp_path: Path) -> None:
    """DDP broadcasts a model's buffers (batch-norm statistics) at each forward's start: a collective call, but no
    bucket. The span stays the all-reduces' 30 ms; the entry (the straggler check's) is the broadcast."""
    path = _profile(tmp_path, 2, 0)
    doc = json.loads(path.read_text())
    for k in range(6):
        doc["traceEvents"].append({"ph": "X", "name": "c10d::broadcast_", "ts": k * STEP_US, "dur": 20})
    path.write_text(json.dumps(doc))
    entries = read_entries(path)
    assert not isinstance(entries, str)
    assert entries.spans == [30_000_000] * 6 and entries.entries[1] == BASE + STEP_US * 1000

"""The same judgment with one capture missing, or the link speed not given (issue 45: "the same input gives the
same judgment whatever the bin, the flags or one missing capture").

Each committed real capture is analyzed whole, then once per host with that host's capture left out (an agent
that failed), then with every meta.json stripped of its link speed. Ground truth from outside the analyzer: the
ranks' own step count (truth.json) and the shapers in each run's README.

What must not move: the bin chosen from the traffic, the iteration count and its sureness, the shape, the
stragglers, and every edge the left-out capture did not send or receive: a limiter sure in one reading is the
same limiter in every reading where it is sure. What may move is said: an edge whose sender's capture is gone is
not judged (its rate comes from its sender's capture); the job's limiter over the fewer edges left may cross
CONFIDENT (ddp-100mbit: link 0.81 whole, 0.78 without h3), but never to another sure answer; without the link
speed every limiter read against line rate is at most 0.5 (analyze/wire/transport.py, line_rate_unknown).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analyze.api import analyze
from analyze.confidence.thresholds import CONFIDENT
from tests.support.link_speed import without_link_speed

ROOT = Path(__file__).resolve().parents[2]


def _reading(run: Path, left_out: str | None = None):  # type: ignore[no-untyped-def]
    r = analyze([run], workers=1)
    sure_edges = {}
    for finding in (r.transport, r.rdma):
        for e in finding.edges if finding is not None else []:
            if e.limiter is not None and e.confidence >= CONFIDENT and left_out not in (e.src, e.dst):
                sure_edges[(e.src, e.dst)] = e.limiter
    job = (r.transport.limiter, r.transport.confidence) if r.transport is not None else (None, 0.0)
    return {
        "bin_ns": r.bin_ns,
        "count": (r.iterations.count, r.iterations.confidence >= CONFIDENT),
        "shape": r.topology.kind,
        "stragglers": sorted((s.host, s.kind) for s in r.stragglers or []),
        "sure_edges": sure_edges,
        "job": job,
    }


def _without(run: Path, host: str, dest: Path) -> Path:
    shutil.copytree(run, dest, ignore=lambda folder, names: [host] if Path(folder) == run else [])
    return dest


@pytest.mark.parametrize(
    "case, hosts",
    [
        ("example-ddp/run", ["h1", "h2", "h3", "h4"]),
        ("real-training/ddp-100mbit/run", ["h1", "h2", "h3", "h4"]),
        ("real-training/ddp-lossy-rto/run", ["h1", "h2", "h3"]),
        ("real-training/horovod-3h/run", ["h1", "h2", "h3"]),
        ("real-training/ddp-8h/run", ["h1", "h5"]),
    ],
)
def test_one_capture_missing_or_no_link_speed_moves_no_sure_answer(case: str, hosts: list[str], tmp_path: Path) -> None:
    run = ROOT / "fixtures" / case
    truth = len(json.loads((run.parent / "truth.json").read_text())["iterations"])
    whole = _reading(run)
    assert whole["count"] == (truth, True), whole
    readings = {"whole": whole}
    for host in hosts:
        readings[f"without {host}"] = _reading(_without(run, host, tmp_path / f"no-{host}"), left_out=host)
    readings["no link speed"] = _reading(without_link_speed(run, tmp_path / "no-speed"))
    for name, got in readings.items():
        for key in ("bin_ns", "count", "shape", "stragglers"):
            assert got[key] == whole[key], (name, key, got[key], whole[key])
        for edge, limiter in got["sure_edges"].items():
            assert all(other["sure_edges"].get(edge, limiter) == limiter for other in readings.values()), (name, edge)
    sure_jobs = {got["job"][0] for got in readings.values() if got["job"][1] >= CONFIDENT}
    assert len(sure_jobs) <= 1, {name: got["job"] for name, got in readings.items()}
    # the edges a missing capture did not touch keep their sure limiter
    for host in hosts:
        untouched = {e: lim for e, lim in whole["sure_edges"].items() if host not in e}
        assert readings[f"without {host}"]["sure_edges"] == untouched, (host, readings[f"without {host}"])

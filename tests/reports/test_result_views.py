"""The result's typed findings (r.topology, r.iterations, r.scaling) hold exactly what the JSON holds, and the
JSON reads back into the same result, on the bundled example (markers) and on a real capture the analyzer is
unsure of."""

from __future__ import annotations

import json
from pathlib import Path

from analyze.api import analyze
from analyze.model.findings import IterationRecord, Iterations, Topology, Unsure, Verdict, WhatIf
from analyze.model.result import Result

ROOT = Path(__file__).resolve().parents[2]


def _round_trips(r: Result) -> None:
    """The JSON form, through json text and back into a Result, writes the same JSON again."""
    doc = json.loads(json.dumps(r.to_json()))
    back = Result.from_json(doc)
    assert back.tables is None
    assert json.loads(json.dumps(back.to_json())) == doc
    assert back.to_json() == r.to_json()


def test_views_match_the_json_of_the_example():
    r = analyze([ROOT / "fixtures" / "example"], workers=1)
    doc = r.to_json()
    assert isinstance(r.topology, Topology) and isinstance(r.iterations, Iterations)
    assert r.topology.order == doc["topology"]["order"] == ["h3", "h2", "h4", "h1"]
    assert [(e.src, e.dst, e.bytes) for e in r.topology.edges] == [
        (e["src"], e["dst"], e["bytes"]) for e in doc["topology"]["edges"]
    ]
    assert r.iterations.count == doc["iterations"]["count"] == 10
    assert r.iterations.confident and r.iterations.source == "markers"
    first = r.iterations.per_iteration[0]
    assert isinstance(first, IterationRecord)
    assert first.bytes_by_host == doc["iterations"]["per_iteration"][0]["bytes_by_host"]
    assert r.iterations.period_ns == doc["iterations"]["period_ns"]
    assert isinstance(r.scaling, WhatIf) and r.scaling.unsure is None and "unsure" not in doc["scaling"]
    assert r.scaling.measured is not None
    assert (
        r.scaling.measured.full_utilization_scaling_factor
        == r.scaling.scaling_factor
        == doc["scaling"]["measured"]["full_utilization_scaling_factor"]
    )
    assert r.scaling.verdict == doc["scaling"]["verdict"]
    assert isinstance(r.verdict, Verdict) and r.verdict.answer == doc["verdict"]["answer"]
    _round_trips(r)


def test_views_of_an_unsure_capture():
    # at 10 ms bins (given) its retransmission timeouts split every step: 28, unsure (at its chosen 1 ms: 14, sure)
    r = analyze([ROOT / "fixtures" / "real-training" / "ddp-lossy-rto" / "run"], workers=1, bin_ns=10_000_000)
    assert r.iterations is not None and not r.iterations.confident and r.iterations.confidence < 0.8
    assert r.scaling is not None and isinstance(r.scaling.unsure, Unsure) and r.scaling.verdict.startswith("UNSURE")
    assert r.to_json()["scaling"]["unsure"]["confidence"] == r.scaling.unsure.confidence
    _round_trips(r)

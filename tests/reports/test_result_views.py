"""The typed views of the result (r.topology, r.iterations, r.whatif) hold exactly what the JSON holds, on
the bundled example (markers) and on a real capture the analyzer is unsure of."""

from __future__ import annotations

from pathlib import Path

from analyze.api import analyze
from analyze.result import IterationRecord, Iterations, Topology, WhatIf

ROOT = Path(__file__).resolve().parents[2]


def test_views_match_the_json_of_the_example():
    r = analyze([ROOT / "fixtures" / "example"], workers=1)
    doc = r.to_json()
    assert isinstance(r.topology, Topology) and isinstance(r.iterations, Iterations)
    assert r.topology.order == doc["topology"]["order"] == ["h3", "h2", "h4", "h1"]
    assert [(e.src, e.dst, e.bytes) for e in r.topology.edges] == [
        (e["src"], e["dst"], e["bytes"]) for e in doc["topology"]["edges"]
    ]
    assert r.iterations.count == 10 and r.iterations.confident and r.iterations.source == "markers"
    first = r.iterations.per_iteration[0]
    assert isinstance(first, IterationRecord)
    assert first.bytes_by_host == doc["iterations"]["per_iteration"][0]["bytes_by_host"]
    assert r.iterations.period_ns == doc["iterations"]["period_ns"]
    assert isinstance(r.whatif, WhatIf) and r.whatif.unsure is None
    assert r.whatif.scaling_factor == doc["scaling"]["measured"]["full_utilization_scaling_factor"]
    assert r.whatif.verdict == doc["scaling"]["verdict"]


def test_views_of_an_unsure_capture():
    r = analyze([ROOT / "fixtures" / "real-training" / "ddp-lossy-rto" / "run"], workers=1)
    assert r.iterations is not None and not r.iterations.confident and r.iterations.confidence < 0.8
    assert r.whatif is not None and r.whatif.unsure and r.whatif.verdict.startswith("UNSURE")

"""A result saved by an older version is still read (issue 46: "readers of older files kept"): schema 1 wrote the
what-if in seconds and round trips in ms or µs, schema 2 every duration in integer ns (analyze/model/older.py).

Ground truth: fixtures/saved/example-ip.schema-1.json.gz is what the version before schema 2 wrote for
fixtures/example, and tests/golden/example-ip/result.json what this one writes for the same capture. Read back, the
two must be the same Result, every duration equal within what schema 1's rounding kept."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from analyze.model.jsonform import plain
from analyze.model.older import upgraded
from analyze.model.result import SCHEMA_VERSION, Result
from tests.support.clirun import ringscope

ROOT = Path(__file__).resolve().parents[2]
OLD = ROOT / "fixtures" / "saved" / "example-ip.schema-1.json.gz"
NEW = ROOT / "tests" / "golden" / "example-ip" / "result.json"
# schema 1 rounded its per-iteration round trips to 0.1 µs (four places of ms): the ns read from it are that close
ROUNDED_NS = 50
# keys a later analysis writes that the saved file's version did not (read back from it: none): the per-link
# what-if's pricing by the wire model (analyze.whatif.link_fixes, 2026-11-29)
ADDED = ("ring_speedup", "ring_speedup_if_usual", "saving_ns_low", "saving_ns_high", "priced_by")
# keys a later analysis computes otherwise (read back from the saved file: its own value, checked for presence):
# the others' usual pace of the per-link what-if, from packet times since 2026-11-30 (analyze.wire.stragglers)
CHANGED = ("usual_bps",)


def _leaves(doc: Any, at: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _leaves(value, f"{at}.{key}")
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _leaves(value, f"{at}[{i}]")
    else:
        yield at, doc


def test_a_schema_1_result_reads_as_the_same_result() -> None:
    old_doc = json.loads(gzip.decompress(OLD.read_bytes()))
    assert old_doc["schema"] == 1 and SCHEMA_VERSION == 2
    old = dict(_leaves(plain(Result.from_json(old_doc, complete=True))))
    new = dict(_leaves(plain(Result.from_json(json.loads(NEW.read_text()), complete=True))))
    assert old.keys() == new.keys(), sorted(old.keys() ^ new.keys())[:10]
    durations = 0
    for key, value in new.items():
        if key.rsplit(".", 1)[-1] in ADDED:
            assert old[key] is None, key
            continue
        if key.rsplit(".", 1)[-1] in CHANGED:
            assert old[key] is not None and value is not None, key
            continue
        if key.rsplit(".", 1)[-1].split("[")[0].endswith(("_ns", "_ns_low", "_ns_high")) and isinstance(value, int):
            durations += 1
            assert old[key] == pytest.approx(value, abs=ROUNDED_NS), key
        elif isinstance(value, float):
            assert old[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert old[key] == value, key
    assert durations > 1000  # the series' round trips, the what-if's points and fit among them


def test_each_renamed_unit_is_scaled() -> None:
    old = {
        "rdma": {"edges": [{"ack_rtt_median_us": 12.5, "series": {"rtt_us": [1.25, None]}}]},
        "transport": {"edges": [{"rtt_min_ms": 0.25, "zero_window_ms": None, "series": {"rtt_ms": [1.5]}}]},
        "scaling": {"single_iteration_time_s": 0.1, "points": [{"iteration_s_low": 0.2, "backward_s": 0.05}]},
        "iterations": {"period_ns": 1.5e8},
    }
    assert upgraded(old, 1) == {
        "rdma": {"edges": [{"ack_rtt_median_ns": 12_500, "series": {"rtt_ns": [1_250, None]}}]},
        "transport": {"edges": [{"rtt_min_ns": 250_000, "zero_window_ns": None, "series": {"rtt_ns": [1_500_000]}}]},
        "scaling": {
            "single_iteration_time_ns": 100_000_000,
            "points": [{"iteration_ns_low": 200_000_000, "backward_ns": 50_000_000}],
        },
        "iterations": {"period_ns": 1.5e8},
    }
    assert upgraded(old, 2) is old


def test_report_draws_a_schema_1_result(tmp_path: Path) -> None:
    saved = tmp_path / "old.json"
    saved.write_bytes(gzip.decompress(OLD.read_bytes()))
    done = ringscope("report", saved, "-o", tmp_path / "old.html")
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "old.html").read_text()
    assert "single-GPU iteration time T" in html and "100 ms" in html  # T 100.4 ms, read from seconds

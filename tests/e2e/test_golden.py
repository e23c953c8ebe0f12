"""Every fixture's outputs (JSON, summary, CSV, Parquet) equal the golden ones in tests/golden/, value by value with
the tolerances stated in tests/support/golden.py: a refactor that moves rooms, types or names must not change an
answer, and a failure lists each differing value. An intended change of output is re-recorded with
`python -m tests.support.golden --record`, and the diff of tests/golden/ shows what it touched."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support.golden import CASES, case_dir, diff_case, diff_frames, diff_json, diff_text, produce, report


@pytest.mark.parametrize("name, paths, options", CASES, ids=[c[0] for c in CASES])
def test_outputs_equal_the_golden_ones(name, paths, options, tmp_path):
    differences = diff_case(case_dir(name), produce(paths, options, tmp_path))
    assert not differences, report(name, differences)


def _golden_copy(tmp_path):
    """A fresh run of the real example next to a copy of its golden files, to change one of them."""
    name, paths, options = CASES[0]
    golden = tmp_path / "golden"
    shutil.copytree(case_dir(name), golden)
    return golden, produce(paths, options, tmp_path / "run")


def test_a_changed_iteration_count_fails_with_a_readable_diff(tmp_path):
    golden, produced = _golden_copy(tmp_path)
    data = json.loads((golden / "result.json").read_text())
    count = data["iterations"]["count"]
    data["iterations"]["count"] = count + 1
    (golden / "result.json").write_text(json.dumps(data))
    assert diff_case(golden, produced) == [f"result.json: $.iterations.count: got {count}, want {count + 1}"]


def test_a_changed_table_value_and_summary_digit_fail(tmp_path):
    golden, produced = _golden_copy(tmp_path)
    flows = (golden / "tables" / "flows.csv").read_text().splitlines()
    header, first = flows[0].split(","), flows[1].split(",")
    first[header.index("packets")] = str(int(first[header.index("packets")]) + 1)
    (golden / "tables" / "flows.csv").write_text("\n".join([flows[0], ",".join(first), *flows[2:]]) + "\n")
    summary = (golden / "summary.txt").read_text()
    (golden / "summary.txt").write_text(summary.replace("confidence 1.00", "confidence 0.98", 1))
    differences = diff_case(golden, produced)
    assert [d.split(":")[0] for d in differences] == [
        "summary.txt",
        "tables/flows.csv",
        "tables/flows.csv",  # the Parquet, compared with the golden CSV
    ], differences
    assert "column packets: 1 row(s) differ; first row 0" in differences[1]
    assert "confidence 0.98" in differences[0] and "confidence 1.00" in differences[0]


def test_floats_within_the_tolerance_pass_and_beyond_it_fail():
    assert list(diff_json({"a": [1.0, 2, "x"]}, {"a": [1.0 + 1e-12, 2, "x"]})) == []
    assert list(diff_json({"a": 1.0}, {"a": 1.0 + 1e-4})) == ["$.a: got 1.0001, want 1.0"]
    assert list(diff_json({"n": 16}, {"n": 17})) == ["$.n: got 17, want 16"]
    assert list(diff_json({"a": 1}, {"b": 1})) == ["$.a: missing (want 1)", "$.b: unexpected (got 1)"]
    assert list(diff_json({"a": True}, {"a": 1})) == ["$.a: got 1, want true"]
    assert list(diff_json(float("nan"), float("nan"))) == []


def test_printed_decimals_may_differ_by_one_unit_of_their_last_digit():
    assert list(diff_text("T 21.6 ms, 6,024,466 B\n", "T 21.7 ms, 6,024,466 B\n")) == []
    assert list(diff_text("T 21.6 ms\n", "T 21.8 ms\n")) != []
    assert list(diff_text("16 iterations\n", "17 iterations\n")) != []
    assert list(diff_text("a 1.0\n", "b 1.0\n")) != []
    assert list(diff_text("x\n", "x\ny\n")) == ["2 lines, want 1"]


def test_frames_compare_integers_exactly_and_floats_within_the_tolerance():
    import pandas as pd

    want = pd.DataFrame({"n": [1, 2], "r": [0.5, 1e9], "s": ["a", "b"]})
    assert list(diff_frames(want, want.assign(r=[0.5 * (1 + 1e-9), 1e9 + 1e-3]))) == []
    assert list(diff_frames(want, want.assign(n=[1, 3]))) == ["column n: 1 row(s) differ; first row 1: got 3, want 2"]
    assert list(diff_frames(want, want.assign(s=["a", "c"]))) == [
        "column s: 1 row(s) differ; first row 1: got 'c', want 'b'"
    ]
    assert list(diff_frames(want, want.iloc[:1])) == ["1 rows, want 2"]

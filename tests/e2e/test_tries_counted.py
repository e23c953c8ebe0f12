"""The live tests' captures are counted and printed at the end of the run (tests/support/tries.py)."""

from __future__ import annotations

import pytest

from tests.support import tries
from tests.support.training_capture import sure_in_one_of_two_runs


def test_every_capture_a_test_needed_is_counted_and_said(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tries, "TRIES", {})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    answers = iter(["12 at 0.7", True])
    sure_in_one_of_two_runs(tmp_path / "a", lambda folder: next(answers))
    never = iter(["0.5", "0.6", True])  # a third capture would be sure: it is never taken
    with pytest.raises(AssertionError, match="unsure in two captures"):
        sure_in_one_of_two_runs(tmp_path / "b", lambda folder: next(never))  # counted even when it fails
    assert next(never) is True
    ((test, (captures, unsure)),) = tries.TRIES.items()  # one test: its two helpers' captures add up
    assert test.endswith("test_every_capture_a_test_needed_is_counted_and_said")
    assert (captures, unsure) == (4, ["12 at 0.7", "0.5", "0.6"])
    lines = tries.summary_lines()
    assert lines[0] == "live tests by captures needed: 4 captures: 1"
    assert "4 captures; unsure: 12 at 0.7 | 0.5 | 0.6" in lines[1]

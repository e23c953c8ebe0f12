"""The live tests' captures are counted and printed at the end of the run (tests/support/tries.py)."""

from __future__ import annotations

import pytest

from tests.support import tries
from tests.support.training_capture import sure_in_one_of_three_runs


def test_every_capture_a_test_needed_is_counted_and_said(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tries, "TRIES", {})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    answers = iter(["12 at 0.7", True])
    sure_in_one_of_three_runs(tmp_path / "a", lambda folder: next(answers))
    never = iter(["0.5", "0.6", "0.4"])
    with pytest.raises(AssertionError, match="unsure in three captures"):
        sure_in_one_of_three_runs(tmp_path / "b", lambda folder: next(never))  # counted even when it fails
    ((test, (captures, unsure)),) = tries.TRIES.items()  # one test: its two helpers' captures add up
    assert test.endswith("test_every_capture_a_test_needed_is_counted_and_said")
    assert (captures, unsure) == (5, ["12 at 0.7", "0.5", "0.6", "0.4"])
    lines = tries.summary_lines()
    assert lines[0] == "live tests by captures needed: 5 captures: 1"
    assert "5 captures; unsure: 12 at 0.7 | 0.5 | 0.6 | 0.4" in lines[1]

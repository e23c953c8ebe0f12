"""How many captures each live test needed (issues 45, 46): a live test whose answer was right but unsure captures
once more (training_capture.sure_in_one_of_two_runs; a third would be a failure), and a tool that is sure half
the time would still pass most runs that way if nothing said so. So every such test's tries are kept here and
tests/conftest.py prints them at the end of the run: how many tests needed one capture and how many two, and
which needed more than one, with why."""

from __future__ import annotations

import os

TRIES: dict[str, tuple[int, list[str]]] = {}  # test id: (captures taken, why each unsure one was unsure)


def record(captures: int, unsure: list[str]) -> None:
    """The current test took CAPTURES captures, UNSURE the reasons of those that were right but unsure (a test
    that captures twice over, e.g. a clean run and a slow one, adds up)."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    before, said = TRIES.get(test, (0, []))
    TRIES[test] = (before + captures, said + [str(why)[:160] for why in unsure])


def summary_lines() -> list[str]:
    """The end-of-run lines: a count per number of captures, then each test that needed more than one."""
    if not TRIES:
        return []
    counts: dict[int, int] = {}
    for captures, _ in TRIES.values():
        counts[captures] = counts.get(captures, 0) + 1
    lines = [
        "live tests by captures needed: "
        + ", ".join(f"{n} capture{'s' if n > 1 else ''}: {counts[n]}" for n in sorted(counts))
    ]
    for test, (captures, unsure) in sorted(TRIES.items()):
        if captures > 1:
            lines.append(f"  {test}: {captures} captures; unsure: {' | '.join(unsure)}")
    return lines

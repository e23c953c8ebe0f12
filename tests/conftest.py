"""Shared test set-up. Tests live by part (read/, dataset/, collective/, whatif/, capture/, reports/, e2e/); their
helpers (generators, oracles, network-namespace hosts, the browser driver, requirement checks) live in the
package tests.support and the collective generators in fixtures.collective, both imported by their full names
(`from tests.support.pcapgen import ...`); pytest puts the repository root on sys.path, as this conftest sits in
the package `tests`. The `netns_cluster` fixture (tests/support/netns.py) is available to every test; the end of
the run lists how many captures each live test needed (tests/support/tries.py)."""

from __future__ import annotations

import pytest

from tests.support.netns import netns_cluster  # noqa: F401  (a fixture for every test)
from tests.support.tries import summary_lines


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ARG001  (pytest's hook)
    """Every test that builds hosts in network namespaces is `live` (real training, real captures): marked here,
    from the fixture it asks for, so none is missed and `pytest -m "not live"` is the quick tier."""
    for item in items:
        if "netns_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.live)


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ANN001, ARG001  (pytest's hook)
    """The live tests' captures, counted (tests/support/tries.py)."""
    lines = summary_lines()
    if lines:
        terminalreporter.section("live captures")
        for text in lines:
            terminalreporter.write_line(text)

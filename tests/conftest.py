"""Shared test set-up. Tests live by part (read/, dataset/, collective/, whatif/, capture/, reports/, e2e/); their
helpers (generators, oracles, network-namespace hosts, the browser driver, requirement checks) live in the
package tests.support and the collective generators in fixtures.collective, both imported by their full names
(`from tests.support.pcapgen import ...`); pytest puts the repository root on sys.path, as this conftest sits in
the package `tests`. The `netns_cluster` fixture (tests/support/netns.py) is available to every test."""

from __future__ import annotations

from tests.support.netns import netns_cluster  # noqa: F401  (a fixture for every test)

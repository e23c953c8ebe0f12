"""Shared test set-up. Tests live by part (read/, dataset/, collective/, whatif/, capture/, reports/, e2e/); their
helpers (generators, oracles, network-namespace hosts, the browser driver, requirement checks) live in
support/ and are imported by module name, as are the collective generators under fixtures/collective/.
The `netns_cluster` fixture (tests/support/netns.py) is available to every test."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for folder in (HERE / "support", HERE.parent / "fixtures" / "collective"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from netns import netns_cluster  # noqa: E402, F401  (a fixture for every test)

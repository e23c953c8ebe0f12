"""A minute of mutation fuzzing (tests/support/fuzz.py) against `ringscope analyze`: no traceback, hang, crash,
exit code other than 0 or 2, or peak memory over 256 MB on any mutated capture. A minute under CI=true,
RINGSCOPE_FUZZ_SECONDS to choose; failing inputs are kept in tests/artifacts/fuzz/ with the seed printed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.fuzz import MEMORY_BOUND_MB, analyze_once, run

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "fuzz"


@pytest.mark.slow  # the minute of fuzzing .ci/run gives it: left out of the quick tier
def test_mutated_captures_end_cleanly() -> None:
    seconds = float(os.environ.get("RINGSCOPE_FUZZ_SECONDS") or (60 if os.environ.get("CI") == "true" else 15))
    seed = int(os.environ.get("RINGSCOPE_FUZZ_SEED") or time.time())
    # 512 MB resident in this process: each run's peak must still be its own, not its parent's (a child forked
    # from a big process reports that process's size as its peak; CI's pytest grows past 1 GB)
    ballast = bytearray(512 << 20)
    ballast[:: 1 << 12] = b"\x01" * len(range(0, len(ballast), 1 << 12))
    outcomes = run(seconds, ARTIFACTS, seed)
    del ballast
    failed = [o for o in outcomes if o.failure]
    print(f"fuzz seed {seed}: {len(outcomes)} runs, peak {max(o.peak_mb for o in outcomes):.0f} MB")
    assert len(outcomes) >= seconds / 5, "the harness ran too few inputs to mean anything"
    assert all(o.peak_mb > 0 for o in outcomes)  # the bound is only a check if the peak is really measured
    assert not failed, "\n".join(f"{o.path} ({o.mutation}): {o.failure}" for o in failed) + (
        f"\nreplay: ringscope analyze FILE; this run: RINGSCOPE_FUZZ_SEED={seed} (bound {MEMORY_BOUND_MB} MB)"
    )


FOUND = sorted((Path(__file__).resolve().parent / "fuzz_found").iterdir())


@pytest.mark.parametrize("path", FOUND, ids=lambda p: p.name)
def test_inputs_the_fuzz_once_broke_end_cleanly(path: Path) -> None:
    """Mutated captures that once failed, kept as they were found. ring-edges-without-cells: multi.pcapng with
    flipped timestamps, its ring's flows all dated outside the capture's span, so the iteration search met edges
    without a series cell (a traceback in collective._edge_series). tsresol-beyond-64-bits: multi.pcapng with a
    flipped bit in an interface's if_tsresol, units whose power of ten does not fit 64 bits (a division by zero
    in the kernel's timestamp conversion)."""
    outcome = analyze_once(path, "found")
    assert outcome.failure == "" and outcome.code == 0, outcome

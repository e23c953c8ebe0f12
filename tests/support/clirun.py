"""Run the installed `ringscope` console script as a user would, and read its verdict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RINGSCOPE = Path(sys.executable).with_name("ringscope")


def ringscope(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`ringscope ARGS...` as a subprocess; a hang fails the test through the timeout."""
    return subprocess.run([str(RINGSCOPE), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The single error line of a failed run (exit code 2, no traceback, nothing on stdout)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ringscope: error: ")
    assert proc.stdout == ""
    return lines[0]

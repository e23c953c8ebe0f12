"""ringscope's analyzer: captures in, one typed result out (see analyze.api.analyze)."""
from __future__ import annotations

import os
from pathlib import Path

__version__ = "0.1.0"


def _numba_cache_dir() -> None:
    """Keep compiled kernels on disk so the second run skips the 5-7 s compile, even when installed read-only."""
    if "NUMBA_CACHE_DIR" not in os.environ and not os.access(Path(__file__).parent, os.W_OK):
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        os.environ["NUMBA_CACHE_DIR"] = str(base / "ringscope" / "numba")


_numba_cache_dir()

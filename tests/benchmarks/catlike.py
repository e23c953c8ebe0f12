"""Reading a file the way `cat` does, the yardstick the read path is measured against."""

from __future__ import annotations

import time
from pathlib import Path

CAT_BLOCK = 128 << 10  # GNU cat's read size (coreutils 9)


def read_like_cat(path: Path, block: bytearray) -> float:
    """Seconds to read the file in cat-sized read() calls into one reused buffer."""
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(block):
            pass
    return time.perf_counter() - t0

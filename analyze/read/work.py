"""What the two ways of handing out scans share, the local process pool (analyze.read.engine) and a Dask cluster
(analyze.read.cluster): the progress callback and the order streams are handed out in. Apart from both, so the
engine can reach the cluster without the cluster importing the engine back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

Progress = Callable[[Path, int], None]  # called as each stream or piece of one is read, with its bytes


def biggest_first(sizes: list[int]) -> list[int]:
    """Stream indices by size, largest first, so one large stream does not start last and stretch the wall time."""
    return sorted(range(len(sizes)), key=lambda i: -sizes[i])

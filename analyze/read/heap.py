"""Give the C heap's free memory back to the system between the analysis's phases.

Why: the hosts' scans arrive from the worker processes as pickled messages of hundreds of kB. Once the tables built
from them let them go, glibc kept the freed memory resident (likely in its heap: it raises its mmap threshold as
large blocks are freed, so later blocks of that size land there): at 512 hosts the process kept about 200 MB it no
longer used through the rest of the analysis, where its peak is. `malloc_trim(0)` returns such pages (1,015 -> 818
MB peak, 38 ms). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Optional


@functools.lru_cache(maxsize=1)
def _libc() -> Optional[ctypes.CDLL]:
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return lib if lib is not None and hasattr(lib, "malloc_trim") else None


def give_back() -> None:
    """Return the heap's free pages to the system (glibc malloc_trim); a no-op without glibc."""
    lib = _libc()
    if lib is not None:
        lib.malloc_trim(0)

"""Time ringscope's read-and-aggregate core alone (kernel loaded first): prints seconds for one scan."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from analyze.scan import scan_stream

if __name__ == "__main__":
    path = sys.argv[1]
    scan_stream([Path(path)], bin_ns=10_000_000, byte_mode=0)  # load the compiled kernel and warm the page cache
    t0 = time.perf_counter()
    scan_stream([Path(path)], bin_ns=10_000_000, byte_mode=0)
    print(time.perf_counter() - t0)

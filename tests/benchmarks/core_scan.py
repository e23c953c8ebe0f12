"""Time ringscope's read-and-aggregate core alone (kernel loaded first): prints seconds for one scan.

    core_scan.py PATH [WORKERS]   with WORKERS > 1 the file is read in pieces by a local pool (its start included)
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as `ringscope analyze` does

from analyze.engine import ScanOptions, scan_streams  # noqa: E402

if __name__ == "__main__":
    path, workers = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1
    opts = ScanOptions(bin_ns=10_000_000, byte_mode=0)
    scan_streams([[path]], opts, workers=1)  # load the compiled kernel and warm the page cache
    t0 = time.perf_counter()
    scan_streams([[path]], opts, workers=workers)
    print(time.perf_counter() - t0)

"""Time the reading phase alone over several hosts' files with 1 and 2 local workers (imports excluded)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as `ringscope analyze` does

from analyze.engine import ScanOptions, scan_streams  # noqa: E402

if __name__ == "__main__":
    streams = [[Path(p)] for p in sys.argv[1:]]
    opts = ScanOptions(bin_ns=10_000_000, byte_mode=0)
    scan_streams(streams[:1], opts, workers=1)  # load the kernels, warm the page cache
    times = {}
    for workers in (1, 2):
        t0 = time.perf_counter()
        scan_streams(streams, opts, workers=workers)
        times[workers] = time.perf_counter() - t0
    print(f"1 worker {times[1]:.2f} s, 2 workers {times[2]:.2f} s, speed-up {times[1] / times[2]:.2f}x")

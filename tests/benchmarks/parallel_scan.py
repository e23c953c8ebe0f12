"""Time the reading phase alone over several hosts' files with 1 and 2 local workers (imports excluded).

parallel_scan.py REPEAT FILE...   medians of REPEAT runs of each, alternated (one run of each varied
                                  by a third on this VM)
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as `ringscope analyze` does

from analyze.read.engine import ScanOptions, scan_hosts  # noqa: E402

if __name__ == "__main__":
    repeat, streams = int(sys.argv[1]), [[Path(p)] for p in sys.argv[2:]]
    opts = ScanOptions(bin_ns=10_000_000, byte_mode=0)
    scan_hosts(streams[:1], opts, workers=1)  # load the kernels, warm the page cache
    times: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(repeat):
        for workers in (1, 2):
            t0 = time.perf_counter()
            scan_hosts(streams, opts, workers=workers)
            times[workers].append(time.perf_counter() - t0)
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"1 worker {one:.2f} s, 2 workers {two:.2f} s, speed-up {one / two:.2f}x (medians of {repeat})")

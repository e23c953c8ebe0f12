"""Time ringscope's read-and-aggregate core alone (kernel loaded first).

    core_scan.py PATH [WORKERS]   seconds for one scan; with WORKERS > 1 the file is read in pieces by a
                                  local pool (its start included)
    core_scan.py PATH --paired N  N pairs, one after the other in this process: the file read like `cat`
                                  (128 KiB read() calls), then scanned. Prints the median of the N ratios
                                  scan/read, their range and the median read seconds.

Why pairs: this VM's vCPUs change speed by up to 1.5x for seconds at a time (another tenant on the
same physical core), so a median of `cat` runs and a median of scans taken minutes apart can each land
in a different state; a read and the scan right after it share one.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as `ringscope analyze` does

from analyze.read.engine import ScanOptions, scan_hosts  # noqa: E402
from tests.benchmarks.catlike import CAT_BLOCK, read_like_cat  # noqa: E402


def scan_once(path: Path, opts: ScanOptions, workers: int) -> float:
    t0 = time.perf_counter()
    scan_hosts([[path]], opts, workers=workers)
    return time.perf_counter() - t0


if __name__ == "__main__":
    path, opts = Path(sys.argv[1]), ScanOptions(bin_ns=10_000_000, byte_mode=0)
    scan_hosts([[path]], opts, workers=1)  # load the compiled kernel and warm the page cache
    if len(sys.argv) > 3 and sys.argv[2] == "--paired":
        block = bytearray(CAT_BLOCK)
        pairs = [(read_like_cat(path, block), scan_once(path, opts, 1)) for _ in range(int(sys.argv[3]))]
        ratios = [scan / read for read, scan in pairs]
        print(statistics.median(ratios), min(ratios), max(ratios), statistics.median(r for r, _ in pairs))
    else:
        print(scan_once(path, opts, int(sys.argv[2]) if len(sys.argv) > 2 else 1))

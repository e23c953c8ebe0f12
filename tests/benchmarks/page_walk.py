"""Time mapping a capture's pages alone, as the scan maps and drops them: prints seconds.

    page_walk.py PATH

The part of the read-and-aggregate core that is page-table work, not decoding. It depends on the page
cache more than on ringscope: a file written in small pieces (tcpdump's 4 KB writes) is cached in 4 KB
pages, each mapped on its own; one read back from disk, or written in large blocks like the benchmark's
generator writes, is cached in large folios, mapped 2 MB at a time (0.06 s against 0.004 s for 510 MB
on the 2-core VM).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from analyze.read.formats import open_capture

WINDOW = 48 << 20  # about the bytes of the scan's 512 k-record window of headers-only records
PAGE = 4096

if __name__ == "__main__":
    with open_capture(Path(sys.argv[1])) as cap:
        buf, dropped = cap.buffer, 0
        t0 = time.perf_counter()
        for lo in range(0, len(buf), WINDOW):
            int(buf[lo : lo + WINDOW : PAGE].sum())  # one byte of every page: maps it, reads nothing else
            dropped = cap.release(dropped, min(lo + WINDOW, len(buf)))
        print(time.perf_counter() - t0)
        del buf

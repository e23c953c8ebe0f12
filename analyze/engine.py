"""Run the per-file scan over many files: in this process, or in a local process pool.

The unit of work is one file (`analyze.scan.scan_file`), a pure function from a path and options
to a small FileScan, so the same call can be shipped to any executor (a Dask cluster included).
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from analyze.scan import FileScan, scan_file

POOL_MIN_BYTES = 64 << 20  # below this, starting workers costs more than it saves

Progress = Callable[[Path, int], None]  # called after each file with its size in bytes


@dataclass(frozen=True)
class ScanOptions:
    """What every file scan needs to know."""

    bin_ns: int
    byte_mode: int
    mtu: int = 1500


def default_workers() -> int:
    """One worker per core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def scan_files(files: list[Path], opts: ScanOptions, workers: Optional[int] = None,
               progress: Optional[Progress] = None) -> dict[Path, FileScan]:
    """Scan every file once; results keyed by path. FileError from any file propagates."""
    sizes = {f: _size(f) for f in files}
    n = workers if workers is not None else default_workers()
    n = max(1, min(n, len(files)))
    if n == 1 or sum(sizes.values()) < POOL_MIN_BYTES:
        out = {}
        for f in files:
            out[f] = scan_file(f, bin_ns=opts.bin_ns, byte_mode=opts.byte_mode, mtu=opts.mtu)
            if progress:
                progress(f, sizes[f])
        return out
    out = {}
    # biggest first so one large file does not start last and stretch the wall time
    ordered = sorted(files, key=lambda f: -sizes[f])
    with ProcessPoolExecutor(max_workers=n) as pool:
        futures = {pool.submit(scan_file, f, bin_ns=opts.bin_ns, byte_mode=opts.byte_mode, mtu=opts.mtu): f
                   for f in ordered}
        for fut in as_completed(futures):
            f = futures[fut]
            out[f] = fut.result()
            if progress:
                progress(f, sizes[f])
    return out


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0

"""Run the stream scans (one per host) in this process, in a local process pool, or on a Dask cluster.

The unit of work is one host's capture stream (`analyze.read.fold.scan_host`): a pure function from
paths and options to a small StreamScan, so the same call can be shipped to any executor
(`analyze.read.cluster` ships it to Dask). A host's rotated files are read in time order so TCP state
carries across rotation points; hosts are read in parallel. When there are fewer hosts than a local
pool can use, big streams are cut into pieces read at once and joined exactly (`analyze.read.pieces`); a
stream that cannot be cut still goes to a worker, so the caller imports its table code meanwhile.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from analyze.read.compiled import kernels
from analyze.read import pieces
from analyze.read.fold import scan_host
from analyze.read.formats import scan_bytes
from analyze.read.scan import StreamScan, scan_range
from analyze.read.work import Progress, biggest_first

POOL_MIN_BYTES = 64 << 20  # below this, starting workers costs more than it saves
# A host's stream costs a worker about as much as reading this many bytes more (2 ms here: opening its files,
# folding its flows and handing back its series cells; 128 hosts' 2 MB captures took a worker 0.31 s).
STREAM_COST_BYTES = 8 << 20


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


def scan_hosts(
    streams: list[list[Path]],
    opts: ScanOptions,
    workers: Optional[int] = None,
    progress: Optional[Progress] = None,
    scheduler: Optional[str] = None,
) -> list[StreamScan]:
    """Scan every stream (a host's files) once, in order of `streams`. FileError from any file propagates.

    With `scheduler` (a Dask address) the cluster's workers scan and `workers` does not apply;
    analyze.read.cluster.ClusterError says why the cluster could not.
    """
    return start_host_scans(streams, opts, workers, progress, scheduler)()


def start_host_scans(
    streams: list[list[Path]],
    opts: ScanOptions,
    workers: Optional[int] = None,
    progress: Optional[Progress] = None,
    scheduler: Optional[str] = None,
    busy_bytes: int = 0,
) -> Callable[[], list[StreamScan]]:
    """Set the scans going and return the call that collects them, as scan_hosts would return them.

    A local pool starts reading at once, so the caller can do other serial work meanwhile (the CLI
    imports pandas and the table code); in-process and Dask scans run when collected. `busy_bytes`: about
    how much one worker reads while the caller is busy with that work. The pool gets one worker per that
    much work (the bytes, plus STREAM_COST_BYTES a stream), up to `workers`: one more would finish no
    sooner than the caller, and on a machine with few cores it would take CPU from the caller's work.
    """
    sizes = [sum(scan_bytes(f) for f in s) for s in streams]
    kwargs = dict(bin_ns=opts.bin_ns, byte_mode=opts.byte_mode, mtu=opts.mtu)
    if scheduler is not None:
        from analyze.read.cluster import scan_hosts_on_cluster

        return lambda: scan_hosts_on_cluster(scheduler, streams, sizes, kwargs, progress)
    n = max(1, workers if workers is not None else default_workers())
    if n == 1 or sum(sizes) < POOL_MIN_BYTES:
        return lambda: _scan_here(streams, sizes, kwargs, progress)
    n = workers_beside(sum(sizes), len(streams), busy_bytes, n)
    plans = pieces.plan(streams, sizes, n) if n > 1 else [None] * len(streams)
    tasks = [(i, -1, streams[i][0], sizes[i]) for i, p in enumerate(plans) if p is None]
    tasks += [(i, j, piece.path, piece.size) for i, p in enumerate(plans) if p for j, piece in enumerate(p)]
    # even one task goes to a worker process: the caller imports pandas and the table code on the other core
    n = min(n, len(tasks))
    kernels()  # loaded here, so the forked workers inherit them instead of each loading them
    # fork (not Python 3.14's forkserver default): the workers inherit the loaded kernels and start at once
    pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork"))
    futures = {}
    # each future puts itself here when done: waiting on the queue costs the same per future at any count, where
    # wait(FIRST_COMPLETED) in a loop hooked a waiter onto every pending future per call (125,000 at 512 hosts)
    finished: queue.SimpleQueue[Future[StreamScan]] = queue.SimpleQueue()
    for t in biggest_first([t[3] for t in tasks]):
        i, j, path, size = tasks[t]
        if j < 0:
            fut = pool.submit(scan_host, streams[i], **kwargs)
        else:
            piece = plans[i][j]  # type: ignore[index]
            fut = pool.submit(scan_range, piece.path, piece.start, piece.end, **kwargs)
        futures[fut] = tasks[t]
        fut.add_done_callback(finished.put)

    def collect() -> list[StreamScan]:
        out: list[Optional[StreamScan]] = [None] * len(streams)
        parts: dict[int, list[Optional[StreamScan]]] = {i: [None] * len(p) for i, p in enumerate(plans) if p}
        try:
            while futures:
                # popped: a done future holds its scan, and this map lives as long as the Reading, so the
                # received buffers of every host (300 MB at 512 hosts) outlived the analysis that copied them
                fut = finished.get()
                i, j, path, size = futures.pop(fut)
                scan = fut.result()
                del fut
                if progress and size:
                    progress(path, size)
                if j < 0:
                    out[i] = scan
                    continue
                parts[i][j] = scan
                if not all(parts[i]):
                    continue
                out[i] = pieces.join(plans[i], parts[i])  # type: ignore[arg-type]
                if out[i] is None:  # a seam does not hold: read the stream again, whole
                    again = pool.submit(scan_host, streams[i], **kwargs)
                    futures[again] = (i, -1, path, 0)
                    again.add_done_callback(finished.put)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return out  # type: ignore[return-value]

    return collect


# What one worker reads while the calling process imports pandas and the table code (0.25-0.3 s here, at
# 4-4.6 GB/s a core): up to this much work goes to one worker (workers_beside), when the caller does that import.
TABLE_IMPORT_BYTES = 1 << 30


def workers_beside(total_bytes: int, streams: int, busy_bytes: int, most: int) -> int:
    """Workers to read `streams` streams of `total_bytes` while the caller is busy for about as long as one
    worker reads `busy_bytes`.

    The run ends when both the reading and the caller's work are done. When the reading takes less, one
    worker finishes first anyway: a second only adds the pieces' hand-offs and, on 2 cores, shares a core
    with the caller (a 5 M-packet pcap: 0.43-0.48 s whole process with one worker, 0.49-0.51 s with two).
    Each stream also costs what reading STREAM_COST_BYTES would: opening, folding and handing it back.
    """
    if busy_bytes <= 0:
        return most
    work = total_bytes + streams * STREAM_COST_BYTES
    return max(1, min(most, -(-work // busy_bytes)))


def _scan_here(
    streams: list[list[Path]], sizes: list[int], kwargs: dict[str, int], progress: Optional[Progress]
) -> list[StreamScan]:
    out = []
    for files, size in zip(streams, sizes):
        out.append(scan_host(files, **kwargs))
        if progress:
            progress(files[0], size)
    return out

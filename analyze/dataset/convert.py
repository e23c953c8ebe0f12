"""`ringscope convert`: read a run's captures once and write them as a Parquet dataset (analyze.dataset.manifest).

One task per host: it scans the host's files as `analyze` does, with the kernel also writing each IP packet's
header fields, which go to the host's packets file a row group at a time, so a worker holds one block of rows
(ROWS_PER_FLUSH) however large the capture. The task hands back the host's scan (flows, series cells, file
health: small), and the caller writes those tables and, last, the manifest. Tasks run in this process, in a
local process pool (one host per worker) or on a Dask cluster, whose workers must see the captures and OUT at
the same absolute paths.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow.parquet as pq

from analyze import __version__
from analyze.dataset import columns
from analyze.dataset.manifest import FORMAT, MANIFEST, PART, SCHEMA, DatasetError, markers_path, partition
from analyze.read import layouts as L
from analyze.read.compiled import kernels
from analyze.read.engine import default_workers
from analyze.read.work import Progress, biggest_first
from analyze.read.fold import scan_host
from analyze.read.formats import scan_bytes
from analyze.read.inputs import HostInput, discover
from analyze.read.bin_choice import BASE_BIN_NS
from analyze.read.reading import ReadOptions, common_mtu
from analyze.read.scan import StreamScan

COMPRESSION = "zstd"  # headers-only packet columns shrink 4-6x; DuckDB, Polars and pandas all read it
ROW_KINDS = [L.KIND_TCP, L.KIND_UDP, L.KIND_ICMP, L.KIND_OTHER_IP, L.KIND_FRAGMENT, L.KIND_ROCE]  # kinds with a row


@dataclass
class Converted:
    """What a conversion wrote."""

    out: Path
    hosts: int
    packets: int
    records: int
    bytes_written: int


class PacketWriter:
    """The packet-row sink of one host's scan: each block the kernel fills becomes a row group of one file.

    The block becomes Arrow columns at once (the kernel reuses its buffer), and is written by a thread while
    the kernel reads on: Parquet encoding and compression release the GIL, and take as long as the reading.
    At most one block waits to be written, so memory holds two blocks, however large the capture.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.rows = 0
        self._writer = pq.ParquetWriter(
            path, columns.PACKET_SCHEMA, compression=COMPRESSION, use_dictionary=list(columns.ADDRESS_COLUMNS)
        )
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ringscope-parquet")
        self._pending: Optional[Future[None]] = None

    def __call__(self, rows: np.ndarray) -> None:
        table = columns.packets_table(rows)
        self._wait()
        self._pending = self._thread.submit(self._writer.write_table, table)
        self.rows += len(rows)

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()  # a write's error (a full disk) is raised here, in the scan
            self._pending = None

    def close(self) -> None:
        try:
            self._wait()
        finally:
            self._thread.shutdown()
            self._writer.close()


def convert_host(
    files: list[Path], *, out: str, host_of: dict[str, str], bin_ns: int, byte_mode: int, mtu: int
) -> StreamScan:
    """Scan one host's files (folded as analyze folds them) and write its packets; the task a worker runs.

    The host is found by its first file's absolute path in HOST_OF (a Dask task is handed absolute paths).
    """
    host = host_of[str(Path(files[0]).absolute())]
    writer = PacketWriter(Path(out) / partition("packets", host) / PART)
    try:
        return scan_host(files, bin_ns=bin_ns, byte_mode=byte_mode, mtu=mtu, rows=writer)
    finally:
        writer.close()


def convert(
    paths: Sequence[str | Path],
    out: Path,
    options: ReadOptions = ReadOptions(),
    *,
    progress: Optional[Progress] = None,
) -> Converted:
    """Write the captures under PATHS as a dataset in OUT (a new or empty folder), read as OPTIONS say (the bin
    BASE_BIN_NS and IP bytes unless given: the width an analysis reads at before it chooses its own).

    Raises analyze.read.formats.FileError (DatasetError for OUT) for input or output that cannot be used, and
    analyze.read.cluster.ClusterError when the Dask cluster cannot do the work.
    """
    bin_ns = BASE_BIN_NS if options.bin_ns is None else options.bin_ns
    byte_mode = options.byte_mode or "ip"
    workers, scheduler = options.workers, options.scheduler
    run_input = discover([Path(p) for p in paths])
    _claim(out)
    streams = [h.files for h in run_input.hosts]
    host_of = {str(Path(h.files[0]).absolute()): h.name for h in run_input.hosts}
    kwargs: dict[str, Any] = dict(
        out=str(out.absolute()),
        host_of=host_of,
        bin_ns=bin_ns,
        byte_mode=L.BYTE_MODES[byte_mode],
        mtu=common_mtu(run_input),
    )
    sizes = [sum(scan_bytes(f) for f in s) for s in streams]
    try:
        if scheduler is not None:
            from analyze.read.cluster import scan_hosts_on_cluster

            scans = scan_hosts_on_cluster(scheduler, streams, sizes, kwargs, progress, task=convert_host)
        else:
            scans = _run_here_or_pool(streams, sizes, kwargs, workers, progress)
        entries = [_write_host(out, h, scan, bin_ns) for h, scan in zip(run_input.hosts, scans)]
    except BaseException:  # OUT was empty: what a failed or interrupted conversion wrote is taken away
        for part in out.iterdir():
            shutil.rmtree(part) if part.is_dir() else part.unlink()
        raise
    manifest = {
        "format": FORMAT,
        "schema": SCHEMA,
        "ringscope": __version__,
        "bin_ns": bin_ns,
        "byte_mode": byte_mode,
        "mtu": kwargs["mtu"],
        "source": [str(Path(p).absolute()) for p in paths],
        "root": str(run_input.root.absolute()) if run_input.root else None,
        "run": run_input.run,
        "warnings": run_input.warnings,
        "hosts": entries,
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    tmp.replace(out / MANIFEST)  # last: a folder without it is a conversion that did not finish
    written = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return Converted(
        out=out,
        hosts=len(entries),
        packets=sum(e["packets"] for e in entries),
        records=sum(s.records for s in scans),
        bytes_written=written,
    )


def _claim(out: Path) -> None:
    """Make OUT, refusing a folder that already holds something (a dataset is written whole, never merged)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DatasetError(f"{out}: offset 0: exists and is not an empty folder; name a new folder for the dataset")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"{out}: offset 0: cannot make the dataset folder ({exc.strerror})") from None


def _run_here_or_pool(
    streams: list[list[Path]],
    sizes: list[int],
    kwargs: dict[str, Any],
    workers: Optional[int],
    progress: Optional[Progress],
) -> list[StreamScan]:
    """A host per task: in this process for one worker or one host, else a forked pool, biggest host first."""
    n = min(len(streams), max(1, workers if workers is not None else default_workers()))
    out: list[Optional[StreamScan]] = [None] * len(streams)
    if n == 1:
        for i, files in enumerate(streams):
            out[i] = convert_host(files, **kwargs)
            if progress:
                progress(files[0], sizes[i])
        return out  # type: ignore[return-value]
    kernels()  # loaded once here; the forked workers inherit it
    pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork"))
    try:
        futures = {pool.submit(convert_host, streams[i], **kwargs): i for i in biggest_first(sizes)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = futures[fut]
                out[i] = fut.result()
                if progress:
                    progress(streams[i][0], sizes[i])
    finally:  # after a failure, hosts not started yet are not converted for nothing
        pool.shutdown(wait=True, cancel_futures=True)
    return out  # type: ignore[return-value]


def _write_host(out: Path, h: HostInput, scan: StreamScan, bin_ns: int) -> dict[str, Any]:
    """Write a host's flows, series cells, samples and file health, copy its markers; its manifest entry."""
    tables = {
        "flows": columns.flows_table(scan),
        "flow_bins": columns.flow_bins_table(scan, bin_ns),
        "samples": columns.samples_table(scan),
        "files": columns.files_table(scan.files),
    }
    for name, table in tables.items():
        folder = out / partition(name, h.name)
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / PART, compression=COMPRESSION, use_dictionary=list(columns.ADDRESS_COLUMNS))
    markers = None
    if h.markers is not None:
        markers = markers_path(h.name)
        (out / markers).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(h.markers, out / markers)
    packets = pq.read_metadata(out / partition("packets", h.name) / PART).num_rows
    ip_records = sum(int(f.kinds[k]) for f in scan.files for k in ROW_KINDS)
    if packets != ip_records:  # the kernel writes a row for exactly these kinds: anything else is a lost row
        raise DatasetError(f"{out}: offset 0: {h.name}: wrote {packets} packet rows for {ip_records} IP records")
    return {
        "name": h.name,
        "files": [str(Path(f).absolute()) for f in h.files],
        "meta": h.meta.doc if h.meta is not None else None,
        "markers": markers,
        "packets": packets,
        "records": scan.records,
        "joinable": scan.joinable,
        "folded": scan.folded,
    }

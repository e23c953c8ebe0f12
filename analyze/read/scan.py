"""Scan a capture stream into per-flow aggregates and sparse series cells (the unit of parallel work).

A stream is one host's files (a tcpdump rotation set); each file is memory-mapped and handed to the
compiled kernel in bounded windows of records; pages
already read are dropped with madvise so resident memory stays flat however large the file is.
The result, a StreamScan, holds only small numpy arrays, so it pickles cheaply to a worker pool or a
Dask cluster.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from analyze.read import layouts as L
from analyze.read.formats import CaptureFormat, FileError, first_timestamp_ns, open_capture
from analyze.read import inflate
from analyze.read.compiled import kernels
from analyze.read.resync import next_valid_record

RECORDS_PER_CALL = 1 << 19  # ~50 MB of headers-only records: the most file pages held at once
INITIAL_FLOWS = 1 << 10
# Series cells the kernel writes before Python moves them out: 1.3 MB of buffers per stream. A 5 M-packet ring
# capture has 20 k cells; with 1 M per stream the zeroed buffers (20 MB) cost more than reading a 20 k-packet
# file (128 such hosts read in 0.163 s, 0.105 s with 64 k).
CELLS_PER_FLUSH = 1 << 16
SAMPLES_PER_FLUSH = 1 << 14
ROWS_PER_FLUSH = 1 << 17  # packet rows (convert only) handed to the sink at a time: 17 MB of int64

RowSink = Callable[[np.ndarray], None]  # takes a block of packet rows (int64[n, layouts.N_ROW]), copying what it keeps


@dataclass
class FileHealth:
    """What one capture file was and how healthy: the per-file part of a stream scan."""

    path: str
    format: str
    linktypes: list[str]
    file_bytes: int
    records: int
    captured_bytes: int
    first_ns: int
    last_ns: int
    kinds: np.ndarray  # int64[N_KINDS]
    warnings: list[str] = field(default_factory=list)
    jumps: np.ndarray = field(default_factory=lambda: np.zeros((0, L.N_JUMP), dtype=np.int64))  # layouts.JUMP_*
    jumps_seen: int = 0  # jumps in the file, listed in `jumps` or not (MAX_JUMPS)


@dataclass
class StreamScan:
    """One capture stream (a host's rotation set, read in time order): flow keys, aggregates, cells."""

    files: list[FileHealth]
    keys: np.ndarray  # uint64[n, 5]: src hi/lo, dst hi/lo, (sport<<24 | dport<<8 | proto)
    agg: np.ndarray  # int64[n, N_AGG]
    cell_flow: np.ndarray  # int32
    cell_bin: np.ndarray  # int64, absolute bin index (ts // bin_ns)
    cell_bytes: np.ndarray  # int64
    samples: np.ndarray  # int64[m, N_SAMPLE]: sequence samples (layouts.SAMPLE_*), their flow = row in keys
    joinable: bool = True  # a piece read as carried state would have read it, seams aside (see scan_range)
    folded: bool = False  # flows and cells already as analyze.read.fold.merge_host folds them (fold.scan_host)

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)


class _Tables:
    """Growable kernel tables; grown between kernel calls, never inside one."""

    def __init__(self, rows: Optional[RowSink] = None) -> None:
        self.sink = rows
        self.rows = np.zeros((ROWS_PER_FLUSH if rows else 0, L.N_ROW), dtype=np.int64)  # 0 rows: none written
        self.keys = np.zeros((INITIAL_FLOWS, 5), dtype=np.uint64)
        self.agg = np.zeros((INITIAL_FLOWS, L.N_AGG), dtype=np.int64)
        self.slots = np.full(INITIAL_FLOWS * 4, -1, dtype=np.int64)
        self.cell_flow = np.zeros(CELLS_PER_FLUSH, dtype=np.int32)
        self.cell_bin = np.zeros(CELLS_PER_FLUSH, dtype=np.int64)
        self.cell_bytes = np.zeros(CELLS_PER_FLUSH, dtype=np.int64)
        self.samples = np.zeros((SAMPLES_PER_FLUSH, L.N_SAMPLE), dtype=np.int64)
        self.flushed_samples: list[np.ndarray] = []
        self.kinds = np.zeros(L.N_KINDS, dtype=np.int64)
        self.frag_keys = np.zeros((4096, 3), dtype=np.uint64)
        self.frag_flow = np.full(4096, -1, dtype=np.int64)
        self.frag_pend = np.zeros((4096, 5), dtype=np.int64)
        self.frag_pend[:, 3] = -1
        self.st = np.zeros(L.N_ST, dtype=np.int64)
        self.jumps = np.zeros((L.MAX_JUMPS, L.N_JUMP), dtype=np.int64)
        self.flushed: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def kernel_tables(self) -> tuple[np.ndarray, ...]:
        """The tables every walker takes after its own arguments, in layouts._KERNEL_TABLES' order (asked
        anew for each call: growing replaces the flow arrays)."""
        return (
            self.keys,
            self.slots,
            self.agg,
            self.cell_flow,
            self.cell_bin,
            self.cell_bytes,
            self.samples,
            self.kinds,
            self.frag_keys,
            self.frag_flow,
            self.frag_pend,
            self.st,
            self.jumps,
            self.rows,
        )

    def grow_flows(self) -> None:
        """Quadruple the flow table and rebuild the hash slots."""
        n = int(self.st[L.ST_NFLOWS])
        cap = self.keys.shape[0] * 4
        keys = np.zeros((cap, 5), dtype=np.uint64)
        keys[:n] = self.keys[:n]
        agg = np.zeros((cap, L.N_AGG), dtype=np.int64)
        agg[:n] = self.agg[:n]
        self.keys, self.agg = keys, agg
        self.slots = np.full(cap * 4, -1, dtype=np.int64)
        kernels().rehash(self.keys, n, self.slots)

    def flush_cells(self) -> None:
        """Move the kernel's cells out so the cell buffer can be reused."""
        n = int(self.st[L.ST_NCELLS])
        if n:
            self.flushed.append((self.cell_flow[:n].copy(), self.cell_bin[:n].copy(), self.cell_bytes[:n].copy()))
        self.st[L.ST_NCELLS] = 0

    def flush_rows(self) -> None:
        """Hand the packet rows written so far to the sink, so the rows buffer can be reused."""
        n = int(self.st[L.ST_NROWS])
        if n and self.sink is not None:
            self.sink(self.rows[:n])
        self.st[L.ST_NROWS] = 0

    def flush_samples(self) -> None:
        """Move the kernel's sequence samples out so the buffer can be reused."""
        n = int(self.st[L.ST_NSAMPLES])
        if n:
            self.flushed_samples.append(self.samples[:n].copy())
        self.st[L.ST_NSAMPLES] = 0

    def finish_samples(self) -> np.ndarray:
        self.flush_samples()
        parts = self.flushed_samples
        return np.concatenate(parts) if parts else np.zeros((0, L.N_SAMPLE), dtype=np.int64)

    def finish_cells(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Emit each flow's open bin and return all cells."""
        self.flush_cells()
        n = int(self.st[L.ST_NFLOWS])
        open_ = self.agg[:n, L.AGG_CUR_BIN] >= 0
        idx = np.nonzero(open_)[0]
        self.flushed.append(
            (idx.astype(np.int32), self.agg[idx, L.AGG_CUR_BIN].copy(), self.agg[idx, L.AGG_CUR_BYTES].copy())
        )
        parts = self.flushed
        return (
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
        )


def scan_stream(
    paths: list[Path], *, bin_ns: int, byte_mode: int, mtu: int = 1500, rows: Optional[RowSink] = None
) -> StreamScan:
    """Read a host's files one after another in first-packet order, carrying flow and TCP sequence state.

    Carrying the state is what makes rotation invisible: a retransmission just after a rotation point
    is still recognised, and a flow's series continues across files. With `rows`, every IP packet's header
    fields also go to that sink, in capture order, in blocks. Raises FileError on unreadable input.
    """
    t = _Tables(rows)
    files = []
    for p in sorted(paths, key=time_order) if len(paths) > 1 else paths:  # one file: no need to peek at its time
        with open_capture(Path(p)) as cap:
            files.append(_scan_open(cap, t, bin_ns=bin_ns, byte_mode=byte_mode, mtu=mtu)[0])
    t.flush_rows()
    return _stream_scan(t, files)


def scan_range(
    path: Path, start: int | None = None, end: int | None = None, *, bin_ns: int, byte_mode: int, mtu: int = 1500
) -> StreamScan:
    """Scan the records of one capture file in bytes [start, end) (default: all of it) with fresh state.

    One piece of a stream split for parallel reading: analyze.read.pieces chose start and end at record
    boundaries and joins the pieces, checking at each seam that fresh state gave what carried state would.
    The scan is not joinable when the piece did not end on its cut (a damaged record hid it, or the file
    shrank since), or when it resynced after damage mid-file: the search for the next record trusts
    timestamps near those read so far, and a piece has read fewer.
    """
    t = _Tables()
    with open_capture(Path(path)) as cap:
        size = len(cap.buffer)
        stop = None if end is None else min(end, size)
        health, status, resynced = _scan_open(
            cap, t, bin_ns=bin_ns, byte_mode=byte_mode, mtu=mtu, start=start, end=stop
        )
        mid_file = start is not None and start > cap.data_offset
    scan = _stream_scan(t, [health])
    ended_on_cut = end is None or end == size or (end < size and status == L.STATUS_END)
    scan.joinable = ended_on_cut and not (resynced and mid_file)
    return scan


class Follow:
    """A host's classic pcap files read as tcpdump writes them: each poll scans only the records written since
    the last (a record still being written waits for the next poll), with flow and TCP state carried across
    polls and rotated files. Each poll hands its series cells to the caller and drops its samples, so the
    follower's memory grows with the flows, not with time; the flow table's cumulative counters are what a live
    view compares between polls, and the cells are what it keeps of the series."""

    def __init__(self, *, bin_ns: int, byte_mode: int, mtu: int = 1500) -> None:
        self._t = _Tables()
        self._options = dict(bin_ns=bin_ns, byte_mode=byte_mode, mtu=mtu)
        self._next: dict[Path, int] = {}  # per file, the offset of its first record not read yet
        self._order: dict[Path, tuple[int, str]] = {}  # per file with a first record, its time_order
        self._size: dict[Path, int] = {}  # per file, its size at the last poll

    def poll(self, paths: list[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Read what PATHS (a host's files, any order) hold beyond what earlier polls read; the series cells that
        closed meanwhile (flow row, bin, bytes: a flow's bin closes when its next packet falls in a later one).
        A file without its header yet is left for later; pcapng is not followed; a file tcpdump overwrote (a -W
        ring reusing its names) is read again from its start."""
        for path in paths:
            self._note_reuse(path)
        for path in sorted(paths, key=self._time_order):
            try:
                size = path.stat().st_size
                if size <= self._next.get(path, 0):
                    continue
                with open_capture(path) as cap:
                    if cap.inflated:  # a finished file of a rotation set (tcpdump -z gzip): read once, whole
                        _scan_open(cap, self._t, **self._options)
                        self._next[path] = size
                    elif cap.kind == "pcap":  # pcapng keeps its interfaces at its start: not read from a middle
                        _scan_open(cap, self._t, start=self._next.get(path), **self._options)
                        self._next[path] = int(self._t.st[L.ST_POS])
            except (OSError, FileError):
                continue
        t = self._t
        t.flush_cells()
        parts, t.flushed, t.flushed_samples = t.flushed, [], []
        t.st[L.ST_NSAMPLES] = 0
        if not parts:
            return np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64)
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]

    def _note_reuse(self, path: Path) -> None:
        """Forget what was read of PATH when tcpdump has begun it anew since the last poll: it shrank, or it grew
        and its first packet is another. Only a file whose size changed is opened (the one being written)."""
        try:
            size = path.stat().st_size
        except OSError:
            return
        seen, self._size[path] = self._size.get(path), size
        if seen is None or size == seen:
            return
        known = self._order.get(path)
        if size < seen or (known is not None and time_order(path)[0] not in (known[0], np.iinfo(np.int64).max)):
            self._next.pop(path, None)
            self._order.pop(path, None)

    def _time_order(self, path: Path) -> tuple[int, str]:
        """time_order, kept once a file has its first record (until tcpdump overwrites the file), so a poll does
        not open every file of a long rotation set again."""
        known = self._order.get(path)
        if known is None:
            known = time_order(path)
            if known[0] != np.iinfo(np.int64).max:
                self._order[path] = known
        return known

    def flows(self) -> tuple[np.ndarray, np.ndarray]:
        """Flow keys (uint64[n, 5], as StreamScan.keys) and each flow's IP bytes so far."""
        n = int(self._t.st[L.ST_NFLOWS])
        return self._t.keys[:n].copy(), self._t.agg[:n, L.AGG_IP_BYTES].copy()

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per flow row, its packets and its re-sent bytes so far: the capture's health and the loss a live
        metrics endpoint reports."""
        n = int(self._t.st[L.ST_NFLOWS])
        return self._t.agg[:n, L.AGG_PACKETS].copy(), self._t.agg[:n, L.AGG_RETRANS_BYTES].copy()

    def openings(self) -> tuple[np.ndarray, np.ndarray]:
        """Per flow row, its first packet's time and whether its SYN was seen (it opened while captured): what
        tells a capture's jobs apart (analyze.collective.jobs)."""
        n = int(self._t.st[L.ST_NFLOWS])
        return self._t.agg[:n, L.AGG_FIRST_NS].copy(), self._t.agg[:n, L.AGG_WSCALE] >= 0


def _stream_scan(t: "_Tables", files: list[FileHealth]) -> StreamScan:
    n = int(t.st[L.ST_NFLOWS])
    cell_flow, cell_bin, cell_bytes = t.finish_cells()
    return StreamScan(
        files=files,
        keys=t.keys[:n].copy(),
        agg=t.agg[:n].copy(),
        cell_flow=cell_flow,
        cell_bin=cell_bin,
        cell_bytes=cell_bytes,
        samples=t.finish_samples(),
    )


def time_order(path: Path) -> tuple[int, str]:
    """Sort key putting a host's rotated files in capture order (first packet's time, then name)."""
    ts = first_timestamp_ns(path)
    return (ts if ts is not None else np.iinfo(np.int64).max, str(path))


def _scan_open(
    cap: CaptureFormat,
    t: "_Tables",
    *,
    bin_ns: int,
    byte_mode: int,
    mtu: int,
    start: int | None = None,
    end: int | None = None,
) -> tuple[FileHealth, int, bool]:
    """Walk the records in [start, end) (default: the whole file) into t; the file's health, how the walk
    stopped (an L.STATUS_*) and whether it resynced after a corrupt record header."""
    warnings: list[str] = []
    kinds_before = t.kinds.copy()
    for k in (
        L.ST_RECORDS,
        L.ST_FIRST_NS,
        L.ST_MAX_NS,
        L.ST_PACKET_BYTES,
        L.ST_NIFACE,
        L.ST_IFACE_BASE,
        L.ST_SWAP,
        L.ST_NJUMPS,
        L.ST_JUMPS_SEEN,
    ):
        t.st[k] = 0
    whole = start is None and end is None
    t.st[L.ST_POS] = cap.data_offset if start is None else start
    if_link = np.zeros(L.MAX_IFACES, dtype=np.int64)
    if_resol = np.zeros(L.MAX_IFACES, dtype=np.int64)
    if_offset = np.zeros(L.MAX_IFACES, dtype=np.int64)
    dropped_to = int(t.st[L.ST_POS]) - int(t.st[L.ST_POS]) % mmap.PAGESIZE
    resynced = False
    lost_at: int | None = None  # stream offset of a corrupt record header whose search goes on in the next window
    while True:
        buf = cap.buffer
        t.st[L.ST_BASE] = cap.base
        stop = len(buf) if end is None else end
        if lost_at is None:
            _walk(cap, t, stop, (mtu, bin_ns, byte_mode), (if_link, if_resol, if_offset))
            status = int(t.st[L.ST_STATUS])
            pos = int(t.st[L.ST_POS])
        else:
            status, pos = L.STATUS_CORRUPT, -1  # go on searching from the window's first byte
        dropped_to = cap.release(dropped_to, pos)
        if status == L.STATUS_FLOWS_FULL:
            t.grow_flows()
        elif status == L.STATUS_CELLS_FULL:
            t.flush_cells()
        elif status == L.STATUS_SAMPLES_FULL:
            t.flush_samples()
        elif status == L.STATUS_ROWS_FULL:
            t.flush_rows()
        elif status in (L.STATUS_END, L.STATUS_TRUNCATED) and cap.more(pos):  # a record cut by the window's end
            t.st[L.ST_POS] = 0
        elif status == L.STATUS_CORRUPT and not cap.final and len(buf) - pos < inflate.LOOKAHEAD:
            lost_at = cap.base + pos if lost_at is None else lost_at  # search on with more bytes after it
            cap.more(pos + 1)
        elif status == L.STATUS_CORRUPT and (good := next_valid_record(cap, t.st, pos)) is not None:
            bad = cap.base + pos if lost_at is None else lost_at
            warnings.append(
                f"{cap.path}: offset {bad}: corrupt record header; skipped {cap.base + good - bad} bytes "
                f"to the next valid record at offset {cap.base + good}"
            )
            t.st[L.ST_POS] = good
            resynced, lost_at = True, None
        elif status == L.STATUS_CORRUPT and not cap.final:  # nothing valid in this window: search on in the next
            lost_at = cap.base + pos if lost_at is None else lost_at
            cap.more(max(pos + 1, len(buf) - inflate.LOOKAHEAD))
        elif status != L.STATUS_BUDGET:
            break
    pos = cap.base + pos if lost_at is None else lost_at
    end = cap.base + len(cap.buffer) if end is None else end
    warnings = cap.warnings + warnings
    if status == L.STATUS_TRUNCATED:
        warnings.append(
            f"{cap.path}: offset {pos}: last record truncated ({end - pos} bytes ignored; capture was cut short)"
        )
    elif status == L.STATUS_CORRUPT:
        warnings.append(
            f"{cap.path}: offset {pos}: corrupt record header; the remaining {end - pos} bytes were skipped"
        )
    elif status == L.STATUS_TOO_MANY_IFACES:
        warnings.append(f"{cap.path}: offset {pos}: more than {L.MAX_IFACES} interfaces; the rest was skipped")
    if cap.kind == "pcapng":
        linktypes = sorted({L.linktype_name(int(x)) for x in if_link[: int(t.st[L.ST_NIFACE])]})
    else:
        linktypes = [L.linktype_name(cap.linktype)]
    records = int(t.st[L.ST_RECORDS])
    if records == 0 and whole:
        warnings.append(no_packets(cap.path))
    return (
        FileHealth(
            path=str(cap.path),
            format=cap.format_name,
            linktypes=linktypes,
            file_bytes=cap.file_bytes,
            records=records,
            captured_bytes=int(t.st[L.ST_PACKET_BYTES]),
            first_ns=int(t.st[L.ST_FIRST_NS]),
            last_ns=int(t.st[L.ST_MAX_NS]),
            kinds=t.kinds - kinds_before,
            warnings=warnings,
            jumps=t.jumps[: int(t.st[L.ST_NJUMPS])].copy(),
            jumps_seen=int(t.st[L.ST_JUMPS_SEEN]),
        ),
        status,
        resynced,
    )


def _walk(
    cap: CaptureFormat,
    t: "_Tables",
    stop: int,
    options: tuple[int, int, int],
    ifaces: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """One kernel call over cap.buffer from t.st[ST_POS] to stop (options: mtu, bin_ns, byte_mode; ifaces: a
    pcapng's interface link types, time resolutions and offsets); how it stopped is in t.st."""
    walkers = kernels()
    if cap.kind == "pcapng":
        walkers.scan_pcapng(cap.buffer, stop, RECORDS_PER_CALL, *options, *ifaces, *t.kernel_tables())
    else:
        walkers.scan_pcap(
            cap.buffer, stop, cap.swapped, cap.nano, cap.linktype, RECORDS_PER_CALL, *options, *t.kernel_tables()
        )


def no_packets(path: Path | str) -> str:
    """The warning for a capture file without a single record."""
    return f"{path}: no packets"

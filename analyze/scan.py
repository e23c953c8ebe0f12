"""Scan one capture file into per-flow aggregates and sparse series cells (the unit of parallel work).

The file is memory-mapped and handed to the compiled kernel in bounded windows of records; pages
already read are dropped with madvise so resident memory stays flat however large the file is.
The result, a FileScan, holds only small numpy arrays, so it pickles cheaply to a worker pool or a
Dask cluster.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analyze import layouts as L
from analyze.formats import CaptureFormat, FileError, open_capture

RECORDS_PER_CALL = 1 << 21
INITIAL_FLOWS = 1 << 10
CELLS_PER_FLUSH = 1 << 20


@dataclass
class FileScan:
    """What one capture file contributed: flow keys, their aggregates, series cells and health."""

    path: str
    format: str
    linktypes: list[str]
    file_bytes: int
    records: int
    captured_bytes: int
    first_ns: int
    last_ns: int
    kinds: np.ndarray  # int64[N_KINDS]
    keys: np.ndarray  # uint64[n, 5]: src hi/lo, dst hi/lo, (sport<<24 | dport<<8 | proto)
    agg: np.ndarray  # int64[n, N_AGG]
    cell_flow: np.ndarray  # int32
    cell_bin: np.ndarray  # int64, absolute bin index (ts // bin_ns)
    cell_bytes: np.ndarray  # int64
    warnings: list[str] = field(default_factory=list)


class _Tables:
    """Growable kernel tables; grown between kernel calls, never inside one."""

    def __init__(self) -> None:
        self.keys = np.zeros((INITIAL_FLOWS, 5), dtype=np.uint64)
        self.agg = np.zeros((INITIAL_FLOWS, L.N_AGG), dtype=np.int64)
        self.slots = np.full(INITIAL_FLOWS * 4, -1, dtype=np.int64)
        self.cell_flow = np.zeros(CELLS_PER_FLUSH, dtype=np.int32)
        self.cell_bin = np.zeros(CELLS_PER_FLUSH, dtype=np.int64)
        self.cell_bytes = np.zeros(CELLS_PER_FLUSH, dtype=np.int64)
        self.kinds = np.zeros(L.N_KINDS, dtype=np.int64)
        self.frag_keys = np.zeros((4096, 3), dtype=np.uint64)
        self.frag_flow = np.full(4096, -1, dtype=np.int64)
        self.st = np.zeros(L.N_ST, dtype=np.int64)
        self.flushed: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def grow_flows(self) -> None:
        """Quadruple the flow table and rebuild the hash slots."""
        from analyze.kernel import rehash

        n = int(self.st[L.ST_NFLOWS])
        cap = self.keys.shape[0] * 4
        keys = np.zeros((cap, 5), dtype=np.uint64)
        keys[:n] = self.keys[:n]
        agg = np.zeros((cap, L.N_AGG), dtype=np.int64)
        agg[:n] = self.agg[:n]
        self.keys, self.agg = keys, agg
        self.slots = np.full(cap * 4, -1, dtype=np.int64)
        rehash(self.keys, n, self.slots)

    def flush_cells(self) -> None:
        """Move the kernel's cells out so the cell buffer can be reused."""
        n = int(self.st[L.ST_NCELLS])
        if n:
            self.flushed.append((self.cell_flow[:n].copy(), self.cell_bin[:n].copy(), self.cell_bytes[:n].copy()))
        self.st[L.ST_NCELLS] = 0

    def finish_cells(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Emit each flow's open bin and return all cells."""
        self.flush_cells()
        n = int(self.st[L.ST_NFLOWS])
        open_ = self.agg[:n, L.AGG_CUR_BIN] >= 0
        idx = np.nonzero(open_)[0]
        self.flushed.append((idx.astype(np.int32), self.agg[idx, L.AGG_CUR_BIN].copy(), self.agg[idx, L.AGG_CUR_BYTES].copy()))
        parts = self.flushed
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]))


def scan_file(path: str | os.PathLike[str], *, bin_ns: int, byte_mode: int, mtu: int = 1500,
              tmp_dir: str | None = None) -> FileScan:
    """Read one pcap/pcapng (possibly gzip) file completely; raises FileError on unreadable input."""
    with open_capture(Path(path), tmp_dir=tmp_dir) as cap:
        return _scan_open(cap, bin_ns=bin_ns, byte_mode=byte_mode, mtu=mtu)


def _scan_open(cap: CaptureFormat, *, bin_ns: int, byte_mode: int, mtu: int) -> FileScan:
    from analyze.kernel import scan_pcap, scan_pcapng

    t = _Tables()
    warnings = list(cap.warnings)
    t.st[L.ST_POS] = cap.data_offset
    if_link = np.zeros(L.MAX_IFACES, dtype=np.int64)
    if_resol = np.zeros(L.MAX_IFACES, dtype=np.int64)
    if_offset = np.zeros(L.MAX_IFACES, dtype=np.int64)
    buf = cap.buffer
    end = len(buf)
    dropped_to = 0
    while True:
        if cap.kind == "pcapng":
            scan_pcapng(buf, end, RECORDS_PER_CALL, mtu, bin_ns, byte_mode, if_link, if_resol, if_offset,
                        t.keys, t.slots, t.agg, t.cell_flow, t.cell_bin, t.cell_bytes, t.kinds,
                        t.frag_keys, t.frag_flow, t.st)
        else:
            scan_pcap(buf, end, cap.swapped, cap.nano, cap.linktype, RECORDS_PER_CALL, mtu, bin_ns, byte_mode,
                      t.keys, t.slots, t.agg, t.cell_flow, t.cell_bin, t.cell_bytes, t.kinds,
                      t.frag_keys, t.frag_flow, t.st)
        status = int(t.st[L.ST_STATUS])
        pos = int(t.st[L.ST_POS])
        dropped_to = cap.release(dropped_to, pos)
        if status == L.STATUS_FLOWS_FULL:
            t.grow_flows()
        elif status == L.STATUS_CELLS_FULL:
            t.flush_cells()
        elif status == L.STATUS_BUDGET:
            continue
        else:
            break
    if status == L.STATUS_TRUNCATED:
        warnings.append(f"{cap.path}: offset {pos}: last record truncated ({end - pos} bytes ignored; capture was cut short)")
    elif status == L.STATUS_CORRUPT:
        warnings.append(f"{cap.path}: offset {pos}: corrupt record header; the remaining {end - pos} bytes were skipped")
    elif status == L.STATUS_TOO_MANY_IFACES:
        warnings.append(f"{cap.path}: offset {pos}: more than {L.MAX_IFACES} interfaces; the rest was skipped")
    n = int(t.st[L.ST_NFLOWS])
    cell_flow, cell_bin, cell_bytes = t.finish_cells()
    if cap.kind == "pcapng":
        linktypes = sorted({L.linktype_name(int(x)) for x in if_link[: int(t.st[L.ST_NIFACE])]})
    else:
        linktypes = [L.linktype_name(cap.linktype)]
    records = int(t.st[L.ST_RECORDS])
    if records == 0:
        warnings.append(f"{cap.path}: no packets")
    return FileScan(
        path=str(cap.path), format=cap.format_name, linktypes=linktypes, file_bytes=cap.file_bytes,
        records=records, captured_bytes=int(t.st[L.ST_PACKET_BYTES]),
        first_ns=int(t.st[L.ST_FIRST_NS]), last_ns=int(t.st[L.ST_MAX_NS]), kinds=t.kinds.copy(),
        keys=t.keys[:n].copy(), agg=t.agg[:n].copy(), cell_flow=cell_flow, cell_bin=cell_bin,
        cell_bytes=cell_bytes, warnings=warnings,
    )

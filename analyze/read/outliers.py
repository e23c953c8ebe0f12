"""Packets dated far outside their capture's span: named by offset, kept in the byte totals, left out of the series.

Why: one mutated or garbage timestamp (a packet dated 2104 among a second of traffic from 2025) stretches every
time axis over a century: bins, figures and per-iteration tables then cost memory and time in the span, not in
the data, and the timeline is unreadable. A host's span is decided from its series cells after the read: the
occupied bins fall into runs separated by more than a day (layouts.JUMP_NS); the run holding the most bytes is
the capture, and a neighbouring run joins it while the gap to it is no longer than a day or the capture's own
duration so far. Whatever lies outside is set aside: its cells and samples leave the series, flows and files
keep their byte totals with first and last times clamped into the span, and each file says, with offsets from
the kernel's jumps table (two records in a row more than a day apart), which packets it set aside.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import numpy as np

from analyze.read import layouts as L
from analyze.read.scan import FileHealth, StreamScan

SHOWN = 5  # offsets named in a warning; the rest are counted


def span(cell_bin: np.ndarray, cell_bytes: np.ndarray, bin_ns: int) -> tuple[int, int] | None:
    """[start, end) in ns of the capture's own span among these cells; None without cells."""
    if not len(cell_bin):
        return None
    first, last = int(cell_bin.min()), int(cell_bin.max())
    if (last - first) * bin_ns <= L.JUMP_NS:  # no two bins a jump apart: one run, without sorting (512 hosts: 0.2 s)
        return first * bin_ns, (last + 1) * bin_ns
    bins, inverse = np.unique(cell_bin, return_inverse=True)
    weight = np.bincount(inverse, weights=cell_bytes + 1)  # a cell of zero bytes still holds packets
    cut = np.flatnonzero(np.diff(bins) * bin_ns > L.JUMP_NS) + 1
    starts, ends = np.r_[0, cut], np.r_[cut, len(bins)]  # runs of bins, as index ranges
    mass = np.add.reduceat(weight, starts)
    lo = hi = int(np.argmax(mass))
    while True:
        duration = (bins[ends[hi] - 1] - bins[starts[lo]]) * bin_ns
        reach = max(L.JUMP_NS, duration)
        if lo > 0 and (bins[starts[lo]] - bins[ends[lo - 1] - 1]) * bin_ns <= reach:
            lo -= 1
        elif hi < len(starts) - 1 and (bins[starts[hi + 1]] - bins[ends[hi] - 1]) * bin_ns <= reach:
            hi += 1
        else:
            break
    return int(bins[starts[lo]]) * bin_ns, (int(bins[ends[hi] - 1]) + 1) * bin_ns


def set_aside(scan: StreamScan, bin_ns: int) -> StreamScan:
    """The scan with packets dated outside its span left out of the series, and a warning per file that had any."""
    bounds = span(scan.cell_bin, scan.cell_bytes, bin_ns)
    if bounds is None:
        return scan
    lo, hi = bounds
    cell_ns = scan.cell_bin * bin_ns
    inside = (cell_ns >= lo) & (cell_ns < hi)
    strays = [bool(f.records) and (f.first_ns < lo or f.last_ns >= hi) for f in scan.files]
    if inside.all() and not any(strays):
        return scan
    t = scan.samples[:, L.SAMPLE_NS]
    agg = scan.agg.copy()
    first, last = _kept_times(scan.cell_flow[inside], cell_ns[inside], len(agg), bin_ns, lo, hi)
    moved = (agg[:, L.AGG_FIRST_NS] < lo) | (agg[:, L.AGG_FIRST_NS] >= hi)
    agg[moved, L.AGG_FIRST_NS] = first[moved]
    moved = (agg[:, L.AGG_LAST_NS] < lo) | (agg[:, L.AGG_LAST_NS] >= hi)
    agg[moved, L.AGG_LAST_NS] = last[moved]
    return replace(
        scan,
        files=[_file_set_aside(f, lo, hi) if stray else f for f, stray in zip(scan.files, strays)],
        agg=agg,
        cell_flow=scan.cell_flow[inside],
        cell_bin=scan.cell_bin[inside],
        cell_bytes=scan.cell_bytes[inside],
        samples=scan.samples[(t >= lo) & (t < hi)],
    )


def _kept_times(
    flow: np.ndarray, ns: np.ndarray, n: int, bin_ns: int, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each flow's first and last time as its kept cells tell them (to the bin); the span's ends for a flow
    with none."""
    first = np.full(n, hi - 1, dtype=np.int64)
    last = np.full(n, lo, dtype=np.int64)
    np.minimum.at(first, flow, ns)
    np.maximum.at(last, flow, ns + bin_ns - 1)
    none = first > last
    first[none], last[none] = lo, hi - 1
    return first, last


def _file_set_aside(f: FileHealth, lo: int, hi: int) -> FileHealth:
    """The file's health with its times clamped into [lo, hi) and a warning naming what was set aside."""
    rows = f.jumps
    out_at = (rows[:, L.JUMP_AT_NS] < lo) | (rows[:, L.JUMP_AT_NS] >= hi)
    out_before = (rows[:, L.JUMP_BEFORE_NS] < lo) | (rows[:, L.JUMP_BEFORE_NS] >= hi)
    found = {int(a): int(ns) for a, ns in zip(rows[out_before, L.JUMP_BEFORE_AT], rows[out_before, L.JUMP_BEFORE_NS])}
    found |= {int(a): int(ns) for a, ns in zip(rows[out_at, L.JUMP_AT], rows[out_at, L.JUMP_AT_NS])}
    window = f"{_date(lo)} to {_date(hi - 1)}"
    if found:
        named = ", ".join(f"offset {at} ({_date(ns)})" for at, ns in sorted(found.items())[:SHOWN])
        more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        listed = "" if f.jumps_seen <= len(rows) else f" (the first {len(rows)} of {f.jumps_seen} date jumps read)"
        said = f"packets dated outside the capture's span ({window}) at {named}{more}{listed}"
    else:
        said = f"packets from {_date(f.first_ns)} to {_date(f.last_ns)}, outside the capture's span ({window})"
    warning = f"{f.path}: {said}: kept in the byte totals, left out of the time series"
    return replace(
        f,
        first_ns=min(max(f.first_ns, lo), hi - 1),
        last_ns=min(max(f.last_ns, lo), hi - 1),
        warnings=[*f.warnings, warning],
    )


def _date(ns: int) -> str:
    """A UTC time to the millisecond, for naming a stray packet's date; its raw value where no calendar has it."""
    try:
        return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    except (OverflowError, OSError, ValueError):
        return f"{ns} ns"

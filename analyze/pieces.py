"""Split a host's capture stream into pieces that workers read at once, and join them back exactly.

Why: one worker per host leaves cores idle when there are fewer hosts than cores (one big capture on a
16-core box). A piece is a byte range of one classic pcap file starting at a record boundary, read with
fresh state. Fresh state differs from the state a sequential read would carry in just two places, so
each seam is checked and a stream whose seams do not all hold is read again in one piece:
- TCP sequence tracking: a flow must pick up in the next piece exactly where the previous ones left
  it (its first data segment starts at the highest sequence end seen before), with no hole still open
  that the next piece could fill as reordering (holes opened over a second before are long closed).
- IP fragments: a datagram's fragments may straddle a seam, so a stream with any is not joined.
A piece that did not end exactly on its end offset (a damaged record hid the boundary) fails too.
Series cells of a bin cut by a seam are added up when the host's flows are merged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from analyze import layouts as L
from analyze.flows import fold_scans, unique_rows
from analyze.formats import open_capture
from analyze.resync import next_valid_record
from analyze.scan import FileHealth, StreamScan, no_packets, time_order

MIN_PIECE_BYTES = 32 << 20  # ~10 ms of reading: smaller pieces cost more in hand-offs than they save
SETTLED_NS = 1_000_000_000  # a hole opened this long before a piece's first segment cannot be filled in it


@dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of one capture file; start None: the whole file, read as scan_stream would."""

    path: Path
    start: Optional[int] = None
    end: Optional[int] = None
    size: int = 0


def plan(streams: list[list[Path]], sizes: list[int], workers: int,
         min_piece_bytes: Optional[int] = None) -> list[Optional[list[Piece]]]:
    """Per stream, None (read it whole, one task) or its pieces in capture order.

    Pieces aim at half a worker's share of all bytes, so the last tasks to finish are short; a stream
    below that is not split, so many hosts still give one task each.
    """
    least = MIN_PIECE_BYTES if min_piece_bytes is None else min_piece_bytes
    target = max(least, math.ceil(sum(sizes) / (2 * workers)))
    out: list[Optional[list[Piece]]] = []
    for files, size in zip(streams, sizes):
        if size <= target:
            out.append(None)
            continue
        pieces = [p for f in sorted(files, key=time_order) for p in _split_file(f, target)]
        out.append(pieces if len(pieces) > 1 else None)
    return out


def _split_file(path: Path, target: int) -> list[Piece]:
    """The file as pieces of about `target` bytes cut at record boundaries (classic pcap only: a pcapng
    piece would need the interfaces declared before it; gzip would be inflated once per piece)."""
    try:
        size = path.stat().st_size
    except OSError:
        return [Piece(path)]  # reading it will say what is wrong, in one line
    whole = [Piece(path, size=size)]
    if size <= target:
        return whole
    with open_capture(path) as cap:
        if cap.kind != "pcap" or cap.file_bytes != size:
            return whole
        st = np.zeros(L.N_ST, dtype=np.int64)  # no records seen: any timestamp is plausible
        cuts = [cap.data_offset]
        for k in range(1, math.ceil(size / target)):
            at = next_valid_record(cap, st, max(k * size // math.ceil(size / target), cuts[-1]) - 1)
            if at is None or at >= size:
                break
            if at > cuts[-1]:
                cuts.append(at)
    cuts.append(size)
    return [Piece(path, a, b, b - a) for a, b in zip(cuts[:-1], cuts[1:])]


def join(pieces: list[Piece], parts: list[StreamScan]) -> Optional[StreamScan]:
    """The stream's scan from its pieces' scans (in capture order), or None when a seam does not hold."""
    if not all(p.ended_on_record for p in parts[:-1]):
        return None
    if len(parts) > 1 and sum(int(f.kinds[L.KIND_FRAGMENT]) for p in parts for f in p.files):
        return None
    if not _seams_hold(parts):
        return None
    keys, agg, cell_flow, cell_bin, cell_bytes = fold_scans(parts)
    return StreamScan(files=_files(pieces, parts), keys=keys, agg=agg, cell_flow=cell_flow, cell_bin=cell_bin,
                      cell_bytes=cell_bytes)


def _seams_hold(parts: list[StreamScan]) -> bool:
    """Every flow's first data segment in a piece continues the sequence state left by the pieces before."""
    _, gid = unique_rows(np.concatenate([p.keys for p in parts]))
    n = int(gid.max()) + 1 if gid.size else 0
    state = np.full((n, 7), -1, dtype=np.int64)  # seq end, hole lo/hi/ns, hole 2 lo/hi/ns
    cols = [L.AGG_SEQ_END, L.AGG_GAP_LO, L.AGG_GAP_HI, L.AGG_GAP_NS, L.AGG_GAP2_LO, L.AGG_GAP2_HI, L.AGG_GAP2_NS]
    at = 0
    for p in parts:
        g = gid[at:at + len(p.keys)]
        at += len(p.keys)
        data = p.agg[:, L.AGG_SEQ_FIRST] >= 0
        g, a = g[data], p.agg[data]
        prev = state[g]
        seen = prev[:, 0] >= 0
        first_ns = a[:, L.AGG_SEQ_FIRST_NS]
        settled = ((prev[:, 1] < 0) | (first_ns - prev[:, 3] > SETTLED_NS)) & \
                  ((prev[:, 4] < 0) | (first_ns - prev[:, 6] > SETTLED_NS))
        if not np.all(~seen | ((a[:, L.AGG_SEQ_FIRST] == prev[:, 0]) & settled)):
            return False
        state[g] = a[:, cols]
    return True


def _files(pieces: list[Piece], parts: list[StreamScan]) -> list[FileHealth]:
    """One FileHealth per file, adding up the pieces it was read in."""
    out: dict[Path, FileHealth] = {}
    for piece, part in zip(pieces, parts):
        h = part.files[0]
        have = out.get(piece.path)
        if have is None:
            out[piece.path] = FileHealth(path=h.path, format=h.format, linktypes=list(h.linktypes),
                                         file_bytes=h.file_bytes, records=h.records, captured_bytes=h.captured_bytes,
                                         first_ns=h.first_ns, last_ns=h.last_ns, kinds=h.kinds.copy(),
                                         warnings=list(h.warnings))
            continue
        if h.records and (not have.records or h.first_ns < have.first_ns):
            have.first_ns = h.first_ns
        have.last_ns = max(have.last_ns, h.last_ns)
        have.records += h.records
        have.captured_bytes += h.captured_bytes
        have.kinds = have.kinds + h.kinds
        have.linktypes = sorted(set(have.linktypes) | set(h.linktypes))
        have.warnings = list(dict.fromkeys(have.warnings + h.warnings))
    for piece in pieces:
        h = out[piece.path]
        if h.records == 0 and no_packets(h.path) not in h.warnings:
            h.warnings.append(no_packets(h.path))
    return list(out.values())

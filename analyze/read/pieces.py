"""Split a host's capture stream into pieces that workers read at once, and join them back exactly.

Why: one worker per host leaves cores idle when there are fewer hosts than cores (one big capture on a
16-core box). A piece is a byte range of one classic pcap file starting at a record boundary, or one
whole classic pcap file of a rotation set (plain, gzip or zstd), read with fresh state. Where fresh state could read
differently from the state a sequential read carries, the join checks, and a stream whose seams do
not all hold is read again in one piece:
- TCP sequence tracking: a flow must pick up in a piece exactly where the pieces before left it (its
  first data segment starts at the highest sequence end seen before), and no hole left open before
  may be filled in it as reordering (every record of the piece is over REORDER_NS after the hole opened).
- IP fragments: a datagram's fragments may straddle a seam, so a stream with any is not joined.
- Alignment and damage: a piece that did not end exactly on its cut, or resynced after a damaged
  record mid-file, is not joinable (analyze.read.scan.scan_range says why).
pcapng is never cut: a piece would need the interfaces (and, for Simple Packet Blocks, the time) read before it.
A gzip or zstd file is never cut either (it would be inflated from its start for every piece), but the files of
a compressed rotation set are pieces of their stream.
Series cells of a bin cut by a seam are added up when the host's flows are merged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from analyze.read import layouts as L
from analyze.read.fold import fold_scans, unique_rows
from analyze.read.formats import inner_kind, open_capture, scan_bytes, sniff
from analyze.read.resync import next_valid_record
from analyze.read.scan import FileHealth, StreamScan, no_packets, time_order

MIN_PIECE_BYTES = 32 << 20  # ~10 ms of reading: smaller pieces cost more in hand-offs than they save


@dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of one capture file; start None: the whole file, read as scan_stream would."""

    path: Path
    start: Optional[int] = None
    end: Optional[int] = None
    size: int = 0


def plan(
    streams: list[list[Path]], sizes: list[int], workers: int, min_piece_bytes: Optional[int] = None
) -> list[Optional[list[Piece]]]:
    """Per stream, None (read it whole, one task) or its pieces in capture order.

    Pieces aim at half a worker's share of all bytes, so the last tasks to finish are short; a stream
    below that is not split, so many hosts still give one task each.
    """
    least = MIN_PIECE_BYTES if min_piece_bytes is None else min_piece_bytes
    target = max(least, math.ceil(sum(sizes) / (2 * workers)))
    out: list[Optional[list[Piece]]] = []
    for files, size in zip(streams, sizes):
        if size <= target or not all(inner_kind(f) == "pcap" for f in files):
            out.append(None)
            continue
        pieces = [p for f in sorted(files, key=time_order) for p in _split_file(f, target)]
        out.append(pieces if len(pieces) > 1 else None)
    return out


def _split_file(path: Path, target: int) -> list[Piece]:
    """The classic pcap file as pieces of about `target` bytes cut at record boundaries; a compressed one whole."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            compressed = sniff(fh.read(4)) != "pcap"
    except OSError:
        return [Piece(path)]  # reading it will say what is wrong, in one line
    if compressed:
        return [Piece(path, size=scan_bytes(path))]
    if size <= target:
        return [Piece(path, size=size)]
    n = math.ceil(size / target)
    with open_capture(path) as cap:
        st = np.zeros(L.N_ST, dtype=np.int64)  # no records seen: any timestamp is plausible
        cuts = [cap.data_offset]
        for k in range(1, n):
            at = next_valid_record(cap, st, max(k * size // n, cuts[-1]) - 1)
            if at is None or at >= size:
                break
            if at > cuts[-1]:
                cuts.append(at)
    cuts.append(size)
    return [Piece(path, a, b, b - a) for a, b in zip(cuts[:-1], cuts[1:])]


def join(pieces: list[Piece], parts: list[StreamScan]) -> Optional[StreamScan]:
    """The stream's scan from its pieces' scans (in capture order), or None when a seam does not hold."""
    if not all(p.joinable for p in parts):
        return None
    if len(parts) > 1 and any(int(f.kinds[L.KIND_FRAGMENT]) > 0 for p in parts for f in p.files):
        return None
    if not _seams_hold(parts):
        return None
    # folded: the pieces' sequence columns gave each flow's missing payload and are gone; read again as an
    # unfolded scan, a flow's empty span made it 4 GiB short (a 3 MB loopback capture "0.07 % held")
    return StreamScan(files=_files(pieces, parts), **fold_scans(parts)._asdict(), folded=True)


def _seams_hold(parts: list[StreamScan]) -> bool:
    """Every flow's first data segment in a piece continues the sequence end left by the pieces before,
    and no record of the piece is recent enough to fill a hole any of them opened.

    Holes are judged by the latest opening time the flow ever had: a sequential read may still hold an
    older hole that a fresh piece never saw, and the latest time bounds them all.
    """
    _, gid = unique_rows(np.concatenate([p.keys for p in parts]))
    n = int(gid.max()) + 1 if gid.size else 0
    seq_end = np.full(n, -1, dtype=np.int64)
    hole_ns = np.full(n, -(1 << 62), dtype=np.int64)  # latest time a hole opened (0: never, or at time 0)
    at = 0
    for p in parts:
        g = gid[at : at + len(p.keys)]
        at += len(p.keys)
        data = p.agg[:, L.AGG_SEQ_FIRST] >= 0
        earliest = min((f.first_ns for f in p.files if f.records), default=0)
        gd, a = g[data], p.agg[data]
        picks_up = (seq_end[gd] < 0) | (a[:, L.AGG_SEQ_FIRST] == seq_end[gd])
        if not (picks_up.all() and np.all(earliest - hole_ns[gd] > L.REORDER_NS)):
            return False
        seq_end[gd] = a[:, L.AGG_SEQ_END]
        hole_ns[g] = np.maximum(hole_ns[g], np.maximum(p.agg[:, L.AGG_GAP_NS], p.agg[:, L.AGG_GAP2_NS]))
    return True


def _files(pieces: list[Piece], parts: list[StreamScan]) -> list[FileHealth]:
    """One FileHealth per file, adding up the pieces it was read in."""
    out: dict[Path, FileHealth] = {}
    for piece, part in zip(pieces, parts):
        h = part.files[0]
        have = out.get(piece.path)
        if have is None:
            out[piece.path] = FileHealth(
                path=h.path,
                format=h.format,
                linktypes=list(h.linktypes),
                file_bytes=h.file_bytes,
                records=h.records,
                captured_bytes=h.captured_bytes,
                first_ns=h.first_ns,
                last_ns=h.last_ns,
                kinds=h.kinds.copy(),
                warnings=list(h.warnings),
                jumps=h.jumps.copy(),
                jumps_seen=h.jumps_seen,
            )
            continue
        later = h.jumps.copy()
        later[:, L.JUMP_RECORD] += have.records  # numbered in the file, not in the piece
        have.jumps = np.concatenate([have.jumps, later])[: L.MAX_JUMPS]
        have.jumps_seen += h.jumps_seen
        if h.records and (not have.records or h.first_ns < have.first_ns):
            have.first_ns = h.first_ns
        have.last_ns = max(have.last_ns, h.last_ns)
        have.records += h.records
        have.captured_bytes += h.captured_bytes
        have.kinds = have.kinds + h.kinds
        have.linktypes = sorted(set(have.linktypes) | set(h.linktypes))
        have.warnings = list(dict.fromkeys(have.warnings + h.warnings))
    for h in out.values():
        if h.records == 0 and no_packets(h.path) not in h.warnings:
            h.warnings.append(no_packets(h.path))
    return list(out.values())

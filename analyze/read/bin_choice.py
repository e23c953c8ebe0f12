"""The series' bin width, chosen from the traffic's own time scale unless --bin gives one (issue 45 item 1).

Why: a bin coarser than what idles a link between bursts (the waits between ring steps, the compute between
iterations) smears every burst into half-empty bins, so a link that runs at line rate whenever it sends reads as
a sender that does not keep it busy, and the iteration staircase blurs. The same capture was "link, sure" at 1 ms
bins and "sender" at 10 ms. So the captures are read at BASE_BIN_NS and the bin the analyses use is the coarsest
of LADDER_NS no wider than a tenth of the traffic's short bursts: then a burst's two partial bins hold at most a
fifth of its bytes, and halving or doubling the bin keeps its busy bins over 80 % full.

A flow's bursts are its runs of busy base bins, split where it idles for more than SPLIT_GAPS times its host's
typical spacing between a flow's busy bins (a 100 Mbit/s link sends a 64 kB TSO segment every 5 ms: that spacing
is the link's pace, not an idle). The short bursts are the SHORT_SHARE byte-weighted quantile of their lengths
(byte-weighted: a keep-alive's one-bin run weighs nothing), and the job's scale the median over its hosts, so one
odd host does not set everyone's bin. The bin holds at least SEGMENTS_PER_BIN of a flow's packets while it sends
(a 4 MB step in 64 kB segments over 36 ms, 1.75 a millisecond: at 2 ms bins three or four, and the bins of three
read as pauses), and is never coarser than the old 10 ms default: longer bins tell nothing more.

--bin sets the width of the series, the iterations and the report; the links' fill is still judged at the width
chosen here (analyze.wire.transport, analyze.wire.rdma), so that halving or doubling --bin cannot change a
limiter or its sureness. The captures are read at BASE_BIN_NS (or a divisor of it that --bin is a multiple of:
read_width) whatever --bin says, and the choice is made from that: on the committed DDP captures the fill at
--bin 2.5/5/10 ms read 0.92/0.90/0.86 of line rate, and the link verdict 0.81/0.74/0.64 sure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence, TypeVar

import numpy as np

from analyze.read import layouts as L
from analyze.read.fold import HostFlows, sum_cells
from analyze.read.heap import give_back
from analyze.read.scan import StreamScan

BASE_BIN_NS = 1_000_000
TRIM_HOSTS = 64  # coarsen_each gives the heap back after this many hosts
LADDER_NS = (1_000_000, 2_000_000, 5_000_000, 10_000_000)
BURST_BINS = 10  # bins per short burst at the chosen width
SPLIT_GAPS = 4
SHORT_SHARE = 0.2
SEGMENTS_PER_BIN = 8
# a median over this many hosts, evenly spread, is the job's: at 512 hosts measuring all took 1.3 s, 64 take 0.16
SAMPLED_HOSTS = 64


@dataclass(frozen=True)
class BinChoice:
    """The bin the analyses use, and the reason the summary states for it."""

    bin_ns: int
    why: str


GIVEN = "given (--bin)"


def given(bin_ns: int) -> BinChoice:
    """The choice when the user (or a dataset's conversion) fixed the width."""
    return BinChoice(bin_ns, GIVEN)


def read_width(given_ns: Optional[int]) -> int:
    """The width captures are read at: BASE_BIN_NS, or the widest divisor of it that GIVEN_NS (--bin) is a multiple
    of, so that both the given width and the one chosen from the traffic can be summed from the cells read."""
    return BASE_BIN_NS if given_ns is None else math.gcd(given_ns, BASE_BIN_NS)


def from_traffic(why: Optional[str]) -> bool:
    """Whether a result's bin (its `bin_choice`, the reason) was chosen from the traffic: not given with --bin,
    nor a result written before the choice existed (None). The reason is the record's only trace of it."""
    return why is not None and why != GIVEN


def choose(scans: Sequence[StreamScan], read_bin_ns: int) -> BinChoice:
    """The width for scans read at read_bin_ns: the coarsest ladder step that is a multiple of it and no wider
    than a tenth of the short bursts, yet wide enough to hold SEGMENTS_PER_BIN of a flow's packets while it sends
    (finer, one packet more or less swings a bin's bytes so far that a burst's own bins read as pauses); the
    default where no flow has bursts to measure."""
    busy = [scan for scan in scans if scan.cell_bin.size > 1]
    sampled = [busy[i] for i in np.linspace(0, len(busy) - 1, min(len(busy), SAMPLED_HOSTS)).astype(int)]
    measured = [m for m in (bursts(scan, read_bin_ns) for scan in sampled) if m is not None]
    steps = [b for b in LADDER_NS if b >= read_bin_ns and b % read_bin_ns == 0] or [read_bin_ns]
    if not measured:
        return BinChoice(steps[-1], "no bursts to measure: the default")
    scale = float(np.median([m[0] for m in measured]))
    spacing = float(np.median([m[1] for m in measured]))
    fitting = [b for b in steps if b * BURST_BINS <= scale] or steps[:1]
    floor = [b for b in steps if b >= SEGMENTS_PER_BIN * spacing] or steps[-1:]
    width = max(fitting[-1], floor[0])
    if width == steps[-1] and width * BURST_BINS <= scale:
        why = f"short bursts last {scale / 1e6:.0f} ms: the default suffices"
    elif width > fitting[-1]:
        why = f"a flow sends a packet every {spacing / 1e6:.2f} ms while busy: no finer"
    else:
        why = f"a tenth of the short bursts ({scale / 1e6:.0f} ms) or finer"
    return BinChoice(width, why)


def bursts(scan: StreamScan, bin_ns: int) -> Optional[tuple[float, float]]:
    """One host's short bursts (the byte-weighted SHORT_SHARE quantile of its flows' burst lengths) and the time
    between its flows' packets while busy (byte-weighted median over flows), both in ns; None without a flow that
    was busy in two bins."""
    flow, busy, weight = scan.cell_flow, scan.cell_bin, scan.cell_bytes.astype(np.float64)
    if not scan.folded:  # a folded scan's cells are in (flow, bin) order already (fold.sum_cells)
        order = np.lexsort((busy, flow))
        flow, busy, weight = flow[order], busy[order], weight[order]
    same = flow[1:] == flow[:-1]
    if not same.any():
        return None
    gap = np.diff(busy)
    pace = _weighted_quantile(gap[same].astype(np.float64), weight[1:][same], 0.5)
    cut = np.flatnonzero(~same | (gap > SPLIT_GAPS * pace)) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [busy.size]])
    lengths = (busy[ends - 1] - busy[starts] + 1).astype(np.float64)
    scale = _weighted_quantile(lengths, np.add.reduceat(weight, starts), SHORT_SHARE)
    flows = np.unique(flow)
    busy_bins = np.bincount(flow, minlength=int(flows[-1]) + 1)[flows].astype(np.float64)
    packets = np.maximum(scan.agg[flows, L.AGG_PACKETS].astype(np.float64), 1.0)
    flow_bytes = np.bincount(flow, weights=weight, minlength=int(flows[-1]) + 1)[flows]
    spacing = _weighted_quantile(busy_bins / packets, flow_bytes, 0.5)
    return scale * bin_ns, spacing * bin_ns


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    if cum[-1] <= 0:
        return float(np.median(values))
    return float(values[order][min(int(np.searchsorted(cum, q * cum[-1])), values.size - 1)])


Cells = TypeVar("Cells", StreamScan, HostFlows)


def coarsen(scan: Cells, factor: int) -> Cells:
    """The scan's (or a host's merged) series cells summed into bins FACTOR times wider (flows, counters and
    samples unchanged)."""
    if factor == 1 or scan.cell_bin.size == 0:
        return scan
    flow, wide, nbytes = sum_cells(scan.cell_flow, scan.cell_bin // factor, scan.cell_bytes)
    return replace(scan, cell_flow=flow.astype(scan.cell_flow.dtype), cell_bin=wide, cell_bytes=nbytes)


def coarsen_each(scans: list[StreamScan], factor: int) -> None:
    """Every scan of SCANS coarsened in place (coarsen), each host's cells at the read bin going as its coarse
    ones are made, and the heap given back every TRIM_HOSTS hosts.

    Why the trims: the received cells sit in glibc's heap (its mmap threshold rose past their size as the first
    were freed), and freed there they stayed resident while the coarse cells took new pages: at 512 hosts the
    process grew by 140 MB through the loop (409 -> 549 MB) before one trim at its end gave it back; trimmed
    every 64 hosts it shrinks all the way (409 -> 333 MB)."""
    for i in range(len(scans)):
        scans[i] = coarsen(scans[i], factor)
        if i % TRIM_HOSTS == TRIM_HOSTS - 1 or i == len(scans) - 1:
            give_back()

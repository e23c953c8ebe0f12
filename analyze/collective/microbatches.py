"""A pipeline boundary's micro-batches: how many cross it per iteration, how many are in flight, so the schedule and
its bubble.

Why from the packets: every micro-batch crosses a stage boundary twice, its activations forward as one burst and
their gradients back as one burst the other way, and the order of those bursts is the schedule. With m
micro-batches a step, a boundary whose upstream stage keeps k of them in flight carries F^k (BF)^(m-k) B^k per
step: k = 1, one micro-batch at a time through every stage (no two stages compute at once); k = m, GPipe (every
forward, then every backward); in between, 1F1B (k = stages - s at the boundary after stage s). Bursts are runs of
busy bins (BUSY of the direction's busiest bin; ACKs are a few percent) with an idle bin between them, each read
by its sender's capture and put on the reference clock (analyze.tables.clocks), and the whole capture's sequence is
matched
against each unit F^k (BF)^(m-k) B^k repeating once an iteration (all but MISSED_UNITS of them): the one whose
repeats explain most bursts wins, sure where they explain EXPLAINED of the bursts. A forward and a backward burst
in one bin leave their order unknown: where the bins merge micro-batches, the count is not read, and a finer --bin
may read it.

The bubble is the model's, for stages of equal time with communication not counted: one micro-batch at a time
leaves each of p stages idle (p-1)/p of the step; GPipe and 1F1B (p-1)/(m+p-1).

1F1B's steady state sends a micro-batch forward as the previous one's gradient comes back, so its bursts share
bins (a live two-stage run on these CPUs: its first two forwards merged into one burst, the rest collided): it is
read where its bursts come apart, else not at all, and a reading of one micro-batch at a time (FB repeated) whose
bursts share bins beyond CLASHES is left unsure, as that schedule never sends both ways at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

BUSY = 0.1  # a bin with this share of its direction's busiest bin or more belongs to a burst
EXPLAINED = 0.9  # whole units explaining this share of a boundary's bursts or more: sure
MISSED_UNITS = 2  # units may be missing (cut at the capture's ends) up to this many iterations
CLASHES = 0.05  # bursts sharing a bin with one the other way, beyond which one micro-batch at a time is unsure


@dataclass(frozen=True)
class Schedule:
    """A boundary's micro-batches per iteration (m), in flight (k), the schedule's name, the model's bubble share
    for `stages` stages, how sure, and the evidence in words."""

    micro_batches: int
    in_flight: int
    kind: str  # one_at_a_time | gpipe | 1f1b
    bubble_share: float
    confidence: float
    evidence: str


def burst_bins(t_ns: np.ndarray, nbytes: np.ndarray, bin_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """(first bin, last bin) of each burst of one direction: its busy bins (BUSY of its busiest), runs of
    consecutive ones as one burst."""
    if not len(t_ns):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    busy = np.sort(t_ns[nbytes >= BUSY * float(nbytes.max())] // bin_ns)
    new = np.r_[True, np.diff(busy) > 1]
    ends = np.r_[np.flatnonzero(new)[1:] - 1, len(busy) - 1]
    return busy[new], busy[ends]


def sequence(forward: tuple[np.ndarray, np.ndarray], backward: tuple[np.ndarray, np.ndarray]) -> str:
    """The bursts of both directions in time order as F and B; '?' for a pair of bursts of both directions that
    share a bin (their order unknown)."""
    marks = [(int(s), int(e), "F") for s, e in zip(*forward)] + [(int(s), int(e), "B") for s, e in zip(*backward)]
    marks.sort()
    out = []
    for i, (s, e, d) in enumerate(marks):
        clash = (i > 0 and marks[i - 1][1] >= s and marks[i - 1][2] != d) or (
            i + 1 < len(marks) and marks[i + 1][0] <= e and marks[i + 1][2] != d
        )
        out.append("?" if clash else d)
    return "".join(out)


def unit(m: int, k: int) -> str:
    """One iteration's bursts at a boundary with m micro-batches, k in flight."""
    return "F" * k + "BF" * (m - k) + "B" * k


def read_schedule(seq: str, iterations: int, stages: int) -> Optional[Schedule]:
    """The schedule whose unit's repeats explain most of SEQ (the boundary's bursts over the capture), for a job of
    ITERATIONS iterations and STAGES stages; None where no unit repeats in most iterations."""
    if iterations < 1 or stages < 2:
        return None
    most = (seq.count("F") + seq.count("B")) // (2 * max(1, iterations - MISSED_UNITS))
    best: Optional[tuple[int, int, int]] = None
    for m in range(1, most + 1):
        for k in range(1, m + 1):
            repeats = seq.count(unit(m, k))
            # once an iteration: one micro-batch at a time repeats FB m times an iteration, and reads as m = 1
            if iterations - MISSED_UNITS <= repeats <= iterations and (best is None or repeats * m > best[2] * best[0]):
                best = (m, k, repeats)
    if best is None:
        return None
    m, k, repeats = best
    explained = repeats * 2 * m / max(len(seq), 1)
    confidence = float(np.clip(0.5 + 0.5 * (explained - 0.5) / (EXPLAINED - 0.5), 0.0, 1.0))
    evidence = (
        f"{repeats} repeats of {unit(m, k)} (F: a burst of activations forward, B: of their gradients back) "
        f"explain {explained:.0%} of the boundary's {len(seq)} bursts"
    )
    if k == 1:
        kind, bubble = "one_at_a_time", (stages - 1) / stages
        clashes = seq.count("?") / max(len(seq), 1)
        if clashes > CLASHES:  # one at a time, the two directions never send at once; 1F1B's steady state does
            confidence = min(confidence, 0.5)
            evidence += f"; but {clashes:.0%} of them share a bin with one the other way, as 1F1B's would"
    else:
        kind, bubble = ("gpipe" if k == m else "1f1b"), (stages - 1) / (m + stages - 1)
    return Schedule(m, k, kind, round(bubble, 4), round(confidence, 3), evidence)


@dataclass(frozen=True)
class Cells:
    """A job's flow cells as arrays, once for all its boundaries: each cell's sender and receiver host, its time on
    the reference clock, its bytes."""

    src: np.ndarray
    dst: np.ndarray
    t_ns: np.ndarray
    nbytes: np.ndarray


def boundary_cells(series: pd.DataFrame, views: pd.Series, offsets: dict[str, int]) -> Cells:
    """SERIES (flow cells: flow_id, src_host, dst_host, t_ns, bytes) as Cells, VIEWS giving each flow's capturing
    host by flow id (the sender's, where both ends captured it) and OFFSETS each host's clock ahead of the
    reference's (analyze.tables.clocks), taken off its cells' times."""
    view = views.reindex(series["flow_id"]).astype(str)
    shift = view.map(offsets).fillna(0).to_numpy(np.int64)
    return Cells(
        src=series["src_host"].astype(str).to_numpy(),
        dst=series["dst_host"].astype(str).to_numpy(),
        t_ns=series["t_ns"].to_numpy(np.int64) - shift,
        nbytes=series["bytes"].to_numpy(np.float64),
    )


def boundary_sequence(cells: Cells, a: str, b: str, bin_ns: int) -> str:
    """The bursts between hosts A and B over the capture, A -> B written F."""
    parts = []
    for x, y in ((a, b), (b, a)):
        way = (cells.src == x) & (cells.dst == y)
        if not way.any():
            return ""
        times, inv = np.unique(cells.t_ns[way] // bin_ns, return_inverse=True)
        parts.append(burst_bins(times * bin_ns, np.bincount(inv, weights=cells.nbytes[way]), bin_ns))
    return sequence(parts[0], parts[1])


def boundary_schedule(
    cells: Cells, links: list[tuple[str, str]], bin_ns: int, iterations: int, stages: int
) -> Optional[Schedule]:
    """A boundary's schedule from its LINKS (host pairs, one per replica): each read both ways round (which end is
    upstream is whichever reads a schedule surer); the links must agree, else None."""
    found = []
    for a, b in links:
        seq = boundary_sequence(cells, a, b, bin_ns)
        flipped = seq.translate(str.maketrans("FB", "BF"))
        readings = [
            r for r in (read_schedule(seq, iterations, stages), read_schedule(flipped, iterations, stages)) if r
        ]
        if not readings:
            return None
        found.append(max(readings, key=lambda r: r.confidence))
    if not found or len({(r.micro_batches, r.in_flight) for r in found}) != 1:
        return None
    return min(found, key=lambda r: r.confidence)

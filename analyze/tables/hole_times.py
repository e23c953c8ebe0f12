"""When a capture missed what it missed (issue 47: coverage per time window).

Why: a sniffer falls behind in bursts, when the link is busiest, and an operator who reads "h3's capture holds 90 %"
next asks which part of the run to distrust. A flow's sequence numbers (TCP) or PSNs (RDMA) give how much of it a
capture missed (analyze.tables.capture_holes), not when. Where another capture saw the same flow, the windows in
which that one holds more of the flow's bytes are where the holes fell, and the flow's missing payload is spread
over them in proportion. A network loss is sent again and fills both captures alike, so it adds no such
difference; a flow no other capture saw is left untimed (untimed_missing_bytes). Only gapped captures are read:
a whole one costs nothing.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from analyze.model.result import Coverage
from analyze.read.fold import HostFlows
from analyze.tables.capture_holes import GAPPED, view_shortfall

HOLE_WINDOWS = 100  # a gapped capture's span is cut into at most this many windows of whole bins to place its holes
HOLE_STRETCHES = 20  # stretches kept per capture (the largest by missing payload), in time order


def hole_stretches(host_flows: Sequence[HostFlows], views: pd.DataFrame, bin_ns: int, held: list[Coverage]) -> None:
    """Set each gapped capture's holes and untimed_missing_bytes, HELD in host order; whole captures are left as
    they are. Windows are whole bins of the gapped host's span, so two captures' bins line up (their clocks'
    offsets, milliseconds, are well inside a window of a hundredth of the span)."""
    if not len(views):
        return
    host = views["host_index"].to_numpy()
    missing = views["missing_payload"].to_numpy(np.float64)
    local_index = views["local_index"].to_numpy()
    flow = views["flow_id"].to_numpy()
    # each flow's fullest view and the next: another capture's is the first whose host is not the gapped one
    order = np.lexsort((-views["bytes"].to_numpy(), view_shortfall(views), flow))
    starts = np.flatnonzero(np.r_[True, flow[order][1:] != flow[order][:-1]])
    fullest = np.full(int(flow.max()) + 1, -1, np.int64)
    second = np.full_like(fullest, -1)
    fullest[flow[order][starts]] = order[starts]
    more = starts[(starts + 1 < len(order))]
    more = more[flow[order][np.minimum(more + 1, len(order) - 1)] == flow[order][more]]
    second[flow[order][more]] = order[more + 1]
    for h, cov in enumerate(held):
        if cov.fraction >= 1 - GAPPED or cov.missing_payload_bytes <= 0 or not len(host_flows[h].cell_bin):
            continue
        hf = host_flows[h]
        first, last = int(hf.cell_bin.min()), int(hf.cell_bin.max())
        width = max(1, -(-(last - first + 1) // HOLE_WINDOWS))  # bins per window
        n_windows = (last - first) // width + 1
        rows = np.flatnonzero((host == h) & (missing > 0))
        here = _window_bytes(hf, local_index[rows], first, width, n_windows)
        there = np.zeros_like(here)
        ref = fullest[flow[rows]]
        ref = np.where((ref >= 0) & (host[np.maximum(ref, 0)] == h), second[flow[rows]], ref)
        have = ref >= 0
        for g in np.unique(host[ref[have]]):
            mine = np.flatnonzero(have & (host[np.maximum(ref, 0)] == g))
            there[mine] = _window_bytes(host_flows[g], local_index[ref[mine]], first, width, n_windows)
        gap = np.maximum(there - here, 0.0)
        total = gap.sum(axis=1)
        timed = total > 0
        per_window = (missing[rows][timed, None] * gap[timed] / total[timed, None]).sum(axis=0)
        cov.untimed_missing_bytes = int(missing[rows][~timed].sum())
        cov.holes = _stretches(hf, first, width, n_windows, per_window, cov, bin_ns)


def _window_bytes(hf: HostFlows, local: np.ndarray, first: int, width: int, n_windows: int) -> np.ndarray:
    """[len(LOCAL), n_windows]: the bytes of HF's local flows LOCAL in each window of WIDTH bins from bin FIRST
    (cells outside the windows left out). HF's cells are in (flow, bin) order (fold.sum_cells)."""
    out = np.zeros((len(local), n_windows))
    lo, hi = np.searchsorted(hf.cell_flow, local), np.searchsorted(hf.cell_flow, local, side="right")
    counts = hi - lo
    if not counts.sum():
        return out
    row = np.repeat(np.arange(len(local)), counts)
    at = np.arange(int(counts.sum())) + np.repeat(lo - (np.cumsum(counts) - counts), counts)
    w = (hf.cell_bin[at] - first) // width
    inside = (w >= 0) & (w < n_windows)
    np.add.at(out, (row[inside], w[inside]), hf.cell_bytes[at][inside])
    return out


def _stretches(
    hf: HostFlows, first: int, width: int, n_windows: int, missed: np.ndarray, cov: Coverage, bin_ns: int
) -> list[list[float]]:
    """Runs of consecutive windows holding under 1 - GAPPED of their payload: [start_ns, end_ns, share held] each,
    the HOLE_STRETCHES largest by missing payload in time order. A window's payload held is its share of the
    capture's cell bytes times the payload the capture saw."""
    w = (hf.cell_bin - first) // width
    cells = np.bincount(
        w[(w >= 0) & (w < n_windows)], weights=hf.cell_bytes[(w >= 0) & (w < n_windows)], minlength=n_windows
    )
    seen = cells / max(float(cells.sum()), 1.0) * cov.seen_payload_bytes
    low = missed > GAPPED * (seen + missed)
    idle = seen + missed <= 0  # no traffic: a hole's stretch runs on through it (compute between ring steps)
    edges = np.diff(np.concatenate([[0], (low | idle).astype(np.int8), [0]]))
    runs = []
    for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
        gapped = np.flatnonzero(low[a:b])
        if len(gapped):
            a, b = a + int(gapped[0]), a + int(gapped[-1]) + 1
            runs.append((float(missed[a:b].sum()), int(a), int(b)))
    kept = sorted(sorted(runs, reverse=True)[:HOLE_STRETCHES], key=lambda r: r[1])
    return [
        [
            (first + a * width) * bin_ns,
            (first + b * width) * bin_ns,
            round(float(seen[a:b].sum() / (seen[a:b].sum() + m)), 4),
        ]
        for m, a, b in kept
    ]

"""Count each host's bytes per training iteration, once the iterations' windows are known.

Windows come from markers (markers.jsonl: ground truth when a job wrote them) or from the traffic itself
(analyze.collective.staircase). Everything works on the sparse binned series (flow_series), never on packets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pandas as pd

from analyze.model.findings import IterationRecord, Iterations, Percentiles
from analyze.read.groupsum import group_sum

ACTIVE_FRACTION = 0.01  # a bin is active at >= 1% of the 90th-percentile non-empty bin


def windows_from_markers(markers: pd.DataFrame) -> pd.DataFrame:
    """One window per iteration: earliest start and latest end over all ranks' markers."""
    g = markers.groupby("iteration").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
    return g.reset_index().sort_values("start_ns", kind="stable").reset_index(drop=True)


def assign(t_ns: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Window row of every bin starting at t_ns (-1 outside every window), by the bin's first nanosecond.

    So the bin a boundary cuts goes to the earlier window: a data-parallel step communicates at its end
    (the all-reduce after the backward pass) and begins with a forward pass that sends nothing. Judged by
    the bin's centre, the tail of a short all-reduce moved to the next iteration whenever the boundary fell
    in the first half of its bin.
    """
    ends = windows["end_ns"].to_numpy(np.int64)[-1:]
    return assign_cuts(t_ns, np.append(windows["start_ns"].to_numpy(np.int64), ends))


def assign_cuts(t_ns: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """assign() for windows given as their boundaries: window k is [cuts[k], cuts[k + 1])."""
    starts = cuts[:-1]
    if not len(starts):
        return np.full(len(t_ns), -1)
    k = np.searchsorted(starts, t_ns, side="right") - 1
    inside = (k >= 0) & (t_ns < cuts[1:][np.clip(k, 0, None)])
    return np.where(inside, k, -1)


def assign_by_receiver(series: pd.DataFrame, windows: pd.DataFrame, markers: Optional[pd.DataFrame]) -> np.ndarray:
    """Iteration row of every cell, cut at the receiving host's own marker windows where it has them.

    A host receives an iteration's bytes inside its own marker window, on its own clock: it cannot leave the
    all-reduce before the last of them arrives, and its sender's next-iteration bytes queue behind them on
    the same connection. The windows shared by all hosts start at the earliest rank's marker, and Horovod's
    ranks run up to tens of ms apart, so the shared cut moved part of a ring phase to the neighbouring
    iteration (seen: half an all-reduce, 7.5 MB of 15). The sender's windows are no better: its all-reduce
    returns with its last chunk still in the socket buffer, which drains into its next window (at 100 Mbit/s
    for tens of ms). Cells to hosts without markers are cut at the shared windows.
    """
    t = series["t_ns"].to_numpy(np.int64)
    k = assign(t, windows)
    if markers is None or markers.empty:
        return k
    shared = pd.Index(windows["iteration"])
    # cells grouped by receiver once: comparing a million host names per host cost seconds on big runs
    codes, names = pd.factorize(series["dst_host"])
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    for host, own in markers.groupby("host"):
        c = int(names.get_indexer([host])[0])
        if c < 0:
            continue
        mine = order[bounds[c] : bounds[c + 1]]
        host_windows = windows_from_markers(own)
        rows = np.append(shared.get_indexer(host_windows["iteration"]), -1)
        k[mine] = rows[assign(t[mine], host_windows)]
    return k


def _edge_codes(
    src: np.ndarray, src_names: list[str], dst: np.ndarray, dst_names: list[str], pairs: list[tuple[str, str]]
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's edge among PAIRS as a dense code (-1 off them), and each code's key source * len(dst_names) +
    destination; codes in key order, so sums grouped by code come in (source, destination) order. Without
    PAIRS every row's pair is an edge. Dense codes keep the (iteration, edge) sums a counted key space: over
    every (source, destination) pair it was hashed (512 hosts: 0.1 s and 100 MB more)."""
    nd = len(dst_names)
    key = np.multiply(src, nd, dtype=np.int64)
    key += dst
    if not pairs:
        keys = np.unique(key)
        return np.searchsorted(keys, key), keys
    a = pd.Index(src_names).get_indexer([p[0] for p in pairs])
    b = pd.Index(dst_names).get_indexer([p[1] for p in pairs])
    known = (a >= 0) & (b >= 0)
    keys = np.unique(a[known] * nd + b[known])
    if not len(keys):
        return np.full(len(key), -1), keys
    at = np.searchsorted(keys, key)  # in place from here: each temporary is a copy of the cells
    np.minimum(at, len(keys) - 1, out=at)
    off = keys[at] != key
    del key
    at[off] = -1
    return at, keys


def per_iteration(
    series: pd.DataFrame,
    windows: pd.DataFrame,
    edges: list[tuple[str, str]],
    bin_ns: int,
    markers: Optional[pd.DataFrame] = None,
    hosts: Optional[list[str]] = None,
    cell_iteration: Optional[np.ndarray] = None,
) -> list[IterationRecord]:
    """Per window: tx and rx bytes per host, bytes per edge, and first-to-last byte of the collective.

    `series` is flow_series with src_host/dst_host; host bytes count every inter-host flow, the
    communication time and edge bytes only the collective's edges. With `markers` (the ones `windows` came
    from) each host's received bytes are cut at its own windows. With `hosts`, the per-host maps name only
    those (not a multicast group a host sent router solicitations to). Sums run on integer codes (hosts
    factorized in name order), not pandas groupbys over host names: 64 hosts x 10,000 iterations x 2 M cells
    took 4.0-4.5 s that way, 1.25-1.7 s this way (the 8-host ring's whole collective step: 0.08 -> 0.035 s).
    `cell_iteration` gives each cell's window row directly (iterations inferred per host clock).
    """
    it = assign_by_receiver(series, windows, markers) if cell_iteration is None else cell_iteration
    keep = it >= 0
    src, src_names = pd.factorize(series["src_host"], sort=True)
    dst, dst_names = pd.factorize(series["dst_host"], sort=True)
    src_names, dst_names = list(src_names), list(dst_names)
    src, dst = src.astype(np.int32), dst.astype(np.int32)  # host codes: every copy below half the size
    # coded before the cells in windows are copied out, one column at a time: less held at once
    edge, keys = _edge_codes(src, src_names, dst, dst_names, edges)
    src = src[keep]
    dst = dst[keep]
    edge = edge[keep]
    it = it[keep]
    nbytes = series["bytes"].to_numpy(np.int64)[keep]
    n_it = len(windows)
    nd = len(dst_names)
    tx_by = _by_iteration(group_sum([it, src], [n_it, len(src_names)], nbytes), src_names.__getitem__, hosts)
    rx_by = _by_iteration(group_sum([it, dst], [n_it, nd], nbytes), dst_names.__getitem__, hosts)
    del src, dst
    on_edge = edge >= 0
    ie, edge, be = it[on_edge], edge[on_edge], nbytes[on_edge]
    del it, nbytes  # each a copy of the cells, and the spans below need room for three more
    edge_by = _by_iteration(
        group_sum([ie, edge], [n_it, len(keys)], be),
        lambda c: f"{src_names[keys[c] // nd]}->{dst_names[keys[c] % nd]}",
        None,
    )
    spans = _active_spans(ie, edge, len(keys), series["t_ns"].to_numpy(np.int64)[keep][on_edge], be, n_it)
    out = []
    for i, w in enumerate(windows.itertuples(index=False)):
        first, comm = (int(spans[i][0]), int(spans[i][1]) + bin_ns) if i in spans else (0, 0)
        by_host = tx_by.get(i, {})
        busiest = max(by_host.values(), default=0)
        out.append(
            IterationRecord(
                index=int(w.iteration),
                start_ns=int(w.start_ns),
                end_ns=int(w.end_ns),
                bytes_by_host=by_host,
                rx_bytes_by_host=rx_by.get(i, {}),
                bytes_by_edge=edge_by.get(i, {}),
                comm_start_ns=first,
                comm_ns=comm,
                rate_bps=busiest * 8e9 / comm if comm > 0 else 0.0,
            )
        )
    return out


def _by_iteration(
    grouped: tuple[list[np.ndarray], np.ndarray], name_of: Callable[[int], str], only: Optional[list[str]]
) -> dict[int, dict[str, int]]:
    """{iteration: {name: bytes}} from a group_sum over (iteration, code); with `only`, those names alone.
    Each name is made once per code and each iteration's map in one dict(zip()): an hour of training has
    tens of thousands of iterations, times the hosts."""
    (its, codes), sums = grouped
    inv, uniq = pd.factorize(codes)
    names = np.array([name_of(int(c)) for c in uniq], dtype=object)
    if only is not None:
        keep = np.isin(names, list(only))[inv]
        its, inv, sums = its[keep], inv[keep], sums[keep]
    labels, values = names[inv].tolist(), sums.tolist()
    cuts = np.flatnonzero(np.r_[True, its[1:] != its[:-1], True]) if len(its) else np.zeros(1, np.int64)
    return {int(its[a]): dict(zip(labels[a:b], values[a:b])) for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist())}


def _active_spans(
    it: np.ndarray, edge: np.ndarray, n_edges: int, t: np.ndarray, nbytes: np.ndarray, n_it: int
) -> dict[int, tuple[int, int]]:
    """Per iteration: the earliest first active bin over the edges (dense codes below N_EDGES), and the longest
    first-to-last active span of any one edge. Each edge's span is on one capture's clock, so hosts whose clocks
    differ do not stretch it; a stray handshake byte is not communication time (a bin is active at >=
    ACTIVE_FRACTION of the 90th-percentile (iteration, edge, bin) sum). A bin is counted from its iteration's
    first: an iteration spans few of the capture's bins, so the key space stays counted, not hashed (512 hosts:
    0.1 s and 100 MB less)."""
    if not len(t):
        return {}
    tcode, bins = pd.factorize(t, sort=True)
    first = np.full(n_it, len(bins), dtype=np.int64)
    np.minimum.at(first, it, tcode)
    tcode -= first[it]
    (its, ec, tc), sums = group_sum([it, edge, tcode], [n_it, n_edges, int(tcode.max()) + 1], nbytes)
    active = sums >= ACTIVE_FRACTION * np.percentile(sums, 90)
    its, ec, tb = its[active], ec[active], bins[tc[active] + first[its[active]]]
    if not len(its):
        return {}
    pair = its * n_edges + ec
    first = np.r_[True, pair[1:] != pair[:-1]]
    last = np.r_[pair[1:] != pair[:-1], True]
    p_it, p_first, p_span = its[first], tb[first], tb[last] - tb[first]
    cuts = np.flatnonzero(np.r_[True, p_it[1:] != p_it[:-1]])
    lo, span = np.minimum.reduceat(p_first, cuts), np.maximum.reduceat(p_span, cuts)
    return dict(zip(p_it[cuts].tolist(), zip(lo.tolist(), span.tolist())))


def host_percentiles(maps: Sequence[Mapping[str, float]], hosts: list[str]) -> Percentiles:
    """Median, p5 and p95 over every (iteration, host) value of MAPS (per iteration: host -> bytes), and each
    host's own median (a pipeline's stages send unlike bytes: one median over all hosts hides which)."""
    if not maps or not hosts:
        return Percentiles()
    vals = np.array([[m.get(h, 0) for h in hosts] for m in maps], dtype=np.float64)
    return Percentiles(
        median=float(np.median(vals)),
        p5=float(np.percentile(vals, 5)),
        p95=float(np.percentile(vals, 95)),
        by_host={h: float(x) for h, x in zip(hosts, np.median(vals, axis=0))},
    )


def per_ring_send(
    maps: Sequence[Mapping[str, float]], hosts: list[str], sends: Optional[dict[str, int]]
) -> Optional[float]:
    """The median over every (iteration, host) of what one of the host's ring sends carried: its bytes divided by
    how many of its ranks send to a rank on another host (SENDS; one each when None). A host whose ranks sit
    interleaved with other hosts' in the ring (round-robin placement) sends 2(W-1)/W x S once per such rank."""
    vals = np.array([m.get(h, 0) / max(1, (sends or {}).get(h, 1)) for m in maps for h in hosts], dtype=np.float64)
    return float(np.median(vals)) if len(vals) else None


@dataclass
class Theory:
    """S implied by the bytes each host sends per ring send, with the parameters it stands for, and measured over
    theory where S is known (None where unknown)."""

    ring_size: int
    implied_gradient_bytes: Optional[float] = None
    implied_params_fp32: Optional[float] = None
    implied_params_fp16: Optional[float] = None
    theory_bytes_per_host: Optional[float] = None
    theory_ratio: Optional[float] = None

    def into(self, its: Iterations) -> None:
        """Set on ITS, whose fields these are."""
        its.ring_size, its.theory_bytes_per_host, its.theory_ratio = (
            self.ring_size,
            self.theory_bytes_per_host,
            self.theory_ratio,
        )
        its.implied_gradient_bytes, its.implied_params_fp32, its.implied_params_fp16 = (
            self.implied_gradient_bytes,
            self.implied_params_fp32,
            self.implied_params_fp16,
        )


def ring_theory(
    bytes_per_host: Optional[float], n: int, gradient_bytes: Optional[float], factor: Optional[float] = None
) -> Theory:
    """Implied S (and parameters) and measured/theory where each host sends `factor` x S per ring send: by default
    a ring all-reduce's 2(N-1)/N (analyze.collective.pattern gives the others)."""
    out = Theory(ring_size=n)
    if n < 2 or not bytes_per_host:
        return out
    factor = factor or 2 * (n - 1) / n
    s = bytes_per_host / factor
    out.implied_gradient_bytes, out.implied_params_fp32, out.implied_params_fp16 = s, s / 4, s / 2
    if gradient_bytes:
        out.theory_bytes_per_host = factor * gradient_bytes
        out.theory_ratio = bytes_per_host / (factor * gradient_bytes)
    return out


__all__ = [
    "windows_from_markers",
    "per_iteration",
    "host_percentiles",
    "per_ring_send",
    "ring_theory",
    "assign",
    "assign_cuts",
    "assign_by_receiver",
]

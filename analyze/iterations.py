"""Cut the capture into training iterations and count each host's bytes per iteration.

Markers (markers.jsonl) are ground truth when a job wrote them. Without them the traffic itself shows the
iterations: a data-parallel job all-reduces once per step, so the collective's rate series is bursts
separated by forward-pass silences. Two independent views are taken and must agree for a high confidence:
gap segmentation (split the active bins at the idle runs that are much longer than the idle runs inside
a burst) and the autocorrelation period of the binned rate. Everything works on the sparse binned series
(flow_series), never on packets.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from analyze.groupsum import group_sum

GAP_JUMP = 3.0  # a separating idle run is >= 3x longer than the longest idle run inside a burst
SMALL_BURST = 0.2  # bursts under 20% of the median burst's bytes are setup/teardown, not iterations
ACTIVE_FRACTION = 0.01  # a bin is active at >= 1% of the 90th-percentile non-empty bin
MAX_SUBMULTIPLE = 5  # the autocorrelation peak found may be up to this multiple of the period
MAX_DENSE_BINS = 1 << 21  # longer spans are inferred on coarser bins so memory and FFT time stay bounded


def windows_from_markers(markers: pd.DataFrame) -> pd.DataFrame:
    """One window per iteration: earliest start and latest end over all ranks' markers."""
    g = markers.groupby("iteration").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
    return g.reset_index().sort_values("start_ns", kind="stable").reset_index(drop=True)


def dense_activity(series: pd.DataFrame, bin_ns: int) -> tuple[int, np.ndarray]:
    """Bytes per bin over the whole span (first bin's t_ns, dense array) from a sparse series."""
    t = series["t_ns"].to_numpy(np.int64)
    b0 = int(t.min()) // bin_ns
    idx = t // bin_ns - b0
    return b0 * bin_ns, np.bincount(idx, weights=series["bytes"].to_numpy(np.float64), minlength=int(idx.max()) + 1)


def autocorr_period(a: np.ndarray) -> tuple[Optional[int], float]:
    """The dominant period in bins (first autocorrelation peak after it falls below zero) and its height."""
    n = len(a)
    if n < 6:
        return None, 0.0
    x = a - a.mean()
    f = np.fft.rfft(x, 2 * n)
    ac = np.fft.irfft(f * np.conj(f))[:n]
    if ac[0] <= 0:
        return None, 0.0
    ac = ac / ac[0]
    neg = np.nonzero(ac < 0)[0]
    if not len(neg) or neg[0] >= n // 2:
        return None, 0.0
    lo = int(neg[0])
    # normalise by the overlap so late lags are not penalised for having fewer terms
    seg = ac[lo:n // 2 + 1] * n / (n - np.arange(lo, n // 2 + 1))
    if seg.max() <= 0:
        return None, 0.0
    # multiples of the period peak as high as the period itself: take the first peak near the top
    k = int(np.nonzero(seg >= 0.9 * seg.max())[0][0])
    while k + 1 < len(seg) and seg[k + 1] > seg[k]:
        k += 1
    # with few periods and uneven bursts the overlap normalisation can still lift a multiple above the
    # period (seen: 6 all-reduces found at twice their spacing); the period is the shortest lag k/m whose
    # own raw autocorrelation peak comes close (0.8x) to that of the lag found
    best = lo + k
    for m in range(min(MAX_SUBMULTIPLE, best // max(lo, 1)), 1, -1):
        c = int(round(best / m))
        j0 = max(c - 2, lo)
        near = ac[j0:c + 3]
        if len(near) and near.max() >= 0.8 * ac[best]:
            k = j0 + int(np.argmax(near)) - lo
            break
    return lo + k, float(min(1.0, max(0.0, seg[k])))


def gap_segments(a: np.ndarray) -> tuple[list[tuple[int, int]], int]:
    """Bursts as (first, last) active bin, split at idle runs clearly longer than in-burst pauses.

    The split point is the largest ratio between consecutive distinct idle-run lengths, used only when it
    is at least GAP_JUMP: a job with no forward-pass silence gives no split (one burst).
    Returns the bursts and the threshold (0 when nothing split).
    """
    nz = a[a > 0]
    if not len(nz):
        return [], 0
    active = np.nonzero(a >= ACTIVE_FRACTION * np.percentile(nz, 90))[0]
    gaps = np.diff(active) - 1
    cut = 0
    uniq = np.unique(gaps[gaps > 0])
    if len(uniq):
        lengths = np.concatenate([[0], uniq]).astype(np.float64)
        ratio = lengths[1:] / np.maximum(lengths[:-1], 1.0)
        k = int(np.argmax(ratio))
        if ratio[k] >= GAP_JUMP:
            cut = int(lengths[k + 1])
    if cut == 0:
        return [(int(active[0]), int(active[-1]))], 0
    breaks = np.nonzero(gaps >= cut)[0]
    starts = np.concatenate([[active[0]], active[breaks + 1]])
    ends = np.concatenate([active[breaks], [active[-1]]])
    return [(int(s), int(e)) for s, e in zip(starts, ends)], cut


def infer_windows(series: pd.DataFrame, bin_ns: int) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Iteration windows from the collective's own traffic, with the method and how sure it is."""
    t = series["t_ns"].to_numpy(np.int64)
    coarsen = -(-((int(t.max()) - int(t.min())) // bin_ns + 1) // MAX_DENSE_BINS) if len(t) else 1
    bin_ns *= max(1, coarsen)
    t0, a = dense_activity(series, bin_ns)
    period, peak = autocorr_period(a)
    bursts, cut = gap_segments(a)
    info: dict[str, Any] = {"method": "gap_segmentation", "autocorrelation_period_ns": period and period * bin_ns,
                            "notes": []}
    if coarsen > 1:
        info["notes"].append(f"long capture: iterations inferred on {bin_ns / 1e6:g} ms bins")
    if bursts:
        sums = np.array([a[s:e + 1].sum() for s, e in bursts])
        keep = sums >= SMALL_BURST * np.median(sums)
        if (~keep).any():
            info["notes"].append(f"{int((~keep).sum())} small burst(s) (< {SMALL_BURST:.0%} of a median burst's "
                                 f"bytes) left out as setup/teardown traffic")
        bursts = [b for b, k in zip(bursts, keep) if k]
        sums = sums[keep]
    if len(bursts) >= 2:
        starts = np.array([s for s, _ in bursts], dtype=np.float64)
        spacing = np.diff(starts)
        spread_bytes = float(np.std(sums) / np.mean(sums))
        spread_gap = float(np.std(spacing) / np.mean(spacing)) if len(spacing) > 1 else 0.5
        agree = period is not None and abs(np.median(spacing) - period) <= 0.15 * period + 1
        conf = 0.4 * max(0.0, 1 - spread_bytes) + 0.3 * max(0.0, 1 - spread_gap) + (0.3 if agree else 0.0)
        info["notes"].append(f"{len(bursts)} traffic bursts split at idle runs of >= {cut * bin_ns / 1e6:g} ms; "
                             + ("the autocorrelation period agrees" if agree else
                                "the autocorrelation period does not confirm the spacing"))
        if agree:
            info["method"] = "gap_segmentation+autocorrelation"
    elif period is not None and peak > 0.3:
        info["method"] = "autocorrelation"
        active = np.nonzero(a)[0]
        edges = np.arange(active[0], active[-1] + 1, period)
        bursts = [(int(s), int(min(s + period, len(a)) - 1)) for s in edges]
        conf = 0.7 * peak
        info["notes"].append("no forward-pass silences between bursts; iterations cut at the autocorrelation "
                             "period of the rate")
    else:
        conf = 0.2 if bursts else 0.0
        info["notes"].append("traffic shows no repeating bursts; one window covers it all")
    info["confidence"] = round(float(min(1.0, conf)), 3)
    w = pd.DataFrame({"start_ns": [t0 + s * bin_ns for s, _ in bursts],
                      "end_ns": [t0 + (e + 1) * bin_ns for _, e in bursts]})
    w.insert(0, "iteration", np.arange(len(w)))
    return w, info


def assign(t_ns: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Window row of every bin starting at t_ns (-1 outside every window), by the bin's first nanosecond.

    So the bin a boundary cuts goes to the earlier window: a data-parallel step communicates at its end
    (the all-reduce after the backward pass) and begins with a forward pass that sends nothing. Judged by
    the bin's centre, the tail of a short all-reduce moved to the next iteration whenever the boundary fell
    in the first half of its bin.
    """
    starts = windows["start_ns"].to_numpy(np.int64)
    if not len(starts):
        return np.full(len(t_ns), -1)
    stops = np.append(starts[1:], windows["end_ns"].to_numpy(np.int64)[-1])
    k = np.searchsorted(starts, t_ns, side="right") - 1
    inside = (k >= 0) & (t_ns < stops[np.clip(k, 0, None)])
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
        mine = order[bounds[c]:bounds[c + 1]]
        host_windows = windows_from_markers(own)
        rows = np.append(shared.get_indexer(host_windows["iteration"]), -1)
        k[mine] = rows[assign(t[mine], host_windows)]
    return k


def on_pairs(series: pd.DataFrame, pairs: list[tuple[str, str]]) -> np.ndarray:
    """Rows whose (src_host, dst_host) is one of `pairs` (hosts factorized to codes, then one table lookup)."""
    src, src_names = pd.factorize(series["src_host"])
    dst, dst_names = pd.factorize(series["dst_host"])
    return _pair_mask(src, list(src_names), dst, list(dst_names), pairs)


def _pair_mask(src: np.ndarray, src_names: list[str], dst: np.ndarray, dst_names: list[str],
               pairs: list[tuple[str, str]]) -> np.ndarray:
    """One lookup in a hosts x hosts table per row: a MultiIndex of a million string pairs took 0.3 s."""
    if not pairs:
        return np.zeros(len(src), dtype=bool)
    want = set(pairs)
    table = np.zeros((len(src_names) + 1, len(dst_names) + 1), dtype=bool)  # code -1 (no host) hits the last
    for i, a in enumerate(src_names):
        for j, b in enumerate(dst_names):
            table[i, j] = (a, b) in want
    return table[src, dst]


def per_iteration(series: pd.DataFrame, windows: pd.DataFrame, edges: list[tuple[str, str]], bin_ns: int,
                  markers: Optional[pd.DataFrame] = None, hosts: Optional[list[str]] = None) -> list[dict[str, Any]]:
    """Per window: tx and rx bytes per host, bytes per edge, and first-to-last byte of the collective.

    `series` is flow_series with src_host/dst_host; host bytes count every inter-host flow, the
    communication time and edge bytes only the collective's edges. With `markers` (the ones `windows` came
    from) each host's received bytes are cut at its own windows. With `hosts`, the per-host maps name only
    those (not a multicast group a host sent router solicitations to). Sums run on integer codes (hosts
    factorized in name order), not pandas groupbys over host names: 64 hosts x 10,000 iterations x 2 M cells
    took 4.0-4.5 s that way, 1.25-1.7 s this way (the 8-host ring's whole collective step: 0.08 -> 0.035 s).
    """
    it = assign_by_receiver(series, windows, markers)
    keep = it >= 0
    src, src_names = pd.factorize(series["src_host"], sort=True)
    dst, dst_names = pd.factorize(series["dst_host"], sort=True)
    src_names, dst_names = list(src_names), list(dst_names)
    on_edge = _pair_mask(src, src_names, dst, dst_names, edges)[keep] if edges else np.ones(int(keep.sum()), bool)
    it, src, dst = it[keep], src[keep], dst[keep]
    nbytes = series["bytes"].to_numpy(np.int64)[keep]
    t = series["t_ns"].to_numpy(np.int64)[keep]
    n_it = len(windows)
    nd = len(dst_names)
    tx_by = _by_iteration(group_sum([it, src], [n_it, len(src_names)], nbytes), src_names.__getitem__, hosts)
    rx_by = _by_iteration(group_sum([it, dst], [n_it, nd], nbytes), dst_names.__getitem__, hosts)
    ie, edge, be = it[on_edge], src[on_edge] * nd + dst[on_edge], nbytes[on_edge]
    edge_by = _by_iteration(group_sum([ie, edge], [n_it, len(src_names) * nd], be),
                            lambda c: f"{src_names[c // nd]}->{dst_names[c % nd]}", None)
    spans = _active_spans(ie, t[on_edge], be, n_it)
    out = []
    for i, w in enumerate(windows.itertuples(index=False)):
        first, last = (int(spans[i][0]), int(spans[i][1]) + bin_ns) if i in spans else (0, 0)
        by_host = tx_by.get(i, {})
        comm = last - first
        busiest = max(by_host.values(), default=0)
        out.append({
            "index": int(w.iteration), "start_ns": int(w.start_ns), "end_ns": int(w.end_ns),
            "bytes_by_host": by_host, "rx_bytes_by_host": rx_by.get(i, {}), "bytes_by_edge": edge_by.get(i, {}),
            "comm_start_ns": first, "comm_ns": comm,
            "rate_bps": busiest * 8e9 / comm if comm > 0 else 0.0,
        })
    return out


def _by_iteration(grouped: tuple[list[np.ndarray], np.ndarray], name_of: Callable[[int], str],
                  only: Optional[list[str]]) -> dict[int, dict[str, int]]:
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


def _active_spans(it: np.ndarray, t: np.ndarray, nbytes: np.ndarray, n_it: int) -> dict[int, tuple[int, int]]:
    """First and last *active* bin of each iteration's collective: a stray handshake byte is not communication
    time (a bin is active at >= ACTIVE_FRACTION of the 90th-percentile (iteration, bin) sum)."""
    if not len(t):
        return {}
    tcode, bins = pd.factorize(t, sort=True)
    (its, tc), sums = group_sum([it, tcode], [n_it, len(bins)], nbytes)
    active = sums >= ACTIVE_FRACTION * np.percentile(sums, 90)
    its, tb = its[active], bins[tc[active]]
    if not len(its):
        return {}
    first = np.r_[True, its[1:] != its[:-1]]
    last = np.r_[its[1:] != its[:-1], True]
    return dict(zip(its[first].tolist(), zip(tb[first].tolist(), tb[last].tolist())))


def host_percentiles(per_it: list[dict[str, Any]], key: str, hosts: list[str]) -> dict[str, Optional[float]]:
    """Median, p5 and p95 over every (iteration, host) value of a per-iteration byte map."""
    vals = np.array([it[key].get(h, 0) for it in per_it for h in hosts], dtype=np.float64)
    if not len(vals):
        return {"median": None, "p5": None, "p95": None}
    return {"median": float(np.median(vals)), "p5": float(np.percentile(vals, 5)),
            "p95": float(np.percentile(vals, 95))}


def ring_theory(bytes_per_host: Optional[float], n: int, gradient_bytes: Optional[float]) -> dict[str, Any]:
    """Ring all-reduce: each host sends 2(N-1)/N x S. Implied S (and parameters), measured/theory."""
    out: dict[str, Any] = {"ring_size": n, "implied_gradient_bytes": None, "implied_params_fp32": None,
                           "implied_params_fp16": None, "theory_bytes_per_host": None, "theory_ratio": None}
    if n < 2 or not bytes_per_host:
        return out
    factor = 2 * (n - 1) / n
    s = bytes_per_host / factor
    out.update(implied_gradient_bytes=s, implied_params_fp32=s / 4, implied_params_fp16=s / 2)
    if gradient_bytes:
        out["theory_bytes_per_host"] = factor * gradient_bytes
        out["theory_ratio"] = bytes_per_host / (factor * gradient_bytes)
    return out


__all__ = ["on_pairs", "windows_from_markers", "infer_windows", "per_iteration", "host_percentiles", "ring_theory",
           "autocorr_period", "gap_segments", "dense_activity", "assign", "assign_by_receiver"]

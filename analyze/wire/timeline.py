"""When each iteration's bytes leave: the wire's own timeline of compute and communication, for the what-if.

Why from the wire: an iteration is compute the link cannot see (forward, the backward before the first bucket,
the optimizer) and a communication window in which the link either sends or waits for the next bucket. The what-if
(analyze.whatif.wire_replay) needs how long each lasts and when each bucket's bytes could have left; the ring
model's stand-in of a backward pass of 0.67·T cannot reproduce the iteration it was measured on.

Each host is kept apart: per bin, the bytes it sent to the job's other hosts, on the reference clock. A mean over
hosts hid the idle link: a ring's hosts finish an all-reduce up to a chunk's transfer apart (80 ms at 100 Mbit/s),
so one host's forward pass overlapped another's last send. At most MAX_HOSTS hosts (evenly spread) and
MAX_SAMPLED iterations (evenly spread, the first and last left out: warm-up and teardown) are kept, so the record
stays small at 4,000 hosts. Each host's iterations are cut in its longest run of idle bins near each boundary the
iteration analysis found (a marker window can open after its first bucket left, on another rank's clock); where
the link never idles, at that boundary.
"""

from __future__ import annotations

from typing import Collection, Optional

import numpy as np

from analyze.model.findings import TimelineIteration, WireTimeline
from analyze.model.result import Result
from analyze.tables.hosts import address_hosts, flow_hosts
from analyze.wire.transport import clock_shift, iteration_windows

__all__ = ["wire_timeline", "ACTIVE_SHARE", "MAX_SAMPLED", "MAX_HOSTS"]

MAX_SAMPLED = 16  # iterations kept per host: the what-if averages over them
MAX_HOSTS = 8  # hosts kept, evenly spread over the senders by name
ACTIVE_SHARE = 0.01  # a bin with under this share of the host's usual busy bin (its 90th percentile) is idle
PEAK_PERCENTILE = 99  # the job's peak rate: the sampled hosts' busy bins' 99th percentile


def wire_timeline(result: Result, only: Optional[Collection[str]] = None) -> Optional[WireTimeline]:
    """The sampled iterations of RESULT's job on its sampled hosts, or on the hosts named ONLY (the per-link
    what-if replays the host whose link it speeds up), as the wire shows them (None without iterations, tables,
    link speeds or any of those hosts sending)."""
    its, tables = result.iterations, result.tables
    if its is None or tables is None or its.count < 2 or tables.flow_series.empty:
        return None
    hosts = [h for h in result.hosts if h.link_speed_bps]
    order = sorted(h.name for h in hosts)
    if len(order) < 2:
        return None
    # at the width chosen from the traffic whatever --bin says (Tables.fill_series), as the transport's judgments
    # are: the what-if's T moved 55-56 ms and its efficiency 0.89-0.90 at --bin 2.5-10 ms on the example
    series, bin_ns = tables.fill_series(int(result.bin_ns))
    # hosts coded per flow (a small table), then looked up per cell: no string work per cell
    fh = flow_hosts(tables.flows, address_hosts(result.hosts))
    names = np.array(order)
    flow_ids = fh["flow_id"].to_numpy(np.int64)
    flow = series["flow_id"].to_numpy(np.int64)
    # every cell's flow has a row (-1: ends unknown), and the cell columns are worked in place: each temporary
    # is a copy of the cells (23 MB at 512 hosts)
    src_of = np.full(int(max(flow_ids.max(initial=0), flow.max(initial=0))) + 1, -1, np.int64)
    dst_of = src_of.copy()
    for column, table in (("src_host", src_of), ("dst_host", dst_of)):
        ends = fh[column].to_numpy().astype(str)
        code_of = np.searchsorted(names, ends).clip(0, len(names) - 1)
        table[flow_ids] = np.where(names[code_of] == ends, code_of, -1)
    code, to = src_of[flow], dst_of[flow]
    known = (code >= 0) & (to >= 0) & (code != to)
    if not known.any():
        return None
    code, to = code[known], to[known]
    t = series["t_ns"].to_numpy(np.int64)[known]
    t -= clock_shift(result, order)[code]
    nbytes = series["bytes"].to_numpy()[known].astype(np.float64)
    first = int(t.min()) // bin_ns
    cell = t // bin_ns
    cell -= first
    del t
    length = int(cell.max()) + 1
    senders = np.unique(code)
    if only is not None:
        chosen = senders[np.isin(names[senders], list(only))]
    else:
        chosen = senders[np.unique(np.linspace(0, len(senders) - 1, min(MAX_HOSTS, len(senders))).astype(np.int64))]
    windows = iteration_windows(result, its)
    kept = _sample(len(windows))
    wanted = sorted({b for k in kept for b in (k, k + 1)})
    rows, busy_bins = [], []
    for c in chosen.tolist():
        mine, theirs = code == c, to == c
        per_bin = np.bincount(cell[mine], weights=nbytes[mine], minlength=length)
        received = np.bincount(cell[theirs], weights=nbytes[theirs], minlength=length)
        busy = per_bin[per_bin > 0]
        quiet = per_bin < ACTIVE_SHARE * float(np.percentile(busy, 90))
        heard = received[received > 0]
        # idle: neither sending nor receiving (a host that waits for its predecessor's chunk is not computing)
        idle = quiet & (received < ACTIVE_SHARE * float(np.percentile(heard, 90)) if len(heard) else quiet)
        busy_bins.append(busy)
        cuts = _cuts(windows, first * bin_ns, bin_ns, idle, wanted)
        for k in kept:
            lo, hi = int(cuts[k]), int(cuts[k + 1])
            active = np.flatnonzero(~idle[lo:hi])
            if not len(active):
                continue
            a, z = lo + int(active[0]), lo + int(active[-1]) + 1
            rows.append(
                TimelineIteration(
                    index=int(its.per_iteration[k].index) if k < len(its.per_iteration) else k,
                    host=order[c],
                    period_ns=(hi - lo) * bin_ns,
                    comm_start_ns=(a - lo) * bin_ns,
                    bytes_per_bin=np.where(quiet[a:z], 0, per_bin[a:z]).astype(np.int64).tolist(),
                    idle_bins=np.flatnonzero(idle[a:z]).tolist(),
                )
            )
    if not rows:
        return None
    return WireTimeline(
        bin_ns=bin_ns,
        hosts=len(chosen),
        link_speed_bps=float(min(h.link_speed_bps or 0.0 for h in hosts)),
        peak_rate_bps=float(np.percentile(np.concatenate(busy_bins), PEAK_PERCENTILE)) * 8e9 / bin_ns,
        iterations=rows,
    )


def _cuts(windows: np.ndarray, origin_ns: int, bin_ns: int, idle: np.ndarray, wanted: list[int]) -> np.ndarray:
    """Bin indices cutting the iterations apart: each window's start (and the last one's end), the WANTED ones
    moved to the middle of the longest run of idle bins within half a period of it, where there is one."""
    starts = np.append(windows[:, 0], windows[-1, 1])
    at = np.clip((starts - origin_ns) // bin_ns, 0, len(idle))
    period = max(int(np.median(np.diff(at))), 1) if len(at) > 1 else len(idle)
    edges = np.diff(np.r_[0, idle.astype(np.int8), 0])
    run_start, run_end = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    middle, length = (run_start + run_end) // 2, run_end - run_start
    out = at.copy()
    lo = np.searchsorted(middle, at[wanted] - period // 2)
    hi = np.searchsorted(middle, at[wanted] + period // 2, side="right")
    for i, a, b in zip(wanted, lo.tolist(), hi.tolist()):
        if b > a:
            out[i] = middle[a + int(np.argmax(length[a:b]))]
    return np.maximum.accumulate(out)


def _sample(count: int) -> list[int]:
    """Up to MAX_SAMPLED iterations, evenly spread, without the first and last where there are five or more."""
    inner = list(range(1, count - 1)) if count >= 5 else list(range(count))
    if len(inner) <= MAX_SAMPLED:
        return inner
    return sorted({inner[int(i)] for i in np.linspace(0, len(inner) - 1, MAX_SAMPLED)})

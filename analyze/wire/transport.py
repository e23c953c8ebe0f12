"""Why a link is not full: TCP's behaviour per ring edge, and the limiter it points to.

Why here and from headers: NIC counters say how busy a link was, never why it was not busier. The read
path counts, per flow and in the same pass (analyze.read.layouts AGG_REV ... AGG_WIN_FULL_BYTES), what TCP
itself shows in its headers: bytes sent again, duplicate ACKs and SACKs, zero windows, and after every new
data segment the bytes in flight against the window the receiver advertised (scaled by the factor its SYN
announced). This module takes each data flow from its sender's capture (the ACKs there are the ones the
sender acted on), adds the round trips its sequence samples give (a byte's first send to the first ACK past
it, in the sender's capture: no clock between hosts involved), sums the flows per host pair, takes each edge's
rate while it sends from packet times (analyze.wire.send_rate: no bin enters it), and names per edge and for the
job the one limiter the evidence supports best:

    loss            bytes re-sent, duplicate ACKs, SACKs: recovery stalls the ring
    receive_window  in flight pinned at the advertised window (or the window closed)
    link            busy at line rate while it sends
    latency         each ring step carries less than a few round trips' worth of line rate
    socket          the edge runs over several connections (NCCL's socket transport) and one of them
                    sends at a fraction of the others' pace: the edge finishes each step when it does
    sender          none of those: in flight below the window, the link idle between sends (compute,
                    the framework, the CPU)
    none            the job barely communicates: the network is not what it waits for

The JSON `transport` section holds the verdict, its confidence and evidence, one row per edge and small
per-edge series (rate per bin, round trips over time) for the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TypedDict, TypeVar

import numpy as np
import pandas as pd

from analyze.confidence.thresholds import FILLS_LINK
from analyze.model.findings import EdgeIterations, EdgeSeries, Iterations, RdmaEdge, Socket, Transport, TransportEdge
from analyze.model.result import Result, Tables
from analyze.tables.capture_holes import GAPPED
from analyze.tables.hosts import address_hosts, flow_hosts
from analyze.tables.tcp_flows import ANSWERS, IN_FLIGHT, OWN, RESENT, ROUND_TRIP
from analyze.wire.send_rate import (
    DATA_SHARE,
    UNRESOLVED_CONFIDENCE,
    edge_send_rates,
    fill_note,
    fills_link,
    unresolved_evidence,
)

LOSS_FRACTION = 0.005  # re-sent bytes above this share of the edge's data: loss shapes the transfer
WINDOW_FULL_FRACTION = 0.2  # data sent with the window full above this share: the receiver holds it back
ZERO_WINDOW_SHARE = 0.05  # time at a zero window above this share of the edge's busy time
LATENCY_STEP_BDPS = 4.0  # ring steps smaller than this many bandwidth-delay products wait on round trips
NONE_BUSY_SHARE = 0.1  # edges busy less than this share of the job: communication is not what limits it
MIN_EDGE_SHARE = 0.01  # an edge carrying less than this share of the heaviest edge's bytes is not judged
# the limiters judged against the sender's line rate, and their most confidence where that rate is assumed
LINE_RATE_LIMITERS = ("link", "latency", "sender", "congestion")
UNKNOWN_LINE_RATE_CONFIDENCE = 0.5
SOCKET_LAG = 0.5  # a data socket sending below this share of its edge's others' pace (median) lags
RUN_GAP = 2  # bins between two runs of an edge's busy bins: a pause, not a bin the sends straddled
# ... and at least this share of the iteration period: shorter idles are the ring's own waits between its steps and
# buckets, which fine bins resolve and coarse ones do not (pause_ns)
PAUSE_SHARE = 0.05
PACE_PERCENTILE = 90  # an edge's pace: this percentile of its bins' rates (bins it began or ended in read low)
SERIES_POINTS = 400  # per edge and series in the JSON, at most
# edges whose series the JSON carries: the heaviest, those judged otherwise than the job, the rest. The report
# draws eight; at 512 hosts every edge's series made 17.7 of the JSON's 26 MB and a second of writing it
SERIES_EDGES = 64
_SUMMED = [c for c in (*OWN, *ANSWERS) if c != "inflight_max"]  # added up per edge; the max is taken


def _per_edge_rtt(code: np.ndarray, rtt: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Per edge code 0..n-1: samples, min, median and p99 of the round trips (NaN where none)."""
    span = int(rtt.max()) + 1 if len(rtt) else 1
    exact = np.issubdtype(rtt.dtype, np.integer) and np.issubdtype(code.dtype, np.integer)  # ns, as read
    if exact and len(rtt) and rtt.min() >= 0 and int(code.max()) < (1 << 62) // span:
        order = np.argsort(code * span + rtt)  # (edge, round trip) as one key: 3x a two-key lexsort (512 hosts)
    else:
        order = np.lexsort((rtt, code))
    code, rtt = code[order], rtt[order].astype(np.float64)
    count = np.bincount(code, minlength=n)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    out = {"samples": count}
    for name, q in (("min", 0.0), ("median", 0.5), ("p99", 0.99)):
        at = first + np.floor(q * np.maximum(count - 1, 0)).astype(np.int64)
        out[name] = np.where(count > 0, rtt[np.minimum(at, max(len(rtt) - 1, 0))] if len(rtt) else np.nan, np.nan)
    return out


def edge_rates(
    series: pd.DataFrame, code_of_flow: np.ndarray, link: np.ndarray, bin_ns: int, busy_threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each edge's series summed per bin: (edge code, bin start ns, utilization of the src's link, busy),
    in (edge, time) order."""
    flows = series["flow_id"].to_numpy(np.int64)
    known = flows < len(code_of_flow)
    code = np.where(known, code_of_flow[np.where(known, flows, 0)], -1)
    keep = code >= 0
    code, t, b = code[keep], series["t_ns"].to_numpy(np.int64)[keep], series["bytes"].to_numpy(np.float64)[keep]
    if not len(code):
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0), np.zeros(0, bool)
    # one int64 key per (edge, bin), sorted once: a row-wise unique over (code, t) pairs took 1.7 s at 512 hosts
    t0 = int(t.min())
    span = int(t.max() - t0) // bin_ns + 1
    keys, inverse = np.unique(code * span + (t - t0) // bin_ns, return_inverse=True)
    total = np.bincount(inverse.ravel(), weights=b, minlength=len(keys))
    edge = keys // span
    utilization = total * 8e9 / bin_ns / link[edge]
    return edge, t0 + (keys % span) * bin_ns, utilization, utilization >= busy_threshold


def edge_pace(code: np.ndarray, utilization: np.ndarray, n: int) -> np.ndarray:
    """Each edge's pace as a share of its link: the PACE_PERCENTILE of its bins' rates where it sent (0 where it
    never did). Computed once for all edges: the row's pace_bps and the sending bins both read it."""
    pace = np.zeros(n)
    if len(code):
        frame = pd.DataFrame({"code": code, "u": utilization})
        p = frame[frame["u"] > 0].groupby("code")["u"].quantile(PACE_PERCENTILE / 100)
        pace[p.index.to_numpy(np.int64)] = p.to_numpy(np.float64)
    return pace


def sending_bins(code: np.ndarray, utilization: np.ndarray, pace: np.ndarray, busy_threshold: float) -> np.ndarray:
    """The bins an edge sends in, per iteration (when it entered and left the collective): at least
    BUSY_THRESHOLD of the lesser of its link and its own PACE (edge_pace), never of the link alone.
    Why: a line rate assumed at 10 Gbit/s made the threshold ten times the one at the 1 Gbit/s given, and a late
    rank's entry moved a bin (155 against 145 ms lost in a CI run) or vanished with --link-speed. The lesser of the
    two is the same either way wherever the edge's pace is under the line rate it is told."""
    return utilization >= busy_threshold * np.minimum(pace[code], 1.0)


def _iteration_of(t: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """The iteration each time falls in (windows: [start, end) rows in time order), -1 outside every one."""
    if not len(windows):
        return np.full(len(t), -1, dtype=np.int64)
    i = np.searchsorted(windows[:, 0], t, side="right") - 1
    inside = (i >= 0) & (t < windows[np.maximum(i, 0), 1])
    return np.where(inside, i, -1)


def _per_iteration(
    bins: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    trips: tuple[np.ndarray, np.ndarray, np.ndarray],
    resent: tuple[np.ndarray, np.ndarray, np.ndarray],
    windows: np.ndarray,
    n: int,
    bin_ns: int,
) -> list[EdgeIterations]:
    """Per edge, for each iteration it sent in: its rate over its busy bins, the share of its communication
    span (first to last busy bin) it sat idle, waiting on a previous ring step or on the sender, when it began
    and stopped sending and where its last run of busy bins after a pause began (analyze.wire.stragglers reads
    who entered the collective late from them), the median round trip and the bytes re-sent. bins: (edge code,
    t on the reference clock, utilization, busy); trips and resent: (edge code, t on the reference clock, round
    trip or bytes)."""
    code, t, util, busy = bins
    k = len(windows)
    it = _iteration_of(t, windows)
    use = busy & (it >= 0)
    key = code[use] * k + it[use]
    size = n * k
    period = float(np.median(windows[:, 1] - windows[:, 0])) if len(windows) else 0.0
    tail = _last_runs(key, t[use], size, pause_ns(bin_ns, period))
    count = np.bincount(key, minlength=size)
    squares = np.bincount(key, weights=util[use] * util[use], minlength=size)
    total = np.bincount(key, weights=util[use], minlength=size)
    first = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(size, -1, dtype=np.int64)
    np.minimum.at(first, key, t[use])
    np.maximum.at(last, key, t[use])
    span = np.where(count > 0, (last - first) // bin_ns + 1, 1)
    r_code, r_t, r_ns = trips
    r_it = _iteration_of(r_t, windows)
    inside = r_it >= 0
    median = _per_edge_rtt(r_code[inside] * k + r_it[inside], r_ns[inside], size)["median"]
    x_code, x_t, x_bytes = resent
    x_it = _iteration_of(x_t, windows)
    x_in = x_it >= 0
    lost = np.bincount(x_code[x_in] * k + x_it[x_in], weights=x_bytes[x_in], minlength=size)
    out: list[EdgeIterations] = []
    for e in range(n):
        rows = np.flatnonzero(count[e * k : (e + 1) * k] > 0)
        at = e * k + rows
        out.append(
            EdgeIterations(
                index=[int(x) for x in rows],
                rate_while_busy=[round(float(x), 4) for x in squares[at] / total[at]],
                idle_share=[round(float(x), 4) for x in 1 - count[at] / span[at]],
                start_ns=[int(x) for x in first[at]],
                end_ns=[int(x) + bin_ns for x in last[at]],
                tail_ns=[int(x) if x > f else None for x, f in zip(tail[at], first[at])],
                rtt_median_ns=[_ns(x) for x in median[at]],
                resent_bytes=[int(x) for x in lost[at]],
            )
        )
    return out


def pause_ns(bin_ns: int, period_ns: float) -> float:
    """The shortest idle that parts two runs of an edge's sends: RUN_GAP bins, and PAUSE_SHARE of the iteration
    PERIOD_NS. In time, not bins alone, so that an edge's last run (where a late rank's entry shows) is the same at
    any bin: on a real 6-host ring with a late rank (fixtures/real-training/ddp-slow-rank-slow-link) two bins
    alone made 10 ms idles between buckets runs at 5 ms bins, and the late rank, 210 ms late at 10 and 20 ms, read
    as leading by 20 ms; with the period's share it reads 209-215 ms at 2, 5, 10 and 20 ms."""
    return max(RUN_GAP * bin_ns, PAUSE_SHARE * period_ns)


def _last_runs(key: np.ndarray, t: np.ndarray, size: int, gap_ns: float) -> np.ndarray:
    """Per key (edge x iteration), the start of its last run of bins: the last bin that follows an idle of more
    than GAP_NS (pause_ns), or its first bin."""
    order = np.lexsort((t, key))
    k, ts = key[order], t[order]
    onset = np.ones(len(k), bool)
    onset[1:] = (k[1:] != k[:-1]) | (ts[1:] - ts[:-1] > gap_ns)
    out = np.full(size, -1, dtype=np.int64)
    np.maximum.at(out, k[onset], ts[onset])
    return out


def _sockets(
    ft: pd.DataFrame, code: np.ndarray, n: int, flows: pd.DataFrame, series: pd.DataFrame, link: np.ndarray, bin_ns: int
) -> tuple[list[list[Socket]], np.ndarray]:
    """Per edge carried over several connections, each connection's ports, bytes, share of the edge's and pace
    (byte-weighted share of line rate over the bins it sent in), a data socket below SOCKET_LAG of its data
    siblings' median pace marked `lags`; [] for an edge of one connection. Why per socket: NCCL deals each ring
    step over its sockets round-robin, so they carry alike and the step ends when the slowest has sent its part;
    the edge's own rate shows only that it idles. Also per edge, the time the receiver held the lagging sockets'
    windows closed (0 where none lags)."""
    fid = ft["flow_id"].to_numpy(np.int64)
    per_edge = np.bincount(code, minlength=n)
    out: list[list[Socket]] = [[] for _ in range(n)]
    lag_closed = np.zeros(n)
    if not (per_edge > 1).any():
        return out, lag_closed
    row_of = np.full(max(int(fid.max()), int(series["flow_id"].max()) if len(series) else 0) + 1, -1, np.int64)
    row_of[fid] = np.arange(len(fid))
    at = row_of[series["flow_id"].to_numpy(np.int64)]
    keep = at >= 0
    at = at[keep]
    u = series["bytes"].to_numpy(np.float64)[keep] * 8e9 / bin_ns / link[code[at]]
    weight = np.bincount(at, weights=u, minlength=len(fid))
    rate = np.where(weight > 0, np.bincount(at, weights=u * u, minlength=len(fid)) / np.maximum(weight, 1e-300), np.nan)
    ports = flows.set_index("flow_id")[["sport", "dport"]].reindex(fid).to_numpy()
    payload = ft["payload_bytes"].to_numpy(np.int64)
    closed = ft["zero_window_ns"].to_numpy(np.float64)
    by_edge = np.lexsort((-payload, code))  # one sort, each edge's rows heaviest first: no scan per edge
    first = np.concatenate([[0], np.cumsum(per_edge)])
    for e in np.flatnonzero(per_edge > 1):
        rows = by_edge[first[e] : first[e + 1]]
        data = payload[rows] >= DATA_SHARE * payload[rows].max()
        pace = np.nanmedian(rate[rows][data]) if data.sum() >= 2 else np.nan
        total = max(1, int(payload[rows].sum()))
        out[e] = [
            Socket(
                sport=int(ports[r, 0]),
                dport=int(ports[r, 1]),
                payload_bytes=int(payload[r]),
                share=round(float(payload[r] / total), 4),
                rate_while_busy=None if not np.isfinite(rate[r]) else round(float(rate[r]), 4),
                data=bool(d),
                lags=bool(d and np.isfinite(pace) and np.isfinite(rate[r]) and rate[r] < SOCKET_LAG * pace),
            )
            for r, d in zip(rows, data)
        ]
        lag_closed[e] = sum(float(closed[r]) for r, s in zip(rows, out[e]) if s.lags)
    return out, lag_closed


def _lagging(row: TransportEdge) -> Optional[tuple[float, str]]:
    """The confidence and the evidence that ROW's edge waits for a lagging socket; None when none lags."""
    sockets = row.sockets
    slow = [s for s in sockets if s.lags]
    if not slow:
        return None
    data = [s for s in sockets if s.data]
    others = [s.rate_while_busy for s in data if not s.lags and s.rate_while_busy is not None]
    worst = min(slow, key=lambda s: s.rate_while_busy or 0.0)
    worst_rate = worst.rate_while_busy or 0.0
    pace = float(np.median(others)) if others else worst_rate / SOCKET_LAG
    mbit = row.link_speed_bps / 1e6
    names = ", ".join(f":{s.sport} -> :{s.dport}" for s in slow)
    return _margin(SOCKET_LAG, max(worst_rate / max(pace, 1e-12), 1e-9)), (
        f"{len(slow)} of its {len(data)} data sockets lag ({names}): {worst.share:.0%} of the edge's bytes at "
        f"{worst_rate * mbit:,.0f} Mbit/s while sending, the others at {pace * mbit:,.0f} Mbit/s "
        f"(median); each step ends when the slowest socket has sent its part"
    )


def thin(x: np.ndarray, n: int = SERIES_POINTS) -> np.ndarray:
    """At most N evenly spread indices into x."""
    return np.unique(np.linspace(0, len(x) - 1, n).astype(np.int64)) if len(x) > n else np.arange(len(x))


def _judge(row: TransportEdge, step_bdps: Optional[float], bin_ns: int) -> tuple[str, float, list[str]]:
    """The limiter an edge's evidence supports best, its confidence and the evidence in words."""
    evidence: list[str] = []
    loss = row.retransmitted_fraction
    full = row.window_full_fraction
    zero = row.zero_window_share or 0.0
    rate, burst = row.rate_while_busy, row.burst_rate
    link_full = fills_link(burst, rate)
    if loss >= LOSS_FRACTION:
        evidence.append(
            f"{loss:.2%} of bytes re-sent, {row.dup_acks:,} duplicate ACKs, {row.sack_acks:,} ACKs with SACK"
        )
        if row.rtt_median_ns is not None and row.rtt_p99_ns is not None:
            evidence.append(f"round trips median {row.rtt_median_ns / 1e6:.3g} ms, p99 {row.rtt_p99_ns / 1e6:.3g} ms")
        return "loss", _margin(loss, LOSS_FRACTION), evidence
    if (full is not None and full >= WINDOW_FULL_FRACTION) or zero >= ZERO_WINDOW_SHARE:
        if full is not None:
            evidence.append(f"{full:.0%} of data sent with the receiver's window full")
        if row.zero_windows:
            evidence.append(f"window closed {row.zero_windows:,} times ({zero:.1%} of busy time)")
        evidence.append(f"mean in flight {row.inflight_mean_bytes:,} B, mean window {row.window_mean_bytes:,} B")
        return (
            "receive_window",
            max(_margin(full or 0.0, WINDOW_FULL_FRACTION), _margin(zero, ZERO_WINDOW_SHARE)),
            evidence,
        )
    if link_full:
        shown = burst if burst is not None else rate
        assert shown is not None  # fills_link reads a full link from a rate it was given
        evidence.append(f"{shown:.0%} of line rate while sending")
        # as sure as the weaker reading: bins just over FILLS_LINK barely rule out waits between ring steps, and
        # just under it the edge is sender at UNRESOLVED_CONFIDENCE: no jump where a clock shift moves a bin
        return "link", _margin(min(shown, rate if rate is not None else shown), FILLS_LINK, full_at=1.0), evidence
    if step_bdps is not None and step_bdps < LATENCY_STEP_BDPS:
        evidence.append(
            f"each ring step carries {step_bdps:.2g} bandwidth-delay products (line rate × min round trip "
            f"{(row.rtt_min_ns or 0) / 1e6:.3g} ms): steps wait on round trips"
        )
        return "latency", _margin(LATENCY_STEP_BDPS, max(step_bdps, 1e-9)), evidence
    if link_full is None and burst is not None:
        evidence.append(unresolved_evidence(burst, rate, bin_ns))
    elif burst is not None or rate is not None:
        shown = burst if burst is not None else rate
        evidence.append(f"only {shown:.0%} of line rate while sending, little loss ({loss:.2%} re-sent)")
    if row.idle_in_communication is not None:
        evidence.append(
            f"the link idles {row.idle_in_communication:.0%} of each iteration's communication (median): "
            f"sends wait on the previous ring step or on the application"
        )
    if row.window_mean_bytes:
        evidence.append(
            f"in flight {row.inflight_mean_bytes:,} B on average against a {row.window_mean_bytes:,} B window"
        )
    shown = burst if burst is not None else rate
    if link_full is None or shown is None:
        return "sender", UNRESOLVED_CONFIDENCE, evidence
    return "sender", _margin(FILLS_LINK, max(shown, 1e-9)), evidence


def _margin(value: float, threshold: float, full_at: Optional[float] = None) -> float:
    """Confidence from how far VALUE is past THRESHOLD: 0.5 at the threshold, 1 at twice it (or at FULL_AT)."""
    top = full_at if full_at is not None else 2 * threshold
    if top <= threshold:
        return 1.0
    return float(np.clip(0.5 + 0.5 * (value - threshold) / (top - threshold), 0.5, 1.0))


def _ns(ns: Any) -> Optional[int]:
    """A duration in whole nanoseconds, None where it was not measured (NaN)."""
    return None if ns is None or not np.isfinite(ns) else int(round(float(ns)))


# Others' share of a host's link (other traffic, another job), while the job's edge from it was busy, from which
# the edge is called `shared` rather than limited by its sender or its link: a 300 MB copy beside a DDP job took
# 40-60 % of it.
SHARED_SHARE = 0.2
Edge = TypeVar("Edge", TransportEdge, RdmaEdge)  # the edges set_aside_light sorts and marks, TCP's or RDMA's


@dataclass
class BusyBins:
    """Per edge, its busy bins (count), each busy bin weighed by its bytes (its utilization, the edge's link being
    one: a bin the edge only began or ended sending in counts for less than a full one), and the job's span."""

    bins: np.ndarray
    util: np.ndarray  # sum of utilization x weight over busy bins
    weight: np.ndarray  # sum of weights over busy bins
    span_bins: int
    bin_ns: int  # their width: the one chosen from the traffic (analyze.read.bin_choice), whatever --bin says


def busy_bins(
    e_code: np.ndarray, e_t: np.ndarray, e_util: np.ndarray, e_busy: np.ndarray, n: int, bin_ns: int
) -> BusyBins:
    """The busy bins of N edges from their bins (edge_rates: edge code, time, utilization, busy)."""
    weights = np.where(e_busy, e_util, 0.0)
    return BusyBins(
        bins=np.bincount(e_code[e_busy], minlength=n),
        util=np.bincount(e_code, weights=weights * e_util, minlength=n),
        weight=np.bincount(e_code, weights=weights, minlength=n),
        span_bins=int((e_t[e_busy].max() - e_t[e_busy].min()) // bin_ns + 1) if e_busy.any() else 0,
        bin_ns=bin_ns,
    )


def judged_rates(
    tables: Tables,
    code_of_flow: np.ndarray,
    link: np.ndarray,
    widths: tuple[int, float],
    at_bin: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    notes: list[str],
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], pd.DataFrame, int]:
    """The LINK edges' edge_rates at the width chosen from the traffic (Tables.fill_series), the series they were
    summed from and that width, so that a limiter, its sureness and the per-iteration figures the stragglers read
    are the same at any --bin; AT_BIN, the edge_rates at the result's bin, where that is the width. WIDTHS: the
    result's bin and busy threshold. Where --bin gave another width, NOTES say so."""
    bin_ns, threshold = widths
    fill, fill_ns = tables.fill_series(bin_ns)
    if fill_ns == bin_ns:
        return at_bin, fill, bin_ns
    notes.append(fill_note(fill_ns, bin_ns))
    return edge_rates(fill, code_of_flow, link, fill_ns, threshold), fill, fill_ns


class EdgeRates(TypedDict):
    """The rate fields TransportEdge and RdmaEdge share, typed so that mypy checks them where they are unpacked
    into either record's constructor (a dict of strings would let a misspelt key through to run time)."""

    rate_while_busy: Optional[float]
    burst_rate: Optional[float]
    busy_share: Optional[float]
    link_speed_bps: float


def rate_fields(busy: BusyBins, sending: np.ndarray, link: np.ndarray, i: int) -> EdgeRates:
    """Edge I's rates as its row shows them (TCP and RDMA alike): over its busy bins and in its bursts (from packet
    times), as shares of its sender's line rate, and the share of the job's span it was busy."""
    return {
        "rate_while_busy": float(busy.util[i] / busy.weight[i]) if busy.weight[i] > 0 else None,
        "burst_rate": float(sending[i] / link[i]) if np.isfinite(sending[i]) else None,
        "busy_share": float(busy.bins[i] / busy.span_bins) if busy.span_bins else None,
        "link_speed_bps": float(link[i]),
    }


def set_aside_light(edges: list[Edge], why: str) -> list[Edge]:
    """Sort EDGES heaviest first and leave unjudged those under MIN_EDGE_SHARE of the heaviest's bytes (WHY in
    their evidence); returns those."""
    edges.sort(key=lambda row: -row.payload_bytes)
    heaviest = edges[0].payload_bytes
    light = [row for row in edges if row.payload_bytes < MIN_EDGE_SHARE * heaviest]
    for row in light:
        row.limiter, row.confidence, row.evidence = None, 0.0, [why]
    return light


@dataclass
class _Edges:
    """The judged TCP edges' inputs as whole arrays, index i for PAIRS[i], prepared once (_prepare) so that each
    edge's row (_edge_row) only reads them."""

    pairs: Any  # (src, dst) per edge
    code: np.ndarray  # per data flow: its edge
    per: dict[str, np.ndarray]  # the summed counters per edge
    inflight_max: np.ndarray
    rtt: dict[str, np.ndarray]  # per edge: round-trip samples, min, median, p99
    link: np.ndarray  # the sender's line rate, bit/s
    busy: BusyBins
    sending: np.ndarray  # rate while sending, from packet times (bit/s)
    pace: np.ndarray
    per_it: list[EdgeIterations]
    sockets: list[list[Socket]]
    lag_closed: np.ndarray
    series_of: Callable[[int], EdgeSeries]  # edge i's series, thinned for the report (made for the edges shown)
    count: int  # iterations, where they are sure
    ring_n: int


def diagnose(result: Result, shared: Optional[dict[str, tuple[float, float, str]]] = None) -> Optional[Transport]:
    """The transport finding from the result's tables (None when it has no tables). SHARED: per sending host, the
    share of its link others took while the job's edges from it were busy, their rate (bit/s) and who (other
    traffic, another job: analyze.each_job); an edge whose sender's link others took SHARED_SHARE of or more is
    `shared`, naming them."""
    tables = result.tables
    if tables is None:
        return None
    out = Transport()
    held = {c.host: c.coverage.fraction for c in result.captures if c.coverage is not None}
    out.notes.extend(
        f"{host}: its sends are not judged: its capture holds {fraction:.1%} of its traffic, and its holes would "
        "read as pauses or losses"
        for host, fraction in held.items()
        if fraction < 1 - GAPPED
    )
    ft = tables.transport
    addr_host = address_hosts(result.hosts)
    captured = set(addr_host.values())
    if ft is not None and len(ft):
        ends = flow_hosts(tables.flows, addr_host).set_index("flow_id")[["src_host", "dst_host"]]
        src = ends["src_host"].reindex(ft["flow_id"]).to_numpy()
        dst = ends["dst_host"].reindex(ft["flow_id"]).to_numpy()
        judged = pd.Series(src).isin(captured).to_numpy() & pd.Series(dst).isin(captured).to_numpy() & (src != dst)
    else:
        judged = np.zeros(0, bool)
    if not judged.any():
        out.notes.append("no TCP data between two captured hosts, captured at its sender: nothing to diagnose")
        return out
    assert ft is not None
    e = _prepare(result, ft[judged], src[judged], dst[judged], out.notes)
    assumed = {h.name for h in result.hosts if h.link_speed_source == "assumed"}
    edges = [_edge_row(e, i, shared or {}, assumed) for i in range(len(e.pairs))]
    for row in set_aside_light(edges, "too little data to judge"):
        for socket in row.sockets:
            socket.lags = False
    out.edges = edges
    _verdict(out, [row for row in edges if row.limiter is not None])
    index = {pair: i for i, pair in enumerate(e.pairs)}
    for row in series_shown(edges, out.limiter):
        row.series = e.series_of(index[(row.src, row.dst)])
    for kind in SLOWEST_EDGE:
        slowest_edge_verdict(out, kind, [row for row in edges if row.limiter == kind], SLOWEST_EDGE[kind])
    return out


def _prepare(result: Result, ft: pd.DataFrame, src: np.ndarray, dst: np.ndarray, notes: list[str]) -> _Edges:
    """The judged data flows FT (sent from SRC to DST) summed per edge, with each edge's round trips, busy bins,
    rate while sending, pace, per-iteration figures, sockets and report series; what cannot be judged into NOTES."""
    tables = result.tables
    assert tables is not None and tables.transport_samples is not None
    samples = tables.transport_samples
    code, pairs = pd.factorize(pd.MultiIndex.from_arrays([src, dst]))
    n = len(pairs)
    per = {c: np.bincount(code, weights=ft[c].to_numpy(np.float64), minlength=n) for c in _SUMMED}
    inflight_max = np.zeros(n, np.int64)
    np.maximum.at(inflight_max, code, ft["inflight_max"].to_numpy(np.int64))
    code_of_flow = np.full(int(tables.flows["flow_id"].max()) + 1, -1, dtype=np.int64)
    code_of_flow[ft["flow_id"].to_numpy(np.int64)] = code
    s_code = code_of_flow[samples["flow_id"].to_numpy(np.int64)] if len(samples) else np.zeros(0, np.int64)
    s_what = samples["what"].cat.codes.to_numpy() if len(samples) else np.zeros(0, np.int8)
    s_t, s_value = samples["t_ns"].to_numpy(np.int64), samples["value"].to_numpy(np.int64)
    trips = (s_code >= 0) & (s_what == ROUND_TRIP)
    speeds = {h.name: float(h.link_speed_bps) for h in result.hosts}
    link = np.array([speeds[s] for s, _ in pairs], dtype=np.float64)
    bin_ns = int(result.bin_ns)
    e_code, e_t, e_util, e_busy = edge_rates(tables.flow_series, code_of_flow, link, bin_ns, result.busy_threshold)
    judged, fill, fill_ns = judged_rates(
        tables, code_of_flow, link, (bin_ns, result.busy_threshold), (e_code, e_t, e_util, e_busy), notes
    )
    j_code, j_t, j_util, _ = judged
    iterations = result.iterations or Iterations()
    if not (ft["window_scale"] >= 0).any():
        notes.append(
            "no connection's handshake was captured (long-lived collective connections): the receivers' window "
            "scale is unknown, so window-full cannot be judged; start the capture before the job to see it"
        )
    if not iterations.confident:
        notes.append("iterations are not known for sure: ring steps, and so latency, are not judged")
    shift = clock_shift(result, [s for s, _ in pairs])  # each edge's sender clock against the reference
    resent = (s_code >= 0) & (s_what == RESENT)
    pace = edge_pace(j_code, j_util, n)
    sockets, lag_closed = _sockets(ft, code, n, tables.flows, fill, link, fill_ns)
    bins_of = _split(e_code, np.ones(len(e_code), bool), n)
    trips_of = _split(s_code, trips, n)
    flight_of = _split(s_code, (s_code >= 0) & (s_what == IN_FLIGHT), n)
    resent_of = _split(s_code, resent, n)
    return _Edges(
        pairs=pairs,
        code=code,
        per=per,
        inflight_max=inflight_max,
        rtt=_per_edge_rtt(s_code[trips], s_value[trips], n),
        link=link,
        busy=busy_bins(*judged, n, fill_ns),
        sending=edge_send_rates(
            code, ft["send_rate_bps"].to_numpy(np.float64), ft["payload_bytes"].to_numpy(np.int64), n
        ),
        pace=pace,
        per_it=_per_iteration(
            (j_code, j_t - shift[j_code], j_util, sending_bins(j_code, j_util, pace, result.busy_threshold)),
            (s_code[trips], s_t[trips] - shift[s_code[trips]], s_value[trips]),
            (s_code[resent], s_t[resent] - shift[s_code[resent]], s_value[resent]),
            iteration_windows(result, iterations),
            n,
            fill_ns,
        ),
        sockets=sockets,
        lag_closed=lag_closed,
        series_of=lambda i: _series(
            (e_t[bins_of[i]], e_util[bins_of[i]]),
            (s_t[trips_of[i]], s_value[trips_of[i]]),
            (s_t[flight_of[i]], s_value[flight_of[i]]),
            (s_t[resent_of[i]], s_value[resent_of[i]]),
            bin_ns,
        ),
        count=iterations.count if iterations.confident else 0,
        ring_n=len(result.topology.order) if result.topology else 0,
    )


def _edge_row(e: _Edges, i: int, shared: dict[str, tuple[float, float, str]], assumed: set[str]) -> TransportEdge:
    """Edge I's row: its counters, round trips and rates, and the limiter they point to (a lagging socket or a
    link others took overrides what the edge's own evidence reads)."""
    s, d = e.pairs[i]
    per, stats, link = e.per, e.rtt, e.link
    payload = int(per["payload_bytes"][i])
    known = int(per["window_n"][i])
    zero_ns = float(per["zero_window_ns"][i])
    per_it = e.per_it[i]
    row = TransportEdge(
        src=s,
        dst=d,
        flows=int(np.count_nonzero(e.code == i)),
        payload_bytes=payload,
        retransmitted_bytes=int(per["retransmitted_bytes"][i]),
        retransmitted_fraction=float(per["retransmitted_bytes"][i] / payload) if payload else 0.0,
        out_of_order_bytes=int(per["out_of_order_bytes"][i]),
        dup_acks=int(per["dup_acks"][i]),
        sack_acks=int(per["sack_acks"][i]),
        zero_windows=int(per["zero_windows"][i]),
        zero_window_ns=_ns(zero_ns),
        zero_window_share=zero_ns / (e.busy.bins[i] * e.busy.bin_ns) if e.busy.bins[i] else None,
        inflight_mean_bytes=int(per["inflight_sum"][i] / max(1.0, per["inflight_n"][i])),
        inflight_max_bytes=int(e.inflight_max[i]),
        window_scale_known=known > 0,
        window_mean_bytes=int(per["window_sum"][i] / known) if known else None,
        window_full_fraction=float(per["window_full_bytes"][i] / payload) if known and payload else None,
        rtt_samples=int(stats["samples"][i]),
        rtt_min_ns=_ns(stats["min"][i]),
        rtt_median_ns=_ns(stats["median"][i]),
        rtt_p99_ns=_ns(stats["p99"][i]),
        **rate_fields(e.busy, e.sending, link, i),
        idle_in_communication=float(np.median(per_it.idle_share)) if per_it.idle_share else None,
        per_iteration=per_it,
        limiter=None,
        evidence=[],
        confidence=0.0,
        series=EdgeSeries(),  # filled for the edges shown (diagnose)
        sockets=e.sockets[i],
    )
    step_bdps = None
    if e.count and e.ring_n > 1 and stats["samples"][i]:
        step_bytes = payload / e.count / (2 * (e.ring_n - 1))
        step_bdps = step_bytes / (link[i] / 8 * stats["min"][i] / 1e9)
    row.limiter, confidence, row.evidence = _judge(row, step_bdps, e.busy.bin_ns)
    confidence = _overridden(row, confidence, bool(e.lag_closed[i] == 0), shared)
    row.confidence = round(confidence, 3)
    row.pace_bps = float(e.pace[i] * link[i]) if e.pace[i] > 0 else None
    line_rate_unknown(row, row.src in assumed)
    return row


def series_shown(edges: list[Edge], limiter: Optional[str]) -> list[Edge]:
    """The edges whose series the JSON carries, at most SERIES_EDGES (TCP's and RDMA's): the heaviest half of them
    (the report draws the heaviest judged ones), then those judged otherwise than the job (a slow or lossy edge
    among link-bound ones), then the rest by their bytes (EDGES come heaviest first)."""
    heavy = edges[: SERIES_EDGES // 2]
    odd = [row for row in edges[SERIES_EDGES // 2 :] if row.limiter is not None and row.limiter != limiter]
    return list({id(row): row for row in heavy + odd + edges}.values())[:SERIES_EDGES]


def _overridden(
    row: TransportEdge, confidence: float, lag_never_closed: bool, shared: dict[str, tuple[float, float, str]]
) -> float:
    """ROW's limiter where a lagging socket or others on the sender's link explain it better than the edge's own
    evidence (rewritten in ROW); returns the confidence that goes with it."""
    lagging = _lagging(row)
    # the receiver reads a step's parts in turn: while it waits for a lagging socket the others' windows fill
    # and close (a CI capture: closed 7 % of the busy time, "receive_window"), which the lag explains where the
    # lagging socket's own window never closed
    waits_on_lag = row.limiter == "receive_window" and lag_never_closed
    if lagging is not None and (row.limiter not in ("loss", "receive_window") or waits_on_lag):
        confidence, text = lagging
        if waits_on_lag:
            row.evidence = [
                f"its other sockets' windows closed while the receiver waited for the lagging one: "
                f"{'; '.join(row.evidence)}"
            ]
        row.limiter, row.evidence = "socket", [text, *row.evidence]
    share, rate, by = shared.get(row.src, (0.0, 0.0, ""))
    if share >= SHARED_SHARE and row.limiter not in ("loss", "receive_window", "socket"):
        row.evidence = [
            f"{by} took {share:.0%} of {row.src}'s link while this edge was busy "
            f"({rate / 1e6:,.0f} Mbit/s on average); its own evidence reads {row.limiter}-limited",
            *row.evidence,
        ]
        row.limiter, confidence = "shared", min(1.0, share / SHARED_SHARE / 2 + 0.5)
    return confidence


def line_rate_unknown(row: TransportEdge | RdmaEdge, assumed: bool) -> None:
    """Where the sender's link speed is ASSUMED (no --link-speed, none in its meta.json), a limiter read against
    line rate (LINE_RATE_LIMITERS) is unsure: the same DDP capture at 1 Gbit/s read "sender, 1.00, 9 % of line
    rate" against the 10 Gbit/s assumed and "link" when told 1 Gbit/s. The other limiters rest on the packets
    alone (re-sent bytes, the receiver's window, one socket against its siblings) and keep their confidence."""
    if not assumed or row.limiter not in LINE_RATE_LIMITERS:
        return
    row.confidence = min(row.confidence, UNKNOWN_LINE_RATE_CONFIDENCE)
    pace = getattr(row, "pace_bps", None)
    row.evidence.append(
        f"{row.src}'s link speed is not known (assumed {row.link_speed_bps / 1e9:g} Gbit/s): "
        f"{row.limiter} is judged against a line rate no one measured"
        + (f"; the edge sends at up to {pace / 1e6:,.0f} Mbit/s" if pace else "")
        + ": give --link-speed"
    )


def clock_shift(result: Result, hosts: Sequence[str]) -> np.ndarray:
    """Each named host's clock offset from the reference (analyze.tables.clocks; 0 where unknown), to subtract from its
    times so they sit on the reference's clock beside the iterations."""
    offsets = {h.name: h.offset_ns or 0 for h in (result.clock.hosts if result.clock else [])}
    return np.array([offsets.get(h, 0) for h in hosts], dtype=np.int64)


def iteration_windows(result: Result, iterations: Iterations) -> np.ndarray:
    """The iterations' [start, end) on the reference clock: inferred windows are on iterations.clock's host
    clock, marker windows on the ranks' own (taken as the reference's)."""
    rows = [(int(w.start_ns), int(w.end_ns)) for w in iterations.per_iteration]
    windows = np.array(rows, dtype=np.int64).reshape(-1, 2)
    if iterations.clock:
        windows -= clock_shift(result, [iterations.clock])[0]
    return windows[np.argsort(windows[:, 0], kind="stable")]


def _split(code: np.ndarray, use: np.ndarray, n: int) -> list[np.ndarray]:
    """The rows where USE holds, split by their edge code 0..n-1 (each part in row order)."""
    rows = np.flatnonzero(use)
    rows = rows[np.argsort(code[rows], kind="stable")]
    bounds = np.searchsorted(code[rows], np.arange(n + 1))
    return [rows[bounds[i] : bounds[i + 1]] for i in range(n)]


Pair = tuple[np.ndarray, np.ndarray]


def _series(rate: Pair, trips: Pair, flight: Pair, resent: Pair, bin_ns: int) -> EdgeSeries:
    """An edge over time, for the report, each thinned to SERIES_POINTS: its share of line rate per bin, its
    round trips, its bytes in flight after marked segments, and its re-sent bytes per bin (the heaviest bins).
    Each part comes in time order (transport_samples is sorted by time)."""
    t, u = rate
    keep, keep_r, keep_f = thin(t), thin(trips[0]), thin(flight[0])
    bins, inverse = np.unique(resent[0] // bin_ns, return_inverse=True)
    per_bin = np.bincount(inverse.ravel(), weights=resent[1], minlength=len(bins))
    keep_b = np.argsort(-per_bin, kind="stable")[:SERIES_POINTS]
    keep_b.sort()
    return EdgeSeries(
        t_ns=t[keep].astype(np.int64).tolist(),
        utilization=[round(x, 4) for x in u[keep].astype(np.float64).tolist()],
        rtt_t_ns=trips[0][keep_r].astype(np.int64).tolist(),
        rtt_ns=np.round(trips[1][keep_r]).astype(np.int64).tolist(),
        inflight_t_ns=flight[0][keep_f].astype(np.int64).tolist(),
        inflight_bytes=flight[1][keep_f].astype(np.int64).tolist(),
        resent_t_ns=(bins[keep_b].astype(np.int64) * bin_ns).tolist(),
        resent_bytes=per_bin[keep_b].astype(np.int64).tolist(),
    )


SLOWEST_EDGE = {  # edge limiters that hold the whole collective back, and how the job's evidence names them
    "socket": "run over several sockets, one of which lags",
    "shared": "send over a link other traffic shared",
}


def slowest_edge_verdict(out: Transport, kind: str, edges: list[TransportEdge], why: str) -> None:
    """A job with an edge limited by KIND (SLOWEST_EDGE's, or a slow link the stragglers name) is limited by that,
    whatever most bytes say: a ring (and any collective) runs at the pace of its slowest edge, so a copy on one
    host's link, or one lagging socket of one edge, slows every step. WHY: what the edges do, in words. The
    bytes-weighted limiter of the rest is kept as a note."""
    if not edges or out.limiter == kind:
        return
    worst = max(edges, key=lambda e: e.confidence)
    out.notes.append(f"apart from that, the edges are {out.limiter}-limited ({out.confidence:.2f})")
    out.limiter, out.confidence = kind, worst.confidence
    out.evidence = [
        f"{len(edges)} edge(s) {why}; the collective runs at its slowest edge's pace",
        *(f"{worst.src} -> {worst.dst}: {text}" for text in worst.evidence),
    ]


def _verdict(out: Transport, edges: list[TransportEdge]) -> None:
    """The job's limiter: the edges' limiters weighed by their bytes; `none` when that is not a fault of the
    transport (link, latency, sender) and no edge is busy for long: the job waits on something else."""
    weights = [e.payload_bytes for e in edges]
    total = float(sum(weights)) or 1.0
    share: dict[str, float] = {}
    for w, e in zip(weights, edges):
        share[e.limiter or ""] = share.get(e.limiter or "", 0.0) + w / total
    limiter = max(share, key=lambda k: share[k])
    busy = [e.busy_share for e in edges if e.busy_share is not None]
    if limiter in ("link", "latency", "sender") and busy and max(busy) < NONE_BUSY_SHARE:
        out.limiter = "none"
        out.confidence = round(_margin(NONE_BUSY_SHARE, max(max(busy), 1e-9)), 3)
        out.evidence = [
            f"the busiest edge carries data in only {max(busy):.0%} of the capture's bins: the job waits on "
            f"something else (while sending, the edges are {limiter}-limited)"
        ]
        return
    mine = [(w, e) for w, e in zip(weights, edges) if e.limiter == limiter]
    confidence = share[limiter] * sum(w * e.confidence for w, e in mine) / max(1.0, sum(w for w, _ in mine))
    out.limiter = limiter
    out.confidence = round(float(confidence), 3)
    heaviest = max(mine, key=lambda x: x[0])[1]
    out.evidence = [
        f"{len(mine)} of {len(edges)} edges ({share[limiter]:.0%} of the bytes) are {limiter}-limited",
        *(f"{heaviest.src} -> {heaviest.dst}: {text}" for text in heaviest.evidence),
    ]
    others = sorted((k for k in share if k != limiter), key=lambda k: -share[k])
    if others:
        out.notes.append("other edges: " + ", ".join(f"{k} ({share[k]:.0%} of the bytes)" for k in others))

"""Per TCP data flow, the transport table: what TCP shows in its headers, from the sender's capture.

Why a table of its own: the read path counts, per flow and in the same pass (analyze.read.layouts AGG_REV ...
AGG_WIN_FULL_BYTES), bytes sent again, duplicate ACKs, SACKs, zero windows and bytes in flight against the window;
this turns those counters into one row per data flow (the ACK side's answers added to the data side's) and its
samples into one time-ordered series (round trips, bytes in flight, re-sent bytes). Judging them is
analyze.wire.transport's; the table is kept beside the result (`Tables.transport`, `Tables.transport_samples`)
so an export or a report can show what the judgment read.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from analyze.read import layouts as L
from analyze.read.fold import HostFlows, sample_fields, unique_rows
from analyze.tables.capture_holes import gapped_views
from analyze.tables.clocks import earliest
from analyze.tables.flow_pace import flow_send_rates

SAMPLE_KINDS = ["round_trip_ns", "in_flight_bytes", "resent_bytes"]  # the `what` of Tables.transport_samples
ROUND_TRIP, IN_FLIGHT, RESENT = 0, 1, 2

OWN = {  # a data flow's own counters
    "payload_bytes": L.AGG_PAYLOAD_BYTES,
    "retransmitted_bytes": L.AGG_RETRANS_BYTES,
    "out_of_order_bytes": L.AGG_REORDER_BYTES,
    "inflight_sum": L.AGG_INFLIGHT_SUM,
    "inflight_n": L.AGG_INFLIGHT_N,
    "inflight_max": L.AGG_INFLIGHT_MAX,
    "window_sum": L.AGG_WIN_SUM,
    "window_n": L.AGG_WIN_N,
    "window_full_bytes": L.AGG_WIN_FULL_BYTES,
}
ANSWERS = {  # counted on the ACKs that answer it, which travel on the reverse flow
    "dup_acks": L.AGG_DUP_ACKS,
    "sack_acks": L.AGG_SACK_ACKS,
    "zero_windows": L.AGG_ZERO_WINS,
    "zero_window_ns": L.AGG_ZERO_WIN_NS,
}
FLOW_COLUMNS = ["flow_id", "host", *OWN, *ANSWERS, "window_scale", "send_rate_bps"]


def _reverse_rows(keys: np.ndarray, host: np.ndarray) -> np.ndarray:
    """For each flow (a row of KEYS, captured by HOST), the row of its reverse 5-tuple in the same host's capture,
    else -1."""
    if not len(keys):
        return np.zeros(0, np.int64)
    ports = keys[:, 4] >> np.uint64(8)
    swapped_ports = ((ports & np.uint64(0xFFFF)) << np.uint64(16)) | (ports >> np.uint64(16))
    h = host.astype(np.uint64)
    own = np.column_stack([h, keys])
    swapped = np.column_stack(
        [
            h,
            keys[:, 2],
            keys[:, 3],
            keys[:, 0],
            keys[:, 1],
            (swapped_ports << np.uint64(8)) | (keys[:, 4] & np.uint64(0xFF)),
        ]
    )
    _, inverse = unique_rows(np.concatenate([own, swapped]))
    n = len(keys)
    row_of = np.full(int(inverse.max()) + 1, -1, dtype=np.int64)
    row_of[inverse[:n]] = np.arange(n)
    return row_of[inverse[n:]]


def _series_rows(
    s: np.ndarray, first_row: np.ndarray, n: int, reverse: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, ...]:
    """(flow row, time, what, value) for the data flows ROWS (of N flows, every host's) from the hosts' sample
    tables S (each sample's flow numbered from its host's FIRST_ROW): ROUND_TRIP from TCP timestamps (a TSval's
    first send to the first ACK echoing it) where the flow carries them, else for each marked byte (its first
    send to the first ACK past it, on the reverse flow); IN_FLIGHT after each marked segment; RESENT for each
    re-sent segment kept (layouts.SAMPLE_*). Round trips in (flow, value) order, then the others in the samples'."""
    empty = np.zeros(0, np.int64)
    if not len(s) or not len(rows):
        return empty, empty, empty, empty
    flow, kind, value = sample_fields(s)
    flow = flow + first_row
    wanted = np.zeros(n, dtype=bool)
    wanted[rows] = True
    data = (kind == 0) & wanted[flow]
    answered = np.full(n, -1, dtype=np.int64)  # the data flow an ACK flow answers
    paired = reverse[rows] >= 0
    answered[reverse[rows][paired]] = rows[paired]
    ack_of = np.where(kind == L.SAMPLE_ACK, answered[flow], -1)
    acks = ack_of >= 0
    key_d, ns_d = earliest((flow[data] << 32) | value[data], s[data, L.SAMPLE_NS])
    key_a, ns_a = earliest((ack_of[acks] << 32) | value[acks], s[acks, L.SAMPLE_NS])
    _, i_d, i_a = np.intersect1d(key_d, key_a, assume_unique=True, return_indices=True)
    rtt = ns_a[i_a] - ns_d[i_d]
    ok = rtt > 0
    # round trips from TCP timestamps where the flow has them (a value's first send to its first echo, one per
    # timestamp tick), else from the sequence pairs
    vals = wanted[flow] & (kind == L.SAMPLE_TSVAL)
    echo_of = np.where(kind == L.SAMPLE_TSECR, answered[flow], -1)
    echoes = echo_of >= 0
    key_v, ns_v = earliest((flow[vals] << 32) | value[vals], s[vals, L.SAMPLE_NS])
    key_e, ns_e = earliest((echo_of[echoes] << 32) | value[echoes], s[echoes, L.SAMPLE_NS])
    _, i_v, i_e = np.intersect1d(key_v, key_e, assume_unique=True, return_indices=True)
    ts_rtt = ns_e[i_e] - ns_v[i_v]
    ts_ok = ts_rtt > 0
    stamped = np.zeros(n, dtype=bool)
    stamped[key_v[i_v][ts_ok] >> 32] = True
    paired_flow = key_d[i_d] >> 32
    ok &= ~stamped[paired_flow]
    other = wanted[flow] & ((kind == L.SAMPLE_INFLIGHT) | (kind == L.SAMPLE_RESENT))
    what = np.where(kind[other] == L.SAMPLE_INFLIGHT, IN_FLIGHT, RESENT)
    return (
        np.concatenate([paired_flow[ok], key_v[i_v][ts_ok] >> 32, flow[other]]),
        np.concatenate([ns_d[i_d][ok], ns_v[i_v][ts_ok], s[other, L.SAMPLE_NS]]),
        np.concatenate([np.full(int(ok.sum()) + int(ts_ok.sum()), ROUND_TRIP), what]),
        np.concatenate([rtt[ok], ts_rtt[ts_ok], value[other]]),
    )


def flow_transport(host_flows: Sequence[HostFlows], views: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per TCP data flow, from its sender's capture: the transport counters (the ACK side's duplicate ACKs,
    SACKs and zero windows added to the data side's), and its samples over time (flow_id, t_ns, what, value:
    what is ROUND_TRIP ns, IN_FLIGHT bytes or RESENT bytes). Built from whole columns, HOSTS_AT_ONCE hosts' flows
    numbered in one sequence (the views' rows) at a time: a pass per host cost 0.6 ms each, 0.3 s at 512 hosts,
    and all hosts' samples at once raised the peak by 180 MB there. A sender's capture that missed part of a flow
    (analyze.tables.capture_holes) is left out: its holes would read as the sender's pauses or the network's
    losses."""
    columns: dict[str, list[np.ndarray]] = {c: [] for c in FLOW_COLUMNS}
    trips: dict[str, list[np.ndarray]] = {"flow_id": [], "t_ns": [], "what": [], "value": []}
    if not views.empty:
        sent = views["sent_here"].to_numpy() & ~gapped_views(views)
        is_tcp = (views["proto"] == "tcp").to_numpy()
        flow_id = views["flow_id"].to_numpy()
        start = 0
        for i in range(0, len(host_flows), HOSTS_AT_ONCE):
            group = host_flows[i : i + HOSTS_AT_ONCE]
            n = sum(len(hf.keys) for hf in group)
            at = slice(start, start + n)
            _add_hosts(group, sent[at] & is_tcp[at], flow_id[at], columns, trips)
            start += n
    return column_frames(columns, trips, SAMPLE_KINDS)


HOSTS_AT_ONCE = 64  # hosts whose flows and samples are worked as one sequence (flow_transport)


def _add_hosts(
    group: Sequence[HostFlows],
    sent_tcp: np.ndarray,
    flow_id: np.ndarray,
    columns: dict[str, list[np.ndarray]],
    trips: dict[str, list[np.ndarray]],
) -> None:
    """flow_transport's columns and samples for the hosts GROUP (their flows' rows: SENT_TCP, the data flows their
    sender captured whole; FLOW_ID), appended to COLUMNS and TRIPS."""
    counts = np.array([len(hf.keys) for hf in group], dtype=np.int64)
    host = np.repeat(np.arange(len(group)), counts)
    a = np.concatenate([hf.agg for hf in group])
    rev = _reverse_rows(np.concatenate([hf.keys for hf in group]), host)
    mine = np.flatnonzero(sent_tcp & (a[:, L.AGG_PAYLOAD_BYTES] > 0))
    r = rev[mine]
    has = r >= 0
    rr = np.where(has, r, 0)
    columns["flow_id"].append(flow_id[mine])
    columns["host"].append(np.array([hf.host for hf in group], dtype=object)[host[mine]])
    for name, col in OWN.items():
        columns[name].append(a[mine, col])
    for name, col in ANSWERS.items():
        columns[name].append(np.where(has, a[rr, col], 0))
    columns["window_scale"].append(np.where(has, a[rr, L.AGG_WSCALE], -1))
    columns["send_rate_bps"].append(flow_send_rates(a[mine]))
    first = np.r_[0, np.cumsum(counts)[:-1]]
    samples = np.concatenate([hf.samples for hf in group])
    first_row = np.repeat(first, [len(hf.samples) for hf in group])
    rows, t_ns, what, value = _series_rows(samples, first_row, len(a), rev, mine)
    # host by host, each host's round trips before its other samples, as the time sort's ties have been kept
    order = np.argsort(host[rows], kind="stable")
    trips["flow_id"].append(flow_id[rows[order]])
    trips["t_ns"].append(t_ns[order])
    trips["what"].append(what[order])
    trips["value"].append(value[order])


def column_frames(
    columns: dict[str, list[np.ndarray]], series: dict[str, list[np.ndarray]], kinds: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-flow frame and the time-ordered series frame (its `what` codes named by KINDS) from the columns
    gathered host by host."""
    flows = pd.DataFrame({c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in columns.items()})
    samples = pd.DataFrame({c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in series.items()})
    samples["what"] = pd.Categorical.from_codes(samples["what"].to_numpy(np.int8), kinds)
    return flows, samples.sort_values("t_ns", kind="stable", ignore_index=True)

"""Per RDMA queue pair and capture that saw it, the transport table: its counters, the answers its reverse queue
pair carried, and its events over time (ACK round trips, NAKs, CNPs, resends).

Why a table of its own, like the TCP one (analyze.tables.tcp_flows): judging an edge's queue pairs is
analyze.wire.rdma's; the counters and events it reads are kept beside the result (`Tables.rdma`,
`Tables.rdma_events`) for exports and the report.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from analyze.read import layouts as L
from analyze.read.fold import HostFlows, sample_fields
from analyze.tables.capture_holes import gapped_views
from analyze.tables.flow_pace import flow_send_rates
from analyze.tables.tcp_flows import column_frames

VERSIONS = {1: "RoCEv1", 2: "RoCEv2", 3: "InfiniBand"}
# the `what` of Tables.rdma_events, by the kernel's event code (L.ROCE_EV_*; an ACK's is its round trip)
EVENT_KINDS = ["ack_rtt_ns", *L.ROCE_EVENT_NAMES[1:]]
ACK_RTT = 0
COUNTERS = {
    "packets": L.AGG_PACKETS,
    "payload_bytes": L.AGG_PAYLOAD_BYTES,
    "write_bytes": L.AGG_ROCE_WRITE_BYTES,
    "send_bytes": L.AGG_ROCE_SEND_BYTES,
    "read_bytes": L.AGG_ROCE_READ_BYTES,
    "messages": L.AGG_ROCE_MESSAGES,
    "immediate": L.AGG_ROCE_IMM,
    "resent_packets": L.AGG_ROCE_RESENT,
    "resent_bytes": L.AGG_RETRANS_BYTES,
    "psn_gaps": L.AGG_ROCE_PSN_GAPS,
    "resends": L.AGG_ROCE_RESENDS,
    "timeouts": L.AGG_ROCE_TIMEOUTS,
    "stall_ns": L.AGG_ROCE_STALL_NS,
    "ce_marks": L.AGG_ROCE_CE,
    "fecn": L.AGG_ROCE_FECN,
    "becn": L.AGG_ROCE_BECN,
}
ANSWERS = {  # counted on the reverse queue pair, which carries them to this one's requester
    "acks": L.AGG_ROCE_ACKS,
    "naks": L.AGG_ROCE_NAKS,
    "rnr_naks": L.AGG_ROCE_RNR_NAKS,
    "nak_errors": L.AGG_ROCE_NAK_ERRORS,
    "cnps": L.AGG_ROCE_CNPS,
}
FRAME_COLUMNS = [
    "flow_id",
    "host",
    "sent_here",
    "gapped",
    "version",
    "reverse_qp",
    "udp_sport",
    *COUNTERS,
    *ANSWERS,
    "send_rate_bps",
]


def _reverse_pairs(hf: HostFlows, rows: np.ndarray) -> np.ndarray:
    """For each queue pair ROWS of one capture, the row of the queue pair that answers it (its ACKs' PSNs match its
    requests' PSNs, between the same two addresses the other way), else -1."""
    s = hf.samples
    out = np.full(len(rows), -1, dtype=np.int64)
    if not len(s) or not len(rows):
        return out
    flow, kind, value = sample_fields(s)
    req = kind == L.SAMPLE_RDMA_REQUEST
    ack = (kind == L.SAMPLE_RDMA_EVENT) & ((value >> 24) == L.ROCE_EV_ACK)
    r = pd.DataFrame({"f": flow[req], "psn": value[req]}).drop_duplicates()
    a = pd.DataFrame({"g": flow[ack], "psn": value[ack] & 0xFFFFFF}).drop_duplicates()
    both = r.merge(a, on="psn")
    if both.empty:
        return out
    k = hf.keys
    f, g = both["f"].to_numpy(np.int64), both["g"].to_numpy(np.int64)
    mirrored = (k[f, 0] == k[g, 2]) & (k[f, 1] == k[g, 3]) & (k[f, 2] == k[g, 0]) & (k[f, 3] == k[g, 1])
    counts = both[mirrored].groupby(["f", "g"]).size().reset_index(name="n").sort_values("n", ascending=False)
    best = counts.drop_duplicates("f").set_index("f")["g"]
    position = pd.Series(np.arange(len(rows)), index=rows)
    mine = best[best.index.isin(rows)]
    out[position[mine.index].to_numpy()] = mine.to_numpy()
    return out


def _events(hf: HostFlows, rows: np.ndarray, reverse: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, ...]:
    """(local row, time, what, value) for the queue pairs ROWS of one capture: ACK round trips where the capture is
    the requester's (SENT), the NAKs, CNPs and resends that concern each, its WRITE messages' first and last
    packets, the clear-to-send writes that grant them, and its READ requests' buffers and lengths."""
    s = hf.samples
    empty = np.zeros(0, np.int64)
    if not len(s) or not len(rows):
        return empty, empty, empty, empty
    flow, kind, value = sample_fields(s)
    ns = s[:, L.SAMPLE_NS]
    answers = np.full(len(hf.keys), -1, dtype=np.int64)  # the queue pair each reverse one answers
    has = reverse >= 0
    answers[reverse[has]] = rows[has]
    requester = np.zeros(len(hf.keys), dtype=bool)
    requester[rows[sent]] = True
    req = (kind == L.SAMPLE_RDMA_REQUEST) & requester[flow]
    event = kind == L.SAMPLE_RDMA_EVENT
    code = value >> 24
    of = np.where(event, answers[flow], -1)
    ack = event & (code == L.ROCE_EV_ACK) & (of >= 0) & requester[np.maximum(of, 0)]
    r = pd.DataFrame({"f": flow[req], "psn": value[req], "t": ns[req]}).groupby(["f", "psn"], as_index=False).min()
    a = pd.DataFrame({"f": of[ack], "psn": value[ack] & 0xFFFFFF, "t_ack": ns[ack]})
    both = r.merge(a, on=["f", "psn"])
    both = (
        both[both["t_ack"] > both["t"]]
        .groupby(["f", "psn"], as_index=False)
        .agg(t=("t", "min"), t_ack=("t_ack", "min"))
    )
    # told on the reverse queue pair: NAKs, CNPs, and the clear-to-send writes that grant this one's chunks
    told = event & (((code >= L.ROCE_EV_NAK) & (code <= L.ROCE_EV_CNP)) | (code == L.ROCE_EV_CTS)) & (of >= 0)
    own = event & ((code == L.ROCE_EV_RESENT) | ((code >= L.ROCE_EV_CHUNK_START) & (code != L.ROCE_EV_CTS)))
    wanted = np.zeros(len(hf.keys), dtype=bool)
    wanted[rows] = True
    # a queue pair's chunk marks matter only beside the grants that clear it (analyze.wire.clear_to_send)
    chunk = (code == L.ROCE_EV_CHUNK_START) | (code == L.ROCE_EV_CHUNK_END)
    granted = np.zeros(len(hf.keys), dtype=bool)
    granted[of[told & (code == L.ROCE_EV_CTS)]] = True
    own &= wanted[flow] & (~chunk | granted[flow])
    return (
        np.concatenate([both["f"].to_numpy(np.int64), of[told], flow[own]]),
        np.concatenate([both["t"].to_numpy(np.int64), ns[told], ns[own]]),
        np.concatenate([np.full(len(both), ACK_RTT), code[told], code[own]]).astype(np.int64),
        np.concatenate([(both["t_ack"] - both["t"]).to_numpy(np.int64), value[told] & 0xFFFFFF, value[own] & 0xFFFFFF]),
    )


def flow_rdma(host_flows: Sequence[HostFlows], views: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per RDMA queue pair and capture that saw it: its counters, the answers its reverse queue pair carried, and
    its events over time (flow_id, host whose capture saw it, t_ns on that host's clock, what, value: what is an
    ACK round trip in ns, or a NAK, CNP or resend with its PSN). Whole columns per host, like the TCP table."""
    columns: dict[str, list[np.ndarray]] = {c: [] for c in FRAME_COLUMNS}
    events: dict[str, list[np.ndarray]] = {"flow_id": [], "host": [], "t_ns": [], "what": [], "value": []}
    if not views.empty:
        roce = (views["proto"] == "roce").to_numpy()
        sent_here = views["sent_here"].to_numpy()
        gapped = gapped_views(views)
        flow_id = views["flow_id"].to_numpy()
        start = 0
        for hf in host_flows:
            n = len(hf.keys)
            rows = np.flatnonzero(roce[start : start + n])
            if len(rows):
                a = hf.agg
                reverse = _reverse_pairs(hf, rows)
                has = reverse >= 0
                rr = np.where(has, reverse, 0)
                sent = sent_here[start + rows]
                columns["flow_id"].append(flow_id[start + rows])
                columns["host"].append(np.full(len(rows), hf.host, dtype=object))
                columns["sent_here"].append(sent)
                columns["gapped"].append(gapped[start + rows])
                columns["version"].append(a[rows, L.AGG_ROCE_VERSION])
                qp_of = ((hf.keys[:, 4] >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.int64)
                columns["reverse_qp"].append(np.where(has, qp_of[rr], -1))
                columns["udp_sport"].append(a[rows, L.AGG_ROCE_SPORT])
                for name, col in COUNTERS.items():
                    columns[name].append(a[rows, col])
                for name, col in ANSWERS.items():
                    columns[name].append(np.where(has, a[rr, col], 0))
                columns["send_rate_bps"].append(flow_send_rates(a[rows]))
                local, t, what, value = _events(hf, rows, reverse, sent)
                events["flow_id"].append(flow_id[start + local])
                events["host"].append(np.full(len(local), hf.host, dtype=object))
                events["t_ns"].append(t)
                events["what"].append(what)
                events["value"].append(value)
            start += n
    return column_frames(columns, events, EVENT_KINDS)

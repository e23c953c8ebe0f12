"""Why an RDMA link is not full: queue pairs, their loss and congestion, from the InfiniBand transport headers.

Why here and from headers: RDMA bypasses the kernel, so /proc/net/dev and TCP's counters never see it, and NIC
counters are per port, not per queue pair. The read path counts per queue pair (analyze.read.layouts
AGG_ROCE_*) what the Base Transport Header and its extension headers show: bytes by opcode class, messages,
request PSNs skipped or sent again (go-back-N after a NAK, or a resend after the requester's timer fired), the
AETH's ACKs and NAKs, CNPs, and ECN's CE marks. A queue pair's ACKs, NAKs and CNPs travel on the reverse queue
pair, whose QP its own headers never name: the pairing is learnt here from ACK PSNs that match its requests' PSNs
in the same capture. An ACK's round trip is a request asking for one (AckReq) to the first ACK of its PSN, in the
sender's capture (one clock).

Per edge (host pair) the queue pairs are folded into one, and the one limiter the evidence supports is named:

    loss        the requester's timer fired (each firing stalls the queue pair for the timeout), or a share of
                the packets were sent again after NAKs
    congestion  CNPs came back, or packets arrived marked CE, while the edge sent below line rate
    link        busy at line rate while it sends
    sender      none of those: the application posts work slowly
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyze.confidence.thresholds import FILLS_LINK
from analyze.model.findings import QpRate, Rdma, RdmaEdge, RdmaQp, RdmaSeries, Transport
from analyze.model.result import Result
from analyze.wire.clear_to_send import Grants, grant_waits
from analyze.wire.failover import replayed_reads
from analyze.wire.path_sharing import shared_paths
from analyze.tables.hosts import address_hosts, flow_hosts
from analyze.tables.rdma_flows import ANSWERS, COUNTERS, VERSIONS
from analyze.wire.send_rate import (
    UNRESOLVED_CONFIDENCE,
    edge_send_rates,
    fills_link,
    unresolved_evidence,
)
from analyze.wire.transport import (
    EdgeRates,
    busy_bins,
    judged_rates,
    edge_rates,
    line_rate_unknown,
    rate_fields,
    series_shown,
    set_aside_light,
    thin,
)

LOSS_FRACTION = 0.005  # packets sent again above this share of the edge's: loss shapes the transfer
LOSS_TIME_SHARE = 0.05  # timer stalls and resends taking this share of the edge's busy time: loss shapes it
CNP_SPACING_NS = 50_000  # a notification point sends at most one CNP per queue pair this often (ConnectX default)
IMBALANCED = 1.5  # an edge's busiest QP carrying this many times its least busy one's bytes is shown as unequal


def _judge(row: RdmaEdge, busy_ns: float, stall_ns: int, bin_ns: int) -> tuple[str, float, list[str]]:
    """An edge's limiter, how sure, and the evidence, from its folded counters, its BUSY_NS (busy bins x bin) and
    the requester's timer stalls (STALL_NS)."""
    evidence = []
    if row.resent_packets:
        evidence.append(
            f"{row.resent_packets:,} packets sent again ({row.resent_fraction:.2%}) after {row.naks} NAK(s)"
            f" and {row.timeouts} timeout(s)"
        )
    if row.cnps or row.ce_marks:
        rate = f" ({row.cnps_per_s:,.0f}/s while busy)" if row.cnps_per_s is not None else ""
        evidence.append(f"{row.cnps} CNPs{rate}, {row.ce_marks} packets marked CE ({row.ce_fraction:.2%})")
    busy, burst = row.rate_while_busy, row.burst_rate
    link_full = fills_link(burst, busy)
    if link_full is None and burst is not None:
        evidence.append(unresolved_evidence(burst, busy, bin_ns))
    elif burst is not None or busy is not None:
        evidence.append(f"sends at {burst if burst is not None else busy:.0%} of line rate while busy")
    # what loss cost: the timer's stalls, and the packets sent twice at the rate the edge sends
    packet_ns = busy_ns / row.packets if row.packets else 0.0
    lost_share = (stall_ns + row.resent_packets * packet_ns) / busy_ns if busy_ns else 0.0
    if row.timeouts:
        evidence.insert(
            0,
            f"the requester's timer fired {row.timeouts} time(s), stalling its queue pair "
            f"{stall_ns / 1e6:,.1f} ms in all ({lost_share:.0%} of the edge's busy time with its resends)",
        )
    if lost_share >= LOSS_TIME_SHARE or row.resent_fraction >= LOSS_FRACTION:
        sure = max(lost_share / LOSS_TIME_SHARE, row.resent_fraction / LOSS_FRACTION)
        return "loss", min(1.0, 0.5 + sure / 4), evidence
    if (row.cnps or row.ce_marks) and not link_full:
        # each CNP stands for at least the notification point's spacing of marked traffic
        share = row.cnps * CNP_SPACING_NS / max(1.0, busy_ns) if busy_ns else 0.0
        below = 1.0 if busy is None else min(1.0, (FILLS_LINK - busy) / 0.2)
        return "congestion", round(min(1.0, 0.5 + 0.5 * min(1.0, share * 4)) * (0.5 + 0.5 * below), 3), evidence
    shown = burst if burst is not None else busy
    if link_full:  # as sure as the weaker of the two readings (analyze.wire.transport._judge)
        assert shown is not None  # fills_link reads a full link from a rate it was given
        weaker = min(shown, busy if busy is not None else shown)
        return "link", min(1.0, 0.5 + (weaker - FILLS_LINK) * 5), evidence
    if link_full is None or shown is None:
        return "sender", UNRESOLVED_CONFIDENCE, evidence
    return "sender", min(1.0, 0.5 + (FILLS_LINK - shown)), evidence


def _fold_views(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per queue pair: each counter the largest any capture of it saw, the reverse QP and the send rate
    the sender's capture learnt (else any); a capture that missed part of the queue pair counts only where no
    whole one saw it (its skipped PSNs are its own holes, its rate has them in it)."""
    whole = frame.groupby("flow_id")["gapped"].transform("min").to_numpy() == frame["gapped"].to_numpy()
    ordered = frame[whole].sort_values(["flow_id", "sent_here"], ascending=[True, False])
    counts = ordered.groupby("flow_id")[[*COUNTERS, *ANSWERS, "version", "udp_sport"]].max()
    counts["reverse_qp"] = ordered[ordered["reverse_qp"] >= 0].groupby("flow_id")["reverse_qp"].first()
    counts["send_rate_bps"] = ordered.groupby("flow_id")["send_rate_bps"].first()  # the first rate that is known
    return counts.reset_index()


def diagnose_rdma(result: Result) -> Optional[Rdma]:
    """The RDMA finding: every queue pair, the edges they fold into and the job's limiter (None without RDMA)."""
    tables = result.tables
    if tables is None or tables.rdma is None or tables.rdma.empty:
        return None
    qps = _fold_views(tables.rdma)
    flows = tables.flows.set_index("flow_id")
    addr_host = address_hosts(result.hosts)
    ends = flow_hosts(tables.flows, addr_host).set_index("flow_id")[["src_host", "dst_host"]]
    qps["src"] = flows["src"].reindex(qps["flow_id"]).to_numpy()
    qps["dst"] = flows["dst"].reindex(qps["flow_id"]).to_numpy()
    qps["qp"] = flows["qp"].reindex(qps["flow_id"]).to_numpy()
    qps["src_host"] = ends["src_host"].reindex(qps["flow_id"]).to_numpy()
    qps["dst_host"] = ends["dst_host"].reindex(qps["flow_id"]).to_numpy()
    ev = tables.rdma_events
    rtt = ev[ev["what"] == "ack_rtt_ns"] if ev is not None else pd.DataFrame(columns=["flow_id", "value"])
    rtt_n = rtt.groupby("flow_id")["value"].size().reindex(qps["flow_id"]).fillna(0).astype(int)
    rtt_med = rtt.groupby("flow_id")["value"].median().reindex(qps["flow_id"])
    qp_rows = []
    for q, n_rtt, med in zip(qps.to_dict("records"), rtt_n.to_numpy(), rtt_med.to_numpy()):
        qp_rows.append(
            RdmaQp(
                src=q["src_host"] if isinstance(q["src_host"], str) else q["src"],
                dst=q["dst_host"] if isinstance(q["dst_host"], str) else q["dst"],
                qp=int(q["qp"]),
                transport=VERSIONS.get(int(q["version"]), "RDMA"),
                reverse_qp=None if pd.isna(q["reverse_qp"]) else int(q["reverse_qp"]),
                udp_sport=int(q["udp_sport"]) or None,
                **{c: int(q[c]) for c in (*COUNTERS, *ANSWERS) if c != "stall_ns"},
                ack_rtt_samples=int(n_rtt),
                ack_rtt_median_ns=None if pd.isna(med) else int(round(float(med))),
            )
        )
    out = Rdma(qps=sorted(qp_rows, key=lambda r: (r.src, r.dst, r.qp)))
    captured = {h.name for h in result.hosts}
    judged = qps[qps["src_host"].isin(captured) & qps["dst_host"].isin(captured)].copy()
    if judged.empty:
        out.notes.append("no queue pair between two captured hosts: nothing to judge")
        return out
    judged["data_bytes"] = judged["write_bytes"] + judged["send_bytes"] + judged["read_bytes"]
    code, pairs = pd.factorize(pd.MultiIndex.from_arrays([judged["src_host"], judged["dst_host"]]))
    n = len(pairs)
    speeds = {h.name: float(h.link_speed_bps) for h in result.hosts}
    assumed = {h.name for h in result.hosts if h.link_speed_source == "assumed"}
    link = np.array([speeds[s] for s, _ in pairs], dtype=np.float64)
    code_of_flow = np.full(int(tables.flows["flow_id"].max()) + 1, -1, dtype=np.int64)
    code_of_flow[judged["flow_id"].to_numpy(np.int64)] = code
    bin_ns = int(result.bin_ns)
    e_code, e_t, e_util, e_busy = edge_rates(tables.flow_series, code_of_flow, link, bin_ns, result.busy_threshold)
    fill_rates, _, fill_ns = judged_rates(
        tables, code_of_flow, link, (bin_ns, result.busy_threshold), (e_code, e_t, e_util, e_busy), out.notes
    )
    busy = busy_bins(*fill_rates, n, fill_ns)
    sending = edge_send_rates(
        code, judged["send_rate_bps"].to_numpy(np.float64), judged["data_bytes"].to_numpy(np.int64), n, at_once=False
    )
    series = tables.flow_series
    cells_of = dict(tuple(series[series["flow_id"].isin(judged["flow_id"])].groupby("flow_id")))  # one pass
    events_of = _events_by_edge(ev, code_of_flow)  # one pass too: per-edge filters cost edges x events
    by_edge = {int(k): g for k, g in judged.groupby(code)}
    edges, drawn = [], {}
    for i, (s, d) in enumerate(pairs):
        mine = by_edge[i].sort_values("data_bytes", ascending=False)
        busy_ns = float(busy.bins[i] * busy.bin_ns)
        on_edge = e_code == i
        row = _edge_row(s, d, mine, busy_ns, _median_ns(events_of.get(i)), rate_fields(busy, sending, link, i))
        drawn[id(row)] = ((e_t[on_edge], e_util[on_edge]), mine, events_of.get(i), float(link[i]), str(s))
        row.limiter, confidence, row.evidence = _judge(row, busy_ns, int(mine["stall_ns"].sum()), busy.bin_ns)
        _add_grants(row, grant_waits(events_of.get(i), str(s)))
        row.confidence = round(float(confidence), 3)
        line_rate_unknown(row, row.src in assumed)
        if row.qp_imbalance is not None and row.qp_imbalance >= IMBALANCED:
            carrying = sum(1 for b in row.qp_payload_bytes if b > 0)
            row.evidence.append(
                f"its {carrying} QPs carry unequal bytes (the busiest {row.qp_imbalance:.1f}x the "
                "least): whether they share a path is not visible in a capture"
            )
        edges.append(row)
    period = result.iterations.period_ns if result.iterations is not None else None
    out.notes.extend(_take_out_replays(edges, replayed_reads(ev, qps, period)))
    set_aside_light(edges, "too little data to judge (ACKs, control writes)")
    out.notes.extend(shared_paths([e for e in edges if e.limiter is not None]))
    out.edges = edges
    _verdict(out, [e for e in edges if e.limiter is not None])
    for row in series_shown(sorted(edges, key=lambda e: -e.payload_bytes), out.limiter):  # as many as TCP's
        edge, mine, events, link_bps, sender = drawn[id(row)]
        row.series = _series(edge, mine, cells_of, events, link_bps, bin_ns, sender)
    return out


def _take_out_replays(edges: list[RdmaEdge], replays: pd.DataFrame) -> list[str]:
    """Keep a failover's replayed READs (analyze.wire.failover) out of the payload of the edge that carried their
    responses (responder to requester), and say so on the edge and in the notes."""
    if replays.empty:
        return []
    per = replays.groupby(["dst_host", "src_host"])["length"].agg(["size", "sum"])
    notes = []
    for e in edges:
        if (e.src, e.dst) not in per.index:
            continue
        n, nbytes = (int(x) for x in per.loc[(e.src, e.dst)])
        e.replayed_reads, e.replayed_bytes = n, nbytes
        e.payload_bytes -= nbytes
        line = (
            f"{n:,} READs ({nbytes:,} B) of buffers just read on another device: a failover's replay, the same "
            "bytes moved twice, kept out of its payload"
        )
        e.evidence.append(line)
        notes.append(f"{e.src} -> {e.dst}: {line}")
    return notes


def _add_grants(row: RdmaEdge, grants: Optional[Grants]) -> None:
    """The edge's chunks and their waits for the receiver's grant and on the sender, with their evidence line."""
    if grants is None:
        return
    row.chunks, row.grant_wait_ns, row.send_wait_ns = grants.chunks, round(grants.receiver_ns), round(grants.sender_ns)
    row.evidence.append(
        f"{grants.chunks:,} chunks, each granted by a clear-to-send: the link idles {grants.receiver_ns / 1e3:,.1f} µs"
        f" for the grant and {grants.sender_ns / 1e3:,.1f} µs on the sender after it (median per chunk)"
    )


def _edge_row(
    s: str, d: str, mine: pd.DataFrame, busy_ns: float, ack_rtt_ns: Optional[int], rates: EdgeRates
) -> RdmaEdge:
    """An edge's counters from its queue pairs MINE (heaviest first) and its RATES (transport.rate_fields), before
    its judgment."""
    data = mine["data_bytes"].to_numpy(np.int64)
    packets = int(mine["packets"].sum())
    resent = int(mine["resent_packets"].sum())
    carrying = data[data > 0]
    cnps, ce = int(mine["cnps"].sum()), int(mine["ce_marks"].sum())
    return RdmaEdge(
        src=s,
        dst=d,
        qps=[int(x) for x in mine["qp"]],
        qp_udp_sports=[int(x) for x in mine["udp_sport"]] if mine["udp_sport"].any() else None,
        qp_payload_bytes=[int(x) for x in data],
        qp_imbalance=float(carrying.max() / carrying.min()) if len(carrying) > 1 else None,
        payload_bytes=int(data.sum() - mine["resent_bytes"].sum()),
        packets=packets,
        resent_packets=resent,
        resent_fraction=resent / packets if packets else 0.0,
        naks=int(mine["naks"].sum()),
        timeouts=int(mine["timeouts"].sum()),
        cnps=cnps,
        cnps_per_s=float(cnps / (busy_ns / 1e9)) if busy_ns else None,
        ce_marks=ce,
        ce_fraction=float(ce / packets) if packets else 0.0,
        ack_rtt_median_ns=ack_rtt_ns,
        **rates,
        limiter=None,
        confidence=0.0,
        evidence=[],
    )


def _series(
    edge: tuple[np.ndarray, np.ndarray],
    mine: pd.DataFrame,
    cells_of: dict[Any, pd.DataFrame],
    ev: Optional[pd.DataFrame],
    link_bps: float,
    bin_ns: int,
    sender: str,
) -> RdmaSeries:
    """The edge's series for the report: its rate and each QP's per bin, and its events in the sender's capture."""
    t, util = edge
    keep = thin(t)
    qp_rates = []
    for flow_id, qp in zip(mine["flow_id"], mine["qp"]):
        cells = cells_of.get(flow_id, pd.DataFrame({"t_ns": [], "bytes": []}))
        q_t, q_b = cells["t_ns"].to_numpy(np.int64), cells["bytes"].to_numpy(np.float64)
        k = thin(q_t)
        qp_rates.append(QpRate(int(qp), q_t[k].tolist(), (q_b[k] * 8e9 / bin_ns / link_bps).tolist()))
    out = RdmaSeries(t_ns=t[keep].tolist(), utilization=util[keep].tolist(), qp_rates=qp_rates)
    mine_ev = pd.DataFrame(columns=["t_ns", "what", "value", "host"]) if ev is None else ev
    mine_ev = mine_ev[mine_ev["host"] == sender]
    for name, kinds in (("cnp", ["cnp"]), ("nak", ["nak", "rnr_nak", "nak_error"]), ("resent", ["resent"])):
        times = np.sort(mine_ev.loc[mine_ev["what"].isin(kinds), "t_ns"].to_numpy(np.int64))
        setattr(out, f"{name}_t_ns", times[thin(times)].tolist())
    trips = mine_ev[mine_ev["what"] == "ack_rtt_ns"].sort_values("t_ns")
    k = thin(trips["t_ns"].to_numpy())
    out.rtt_t_ns = trips["t_ns"].to_numpy(np.int64)[k].tolist()
    out.rtt_ns = np.round(trips["value"].to_numpy(np.float64)[k]).astype(np.int64).tolist()
    return out


def _events_by_edge(ev: Optional[pd.DataFrame], code_of_flow: np.ndarray) -> dict[int, pd.DataFrame]:
    """The events of each judged edge's queue pairs, by edge code."""
    if ev is None or not len(ev):
        return {}
    flows = ev["flow_id"].to_numpy(np.int64)
    code = np.where(flows < len(code_of_flow), code_of_flow[np.minimum(flows, len(code_of_flow) - 1)], -1)
    return {int(k): g for k, g in ev[code >= 0].groupby(code[code >= 0])}


def _median_ns(ev: Optional[pd.DataFrame]) -> Optional[int]:
    """The median ACK round trip among an edge's events (ns), None without any."""
    if ev is None:
        return None
    values = ev.loc[ev["what"] == "ack_rtt_ns", "value"]
    return int(round(float(values.median()))) if len(values) else None


def _verdict(out: Rdma, edges: list[RdmaEdge]) -> None:
    """The job's limiter: an edge limited by loss or congestion limits the collective (it runs at its slowest
    edge's pace); else the edges' limiters weighed by their bytes."""
    if not edges:
        return
    for kind in ("loss", "congestion"):
        hit = [e for e in edges if e.limiter == kind]
        if hit:
            worst = max(hit, key=lambda e: e.confidence)
            out.limiter, out.confidence = kind, worst.confidence
            out.evidence = [
                f"{len(hit)} of {len(edges)} edges are {kind}-limited; the collective runs at its slowest edge's pace",
                *(f"{worst.src} -> {worst.dst}: {text}" for text in worst.evidence),
            ]
            return
    total = float(sum(e.payload_bytes for e in edges)) or 1.0
    share: dict[str, float] = {}
    for e in edges:
        share[e.limiter or ""] = share.get(e.limiter or "", 0.0) + e.payload_bytes / total
    limiter = max(share, key=lambda k: share[k])
    mine = [e for e in edges if e.limiter == limiter]
    out.limiter = limiter
    out.confidence = round(share[limiter] * min(e.confidence for e in mine), 3)
    heaviest = max(mine, key=lambda e: e.payload_bytes)
    out.evidence = [
        f"{len(mine)} of {len(edges)} edges ({share[limiter]:.0%} of the bytes) are {limiter}-limited",
        *(f"{heaviest.src} -> {heaviest.dst}: {text}" for text in heaviest.evidence),
    ]


def rdma_transport(rdma: Rdma) -> Transport:
    """The transport finding of a job whose data moves over RDMA only: the queue pairs' limiter, which the verdict
    reads like TCP's (the per-edge detail stays in `rdma`)."""
    return Transport(
        limiter=rdma.limiter,
        confidence=rdma.confidence,
        evidence=list(rdma.evidence),
        notes=["judged from the RDMA queue pairs (no TCP data between the hosts): see rdma for each edge"],
    )

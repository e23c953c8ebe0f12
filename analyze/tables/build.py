"""The result's tables from the hosts' scans: flows, views, series, hosts, captures, clocks and the transport
tables, before any inference.

Why one module and below every inference: each analysis above (the collective, the wire's judgments, the
what-if) reads these tables and none of them builds one, so an analysis run per job (analyze.each_job) cuts the
same tables by a mask instead of reading again. Nothing here judges: a link speed that the traffic contradicts
is noted, not corrected.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Optional
import numpy as np
import pandas as pd
from analyze.read import layouts as L
from capture import layout
from analyze.tables.clocks import estimate_clocks
from analyze.read.groupsum import group_sum
from analyze.read.heap import give_back
from analyze.read.fold import HostFlows, merge_host, unique_rows
from analyze.read.bin_choice import coarsen
from analyze.read.outliers import set_aside
from analyze.tables.flows import address_key, address_text, infer_local, key_ports, local_mask, proto_name
from analyze.read.inputs import HostInput, RunInput
from analyze.tables.capture_holes import GAPPED, host_coverage, missing_payload, view_shortfall
from analyze.tables.hole_times import hole_stretches
from analyze.tables.markers import load_markers
from analyze.model.findings import Clock
from analyze.model.result import CaptureSummary, FlowRecord, HostSummary, Result, Tables
from analyze.read.scan import FileHealth, StreamScan
from analyze.tables.rdma_flows import flow_rdma
from analyze.tables.tcp_flows import flow_transport
from analyze.tables.utilization import utilization

ASSUMED_LINK_BPS = 10e9
BYTE_COLUMN = {"ip": L.AGG_IP_BYTES, "wire": L.AGG_WIRE_BYTES, "payload": L.AGG_PAYLOAD_BYTES}


# Whether a host's link speed is right is judged on its rate over LINK_CHECK_NS windows, not per bin: tcpdump
# stamps a segment when the stack queues it, before a shaper or the NIC paces it out, and a TSO segment of up to
# 64 kB lands whole in one bin. Real DDP rings on htb links peak per 10 ms bin at 1.00-1.01x of 1 Gbit/s and at
# 1.46x of 100 Mbit/s; over 100 ms windows neither passes PEAK_TOLERANCE. A wrong link speed is off by far more.
LINK_CHECK_NS = 100_000_000
PEAK_TOLERANCE = 1.1


def build_result(
    run_input: RunInput,
    scans: list[StreamScan],
    *,
    link_speed_bps: Optional[float],
    bin_ns: int,
    byte_mode: str,
    busy_threshold: float,
    judged_bin_ns: Optional[int] = None,
) -> Result:
    """Assemble the Result from the hosts' stream scans, one per host in order (pure: no file access): the tables
    at BIN_NS, and where JUDGED_BIN_NS (the width chosen from the traffic, analyze.read.bin_choice) differs, the
    flow series at it too (Tables.judged_series). The scans' cells are at the finer width both are made of.

    SCANS is emptied: its cells go once the series hold them, before the transport tables and the clocks are
    built (a caller still holding the list kept 140 MB of cells through them at 512 hosts)."""
    warnings = list(run_input.warnings)
    assumptions: list[str] = []
    captures: list[CaptureSummary] = []
    host_flows: list[HostFlows] = []
    judged_bin_ns = judged_bin_ns or bin_ns
    fine = math.gcd(bin_ns, judged_bin_ns)
    aside = [set_aside(s, fine) for s in scans]
    scans.clear()
    files = [s.files for s in aside]
    for h, stream in zip(run_input.hosts, aside):
        for fh in stream.files:
            captures.append(_capture_summary(h.name, fh))
            warnings.extend(fh.warnings)
        host_flows.append(merge_host(h.name, [stream]))
    del aside
    col = BYTE_COLUMN[byte_mode]

    locals_: list[list[tuple[int, int]]] = []
    for h, hf in zip(run_input.hosts, host_flows):
        given = [a for a in (h.meta.addresses if h.meta else []) if a]
        if given:
            locals_.append([address_key(str(a)) for a in given])
        else:
            locals_.append(infer_local(hf))
            if hf.keys.size:
                assumptions.append(
                    f"{h.name}: own address inferred from traffic as "
                    f"{', '.join(address_text(*a) for a in locals_[-1])} (no meta.json addresses)"
                )

    views = _views_table(run_input.hosts, host_flows, locals_, col)
    names = [h.name for h in run_input.hosts]
    held = host_coverage(names, [h.meta for h in run_input.hosts], views)
    flows_df, chosen = _choose_views(views)
    judged_series = None
    if judged_bin_ns != bin_ns:
        judged_series = coarser_series(_flow_series(host_flows, chosen, views, fine), judged_bin_ns)
        host_flows = [coarsen(hf, bin_ns // fine) for hf in host_flows]
    hole_stretches(host_flows, views, bin_ns, held)
    for capture in captures:
        capture.coverage = held[names.index(capture.host)]
    flow_series = _flow_series(host_flows, chosen, views, bin_ns)
    hosts, host_series = _hosts(
        run_input.hosts, host_flows, locals_, files, col, bin_ns, link_speed_bps, busy_threshold, warnings, assumptions
    )
    host_flows = [_cells_dropped(hf) for hf in host_flows]
    give_back()
    transport, transport_samples = flow_transport(host_flows, views)
    rdma, rdma_events = flow_rdma(host_flows, views)
    markers = load_markers(run_input.hosts, warnings)
    if run_input.run:
        warnings.extend(layout.run_faults(layout.RunManifest(run_input.run)))
    # whole columns as Python values, zipped: per-row access to the frame took 0.018 s for 2,000 flows
    columns = [
        [s.split(",") for s in flows_df[f.name].tolist()]
        if f.name == "seen_by"
        else [None if q < 0 else q for q in flows_df[f.name].tolist()]
        if f.name == "qp"
        else [None if h != h else round(h, 4) for h in flows_df[f.name].tolist()]
        if f.name == "held"
        else [s.split(",") if s else None for s in flows_df[f.name].tolist()]
        if f.name == "short_in"
        else flows_df[f.name].tolist()
        for f in fields(FlowRecord)
    ]
    flow_records = [FlowRecord(*row) for row in zip(*columns)]
    result = Result(
        byte_mode=byte_mode,
        bin_ns=bin_ns,
        busy_threshold=busy_threshold,
        hosts=hosts,
        flows=flow_records,
        captures=captures,
        warnings=warnings,
        assumptions=assumptions,
        run=run_input.run,
        tables=Tables(
            flows=flows_df,
            flow_views=views,
            flow_series=flow_series,
            judged_series=judged_series,
            judged_bin_ns=judged_bin_ns,
            host_series=host_series,
            markers=markers,
            transport=transport,
            transport_samples=transport_samples,
            rdma=rdma if len(rdma) else None,
            rdma_events=rdma_events if len(rdma) else None,
        ),
    )
    result.clock = _clocks(run_input, host_flows, locals_, hosts)
    return result


def _clocks(
    run_input: RunInput, host_flows: list[HostFlows], locals_: list[list[tuple[int, int]]], hosts: list[HostSummary]
) -> Optional[Clock]:
    """The hosts' clocks against the first host of the launch order (else the first host), at its first packet."""
    names = [h.name for h in hosts]
    if len(names) < 2:
        return None
    reference = next((n for n in layout.RunManifest(run_input.run).launch_order if n in names), names[0])
    t0 = hosts[names.index(reference)].first_ns
    return estimate_clocks(names, host_flows, locals_, reference, t0)


def _capture_summary(host: str, s: FileHealth) -> CaptureSummary:
    kinds = {name: int(v) for name, v in zip(L.KIND_NAMES, s.kinds) if v}
    return CaptureSummary(
        path=s.path,
        host=host,
        format=s.format,
        linktypes=s.linktypes,
        packets=s.records,
        bytes=s.file_bytes,
        first_ns=s.first_ns,
        last_ns=s.last_ns,
        frame_kinds=kinds,
        warnings=list(s.warnings),
    )


def _views_table(
    hosts: list[HostInput], host_flows: list[HostFlows], locals_: list[list[tuple[int, int]]], col: int
) -> pd.DataFrame:
    """Every (flow, capturing host) pair with that capture's counts and the flow's global id; row r is
    host_index's local flow local_index, hosts in order (one frame built from whole columns: a frame per
    host cost ~1 ms each, a second at hundreds of hosts)."""
    counts = [len(hf.keys) for hf in host_flows]
    keys = np.concatenate([hf.keys for hf in host_flows]) if host_flows else np.zeros((0, 5), np.uint64)
    a = np.concatenate([hf.agg for hf in host_flows]) if host_flows else np.zeros((0, L.N_AGG), np.int64)
    ukeys, inv = unique_rows(keys)
    host_index = np.repeat(np.arange(len(host_flows), dtype=np.int64), counts)
    names = np.array([h.name for h in hosts], dtype=object)
    k = ukeys[inv]
    sport, dport, qp = key_ports(k[:, 4])
    return pd.DataFrame(
        {
            "flow_id": inv,
            "host": names[host_index],
            "host_index": host_index,
            "sent_here": _concat_bool([local_mask(hf.keys, local, src=True) for hf, local in zip(host_flows, locals_)]),
            "received_here": _concat_bool(
                [local_mask(hf.keys, local, src=False) for hf, local in zip(host_flows, locals_)]
            ),
            "local_index": np.concatenate([np.arange(n, dtype=np.int64) for n in counts])
            if counts
            else np.zeros(0, np.int64),
            "packets": a[:, L.AGG_PACKETS],
            "opened": a[:, L.AGG_WSCALE] >= 0,  # the capture saw this flow's SYN: it opened while captured
            "bytes": a[:, col],
            "ip_bytes": a[:, L.AGG_IP_BYTES],
            "wire_bytes": a[:, L.AGG_WIRE_BYTES],
            "payload_bytes": a[:, L.AGG_PAYLOAD_BYTES],
            "start_ns": a[:, L.AGG_FIRST_NS],
            "end_ns": a[:, L.AGG_LAST_NS],
            "retransmitted_bytes": a[:, L.AGG_RETRANS_BYTES],
            "missing_payload": missing_payload(a),
            "src": [address_text(int(x), int(y)) for x, y in zip(k[:, 0], k[:, 1])],
            "dst": [address_text(int(x), int(y)) for x, y in zip(k[:, 2], k[:, 3])],
            "sport": sport,
            "dport": dport,
            "qp": qp,
            "proto": [proto_name(int(p)) for p in (k[:, 4] & np.uint64(0xFF))],
        }
    )


def _concat_bool(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _choose_views(views: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per flow: the sender's view, else the receiver's, else the capture with most bytes, a view
    whose capture missed part of the flow last; and the views rows chosen."""
    if views.empty:
        return pd.DataFrame(
            columns=[
                "flow_id",
                "src",
                "dst",
                "sport",
                "dport",
                "proto",
                "packets",
                "bytes",
                "payload_bytes",
                "start_ns",
                "end_ns",
                "mean_bps",
                "retransmitted_bytes",
                "seen_by",
                "view",
                "qp",
                "held",
                "short_in",
            ]
        ), np.zeros(0, np.int64)
    rank = np.where(views["sent_here"], 0, np.where(views["received_here"], 1, 2))
    short = view_shortfall(views)
    gapped = short > GAPPED  # a capture with holes in a flow yields it to one without (issue 47)
    ordered = views.assign(_gapped=gapped, _short=short, _rank=rank).sort_values(
        ["flow_id", "_gapped", "_rank", "bytes"], ascending=[True, True, True, False]
    )
    seen: dict[int, dict[str, None]] = {}
    holes: dict[int, list[str]] = {}  # the captures that missed part of each flow
    for f, h, g in zip(views["flow_id"].tolist(), views["host"].tolist(), gapped.tolist()):
        seen.setdefault(f, {})[h] = None
        if g:
            holes.setdefault(f, []).append(h)
    first = ordered.drop_duplicates("flow_id")
    rows = first.index.to_numpy()
    best = first.set_index("flow_id")
    dur = (best["end_ns"] - best["start_ns"]).to_numpy()
    out = pd.DataFrame(
        {
            "flow_id": best.index.to_numpy(),
            "src": best["src"].to_numpy(),
            "dst": best["dst"].to_numpy(),
            "sport": best["sport"].to_numpy(),
            "dport": best["dport"].to_numpy(),
            "proto": best["proto"].to_numpy(),
            "packets": best["packets"].to_numpy(),
            "bytes": best["bytes"].to_numpy(),
            "ip_bytes": best["ip_bytes"].to_numpy(),
            "wire_bytes": best["wire_bytes"].to_numpy(),
            "payload_bytes": best["payload_bytes"].to_numpy(),
            "start_ns": best["start_ns"].to_numpy(),
            "end_ns": best["end_ns"].to_numpy(),
            "mean_bps": np.where(dur > 0, best["bytes"].to_numpy() * 8e9 / np.maximum(dur, 1), 0.0),
            "retransmitted_bytes": best["retransmitted_bytes"].to_numpy(),
            "seen_by": np.array([",".join(seen[f]) for f in best.index.tolist()], dtype=object),
            "view": best["host"].to_numpy(),
            "qp": best["qp"].to_numpy(np.int64),  # -1: not a queue pair
            # the share of its payload the view read holds, where that view has holes too (NaN: whole)
            "held": np.where(best["_gapped"].to_numpy(bool), 1.0 - best["_short"].to_numpy(np.float64), np.nan),
            "short_in": np.array([",".join(holes.get(f, [])) for f in best.index.tolist()], dtype=object),
        }
    )
    return out.sort_values("bytes", ascending=False, kind="stable").reset_index(drop=True), rows


def _flow_series(
    host_flows: list[HostFlows], chosen_rows: np.ndarray, views: pd.DataFrame, bin_ns: int
) -> pd.DataFrame:
    """Sparse per-flow series (non-empty bins) from each flow's chosen view, in (flow, time) order: a cell kept
    when its (host, local flow) row of `views` is a chosen one.

    Each host's kept cells are written straight into their places. A flow's cells all come from its chosen host,
    whose folded table holds them in (flow, bin) order (fold.sum_cells), so a flow's block starts after the cells
    of every lower flow id. Concatenating every host's cells and sorting them by flow held the 5.8 M cells at
    512 hosts three times over (and pandas copied the columns again into one block): 290 MB more at the peak."""
    gid = np.full(len(views), -1, dtype=np.int64)
    gid[chosen_rows] = views["flow_id"].to_numpy()[chosen_rows]
    offsets = np.cumsum([0] + [len(hf.keys) for hf in host_flows])
    per_flow = np.zeros(int(gid.max()) + 1 if len(gid) else 0, dtype=np.int64)
    for o, hf in zip(offsets, host_flows):
        mine = gid[o : o + len(hf.keys)]
        chosen = mine >= 0
        per_flow[mine[chosen]] = np.bincount(hf.cell_flow, minlength=len(mine))[chosen]
    start = np.cumsum(per_flow) - per_flow
    t_ns = np.empty(int(per_flow.sum()), dtype=np.int64)
    nbytes = np.empty_like(t_ns)
    for o, hf in zip(offsets, host_flows):
        flow = gid[o + hf.cell_flow]
        keep = flow >= 0
        local = hf.cell_flow[keep]
        at = start[flow[keep]] + np.arange(len(local)) - np.searchsorted(local, local)
        t_ns[at] = hf.cell_bin[keep] * bin_ns
        nbytes[at] = hf.cell_bytes[keep]
    columns = {
        "flow_id": np.repeat(np.arange(len(per_flow), dtype=np.int64), per_flow),
        "t_ns": t_ns,
        "bytes": nbytes,
        "bps": nbytes.astype(np.float64) * 8e9 / bin_ns,
    }
    return pd.DataFrame(columns, copy=False)


def coarser_series(series: pd.DataFrame, bin_ns: int) -> pd.DataFrame:
    """SERIES (flow_id, t_ns, bytes in (flow, time) order, at a width BIN_NS is a multiple of) summed into bins of
    BIN_NS: flooring keeps that order, so each new cell is a run of old ones."""
    flow = series["flow_id"].to_numpy(np.int64)
    t = series["t_ns"].to_numpy(np.int64) // bin_ns * bin_ns
    if not len(flow):
        return pd.DataFrame({"flow_id": flow, "t_ns": t, "bytes": series["bytes"].to_numpy()})
    starts = np.flatnonzero(np.r_[True, (flow[1:] != flow[:-1]) | (t[1:] != t[:-1])])
    nbytes = np.add.reduceat(series["bytes"].to_numpy(), starts)
    return pd.DataFrame({"flow_id": flow[starts], "t_ns": t[starts], "bytes": nbytes}, copy=False)


def _cells_dropped(hf: HostFlows) -> HostFlows:
    """HF without its series cells: no table past the flow and host series reads them."""
    empty = np.zeros(0, dtype=np.int64)
    return replace(hf, cell_flow=empty, cell_bin=empty, cell_bytes=empty)


def _link_speed(h: HostInput, cli_bps: Optional[float], assumptions: list[str]) -> tuple[float, str]:
    meta_bps = h.meta.link_speed_bps if h.meta else None
    if meta_bps:
        return meta_bps, "meta"
    if cli_bps:
        return float(cli_bps), "cli"
    assumptions.append(
        f"{h.name}: link speed unknown; assumed {ASSUMED_LINK_BPS / 1e9:g} Gbit/s "
        f"(give --link-speed for real utilization figures)"
    )
    return ASSUMED_LINK_BPS, "assumed"


def _hosts(
    hosts: list[HostInput],
    host_flows: list[HostFlows],
    locals_: list[list[tuple[int, int]]],
    files: list[list[FileHealth]],
    col: int,
    bin_ns: int,
    cli_bps: Optional[float],
    busy_threshold: float,
    warnings: list[str],
    assumptions: list[str],
) -> tuple[list[HostSummary], pd.DataFrame]:
    """Per-host tx/rx totals, sparse series and utilization summaries."""
    summaries, series = [], []
    for h, hf, local, host_files in zip(hosts, host_flows, locals_, files):
        link_bps, source = _link_speed(h, cli_bps, assumptions)
        hs = [f for f in host_files if f.records]
        first = min((s.first_ns for s in hs), default=0)
        last = max((s.last_ns for s in hs), default=0)
        span_bins = last // bin_ns - first // bin_ns + 1 if hs else 0
        util = {}
        totals = {}
        for direction, src in (("tx", True), ("rx", False)):
            mask = local_mask(hf.keys, local, src=src)
            totals[direction] = (int(hf.agg[mask, col].sum()), int(hf.agg[mask, L.AGG_PACKETS].sum()))
            cells = mask[hf.cell_flow] if len(hf.cell_flow) else np.zeros(0, bool)
            bins, per_bin = _per_bin(hf.cell_bin[cells], hf.cell_bytes[cells])
            util[direction] = utilization(per_bin, span_bins, bin_ns, link_bps, busy_threshold)
            series.append((h.name, direction, bins, per_bin, link_bps))
            window = max(LINK_CHECK_NS // bin_ns, 1) * bin_ns
            over = _peak_bps(bins, per_bin, bin_ns, window) / link_bps if link_bps > 0 else 0.0
            if over > PEAK_TOLERANCE:
                warnings.append(
                    f"{h.name}: {direction} rate over {window / 1e6:g} ms reached {over:.2f}x the link speed "
                    f"({link_bps / 1e9:g} Gbit/s, {source}); is the link speed right?"
                )
        meta = h.meta or layout.HostMeta({})
        counters = meta.counters or {}
        summaries.append(
            HostSummary(
                name=h.name,
                addresses=[address_text(*a) for a in local],
                link_speed_bps=link_bps,
                link_speed_source=source,
                tx_bytes=totals["tx"][0],
                rx_bytes=totals["rx"][0],
                tx_packets=totals["tx"][1],
                rx_packets=totals["rx"][1],
                first_ns=first,
                last_ns=last,
                tx_utilization=util["tx"],
                rx_utilization=util["rx"],
                drops={
                    "dropped_by_kernel": counters.get("dropped_by_kernel"),
                    "dropped_by_interface": counters.get("dropped_by_interface"),
                },
            )
        )
        for kind in ("dropped_by_kernel", "dropped_by_interface"):
            if counters.get(kind):
                warnings.append(
                    f"{h.name}: tcpdump reports {counters[kind]} packets {kind.replace('_', ' ')}; "
                    f"byte counts are a lower bound"
                )
        warnings.extend(f"{h.name}: {w}" for w in layout.capture_faults(meta))
    return summaries, _host_series(series, bin_ns)


def _peak_bps(bins: np.ndarray, per_bin: np.ndarray, bin_ns: int, window_ns: int) -> float:
    """The highest rate in bits/s over consecutive windows of window_ns (a whole number of bins)."""
    if not len(bins):
        return 0.0
    _, window = np.unique(bins // (window_ns // bin_ns), return_inverse=True)
    return float(np.bincount(window, weights=per_bin).max()) * 8e9 / window_ns


def _per_bin(bins: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bins cells fall in (ascending) and the bytes in each."""
    if not len(bins):
        return bins, nbytes.astype(np.int64)
    lo = int(bins.min())
    (offset,), per_bin = group_sum([bins - lo], [int(bins.max()) - lo + 1], nbytes)
    return offset + lo, per_bin


def _host_series(parts: list[tuple[str, str, np.ndarray, np.ndarray, float]], bin_ns: int) -> pd.DataFrame:
    """One frame for every (host, direction, bins, bytes, link speed) part, built from whole columns."""
    if not parts:
        return pd.DataFrame()
    n = [len(p[2]) for p in parts]
    per_bin = np.concatenate([p[3] for p in parts])
    link = np.repeat(np.array([p[4] for p in parts], dtype=np.float64), n)
    return pd.DataFrame(
        {
            "host": np.repeat(np.array([p[0] for p in parts], dtype=object), n),
            "direction": np.repeat(np.array([p[1] for p in parts], dtype=object), n),
            "t_ns": np.concatenate([p[2] for p in parts]) * bin_ns,
            "bytes": per_bin,
            "bps": per_bin * 8e9 / bin_ns,
            "utilization": per_bin * 8e9 / bin_ns / link,
        }
    )

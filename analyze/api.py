"""The analyzer's Python API: `analyze(paths)` returns one Result with its pandas tables.

Notebook users call this directly; the CLI is a few lines over it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from analyze import layouts as L
from analyze.collective import add_collective
from analyze.engine import Progress
from analyze.flows import (
    HostFlows, address_key, address_text, infer_local, local_mask, merge_host, proto_name, unique_rows,
)
from analyze.inputs import HostInput, RunInput
from analyze.markers_table import load_markers
from analyze.result import CaptureSummary, FlowRecord, HostSummary, Result, Tables
from analyze.reading import Reading, start_reading
from analyze.scaling_result import add_scaling
from analyze.scan import FileHealth, StreamScan
from analyze.utilization import utilization

ASSUMED_LINK_BPS = 10e9
DEFAULT_BIN_NS = 10_000_000
DEFAULT_BUSY_THRESHOLD = 0.01
BYTE_COLUMN = {"ip": L.AGG_IP_BYTES, "wire": L.AGG_WIRE_BYTES, "payload": L.AGG_PAYLOAD_BYTES}


def analyze(paths: Sequence[str | Path], *, link_speed_bps: Optional[float] = None, bin_ns: int = DEFAULT_BIN_NS,
            byte_mode: str = "ip", busy_threshold: float = DEFAULT_BUSY_THRESHOLD, workers: Optional[int] = None,
            progress: Optional[Progress] = None, launch_order: Optional[Sequence[str]] = None,
            gradient_bytes: Optional[float] = None, nccl_log: Optional[str | Path] = None,
            single_iteration_time_s: Optional[float] = None, scheduler: Optional[str] = None) -> Result:
    """Read the captures under `paths` and compute flows, series, link utilization and the collective
    (topology, iterations; launch_order / gradient_bytes / nccl_log refine it), and the what-if (`scaling`)
    when the run allows it; single_iteration_time_s (T of one worker) adds the measured scaling factor.
    scheduler ("tcp://HOST:PORT") scans the hosts on that Dask cluster instead of local processes (`workers`);
    its workers must see the files at the same absolute paths.

    Raises analyze.formats.FileError (one line: file, offset, cause) when input cannot be read, and
    analyze.cluster.ClusterError when the Dask cluster cannot do the scans.
    """
    reading = start_reading(paths, bin_ns=bin_ns, byte_mode=byte_mode, workers=workers, progress=progress,
                            scheduler=scheduler)
    return finish(reading, link_speed_bps=link_speed_bps, busy_threshold=busy_threshold, launch_order=launch_order,
                  gradient_bytes=gradient_bytes, nccl_log=nccl_log, single_iteration_time_s=single_iteration_time_s)


def finish(reading: Reading, *, link_speed_bps: Optional[float] = None,
           busy_threshold: float = DEFAULT_BUSY_THRESHOLD, launch_order: Optional[Sequence[str]] = None,
           gradient_bytes: Optional[float] = None, nccl_log: Optional[str | Path] = None,
           single_iteration_time_s: Optional[float] = None) -> Result:
    """The second half of analyze(): collect the scans `reading` set going and compute everything else."""
    scans = reading.collect()
    result = build_result(reading.run_input, scans, link_speed_bps=link_speed_bps, bin_ns=reading.bin_ns,
                          byte_mode=reading.byte_mode, busy_threshold=busy_threshold)
    add_collective(result, launch_order=launch_order, gradient_bytes=gradient_bytes,
                   nccl_log=Path(nccl_log) if nccl_log else None)
    add_scaling(result, single_iteration_time_s=single_iteration_time_s)
    return result


def build_result(run_input: RunInput, scans: list[StreamScan], *, link_speed_bps: Optional[float], bin_ns: int,
                 byte_mode: str, busy_threshold: float) -> Result:
    """Assemble the Result from the hosts' stream scans, one per host in order (pure: no file access)."""
    warnings = list(run_input.warnings)
    assumptions: list[str] = []
    captures: list[CaptureSummary] = []
    host_flows: list[HostFlows] = []
    for h, stream in zip(run_input.hosts, scans):
        for fh in stream.files:
            captures.append(_capture_summary(h.name, fh))
            warnings.extend(fh.warnings)
        host_flows.append(merge_host(h.name, [stream]))
    col = BYTE_COLUMN[byte_mode]

    locals_: list[list[tuple[int, int]]] = []
    for h, hf in zip(run_input.hosts, host_flows):
        given = [a for a in (h.meta or {}).get("addresses", []) if a]
        if given:
            locals_.append([address_key(str(a)) for a in given])
        else:
            locals_.append(infer_local(hf))
            if hf.keys.size:
                assumptions.append(f"{h.name}: own address inferred from traffic as "
                                   f"{', '.join(address_text(*a) for a in locals_[-1])} (no meta.json addresses)")

    views = _views_table(run_input.hosts, host_flows, locals_, col)
    flows_df = _choose_views(views)
    flow_series = _flow_series(host_flows, views, flows_df, bin_ns)
    hosts, host_series = _hosts(run_input.hosts, host_flows, locals_, scans, col, bin_ns, link_speed_bps,
                                busy_threshold, warnings, assumptions)
    markers = load_markers(run_input.hosts, warnings)
    flow_records = [
        FlowRecord(src=r.src, dst=r.dst, sport=int(r.sport), dport=int(r.dport), proto=r.proto,
                   packets=int(r.packets), bytes=int(r.bytes), payload_bytes=int(r.payload_bytes),
                   start_ns=int(r.start_ns), end_ns=int(r.end_ns), mean_bps=float(r.mean_bps),
                   retransmitted_bytes=int(r.retransmitted_bytes), seen_by=r.seen_by.split(","), view=r.view)
        for r in flows_df.itertuples(index=False)
    ]
    return Result(byte_mode=byte_mode, bin_ns=bin_ns, busy_threshold=busy_threshold, hosts=hosts,
                  flows=flow_records, captures=captures, warnings=warnings, assumptions=assumptions,
                  run=run_input.run,
                  tables=Tables(flows=flows_df, flow_views=views, flow_series=flow_series, host_series=host_series,
                                markers=markers))


def _capture_summary(host: str, s: FileHealth) -> CaptureSummary:
    kinds = {name: int(v) for name, v in zip(L.KIND_NAMES, s.kinds) if v}
    return CaptureSummary(path=s.path, host=host, format=s.format, linktypes=s.linktypes, packets=s.records,
                          bytes=s.file_bytes, first_ns=s.first_ns, last_ns=s.last_ns, frame_kinds=kinds,
                          warnings=list(s.warnings))


def _views_table(hosts: list[HostInput], host_flows: list[HostFlows], locals_: list[list[tuple[int, int]]],
                 col: int) -> pd.DataFrame:
    """Every (flow, capturing host) pair with that capture's counts and the flow's global id."""
    frames = []
    all_keys = np.concatenate([hf.keys for hf in host_flows]) if host_flows else np.zeros((0, 5), np.uint64)
    ukeys, inv = unique_rows(all_keys)
    start = 0
    for hi, (h, hf, local) in enumerate(zip(hosts, host_flows, locals_)):
        n = len(hf.keys)
        a = hf.agg
        frames.append(pd.DataFrame({
            "flow_id": inv[start:start + n], "host": h.name, "host_index": hi,
            "sent_here": local_mask(hf.keys, local, src=True), "received_here": local_mask(hf.keys, local, src=False),
            "local_index": np.arange(n),
            "packets": a[:, L.AGG_PACKETS], "bytes": a[:, col], "ip_bytes": a[:, L.AGG_IP_BYTES],
            "wire_bytes": a[:, L.AGG_WIRE_BYTES], "payload_bytes": a[:, L.AGG_PAYLOAD_BYTES],
            "start_ns": a[:, L.AGG_FIRST_NS], "end_ns": a[:, L.AGG_LAST_NS],
            "retransmitted_bytes": a[:, L.AGG_RETRANS_BYTES],
        }))
        start += n
    views = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    k = ukeys[views["flow_id"].to_numpy()] if len(views) else np.zeros((0, 5), np.uint64)
    views["src"] = [address_text(int(x), int(y)) for x, y in zip(k[:, 0], k[:, 1])]
    views["dst"] = [address_text(int(x), int(y)) for x, y in zip(k[:, 2], k[:, 3])]
    views["sport"] = ((k[:, 4] >> np.uint64(24)) & np.uint64(0xFFFF)).astype(np.int64)
    views["dport"] = ((k[:, 4] >> np.uint64(8)) & np.uint64(0xFFFF)).astype(np.int64)
    views["proto"] = [proto_name(int(p)) for p in (k[:, 4] & np.uint64(0xFF))]
    return views


def _choose_views(views: pd.DataFrame) -> pd.DataFrame:
    """One row per flow: the sender's view, else the receiver's, else the capture with most bytes."""
    if views.empty:
        return pd.DataFrame(columns=["flow_id", "src", "dst", "sport", "dport", "proto", "packets", "bytes",
                                     "payload_bytes", "start_ns", "end_ns", "mean_bps", "retransmitted_bytes",
                                     "seen_by", "view"])
    rank = np.where(views["sent_here"], 0, np.where(views["received_here"], 1, 2))
    ordered = views.assign(_rank=rank).sort_values(["flow_id", "_rank", "bytes"], ascending=[True, True, False])
    seen = views.groupby("flow_id")["host"].agg(lambda s: ",".join(dict.fromkeys(s)))
    best = ordered.drop_duplicates("flow_id").set_index("flow_id")
    dur = (best["end_ns"] - best["start_ns"]).to_numpy()
    out = pd.DataFrame({
        "flow_id": best.index.to_numpy(), "src": best["src"].to_numpy(), "dst": best["dst"].to_numpy(),
        "sport": best["sport"].to_numpy(), "dport": best["dport"].to_numpy(), "proto": best["proto"].to_numpy(),
        "packets": best["packets"].to_numpy(), "bytes": best["bytes"].to_numpy(),
        "ip_bytes": best["ip_bytes"].to_numpy(), "wire_bytes": best["wire_bytes"].to_numpy(),
        "payload_bytes": best["payload_bytes"].to_numpy(), "start_ns": best["start_ns"].to_numpy(),
        "end_ns": best["end_ns"].to_numpy(),
        "mean_bps": np.where(dur > 0, best["bytes"].to_numpy() * 8e9 / np.maximum(dur, 1), 0.0),
        "retransmitted_bytes": best["retransmitted_bytes"].to_numpy(),
        "seen_by": seen.loc[best.index].to_numpy(), "view": best["host"].to_numpy(),
    })
    return out.sort_values("bytes", ascending=False, kind="stable").reset_index(drop=True)


def _flow_series(host_flows: list[HostFlows], views: pd.DataFrame, flows_df: pd.DataFrame, bin_ns: int) -> pd.DataFrame:
    """Sparse per-flow series (non-empty bins) from each flow's chosen view."""
    parts = []
    chosen = set(zip(flows_df["flow_id"], flows_df["view"]))
    for hi, hf in enumerate(host_flows):
        v = views[views["host_index"] == hi]
        keep = np.array([(f, hf.host) in chosen for f in v["flow_id"]], dtype=bool)
        gid = np.full(len(hf.keys), -1, dtype=np.int64)
        gid[v["local_index"].to_numpy()[keep]] = v["flow_id"].to_numpy()[keep]
        sel = gid[hf.cell_flow] >= 0 if len(hf.cell_flow) else np.zeros(0, bool)
        parts.append(pd.DataFrame({"flow_id": gid[hf.cell_flow[sel]], "t_ns": hf.cell_bin[sel] * bin_ns,
                                   "bytes": hf.cell_bytes[sel]}))
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["flow_id", "t_ns", "bytes"])
    df["bps"] = df["bytes"].astype(np.float64) * 8e9 / bin_ns
    return df.sort_values(["flow_id", "t_ns"], kind="stable").reset_index(drop=True)


def _link_speed(h: HostInput, cli_bps: Optional[float], assumptions: list[str]) -> tuple[float, str]:
    meta_bps = (h.meta or {}).get("link_speed_bps")
    if meta_bps:
        return float(meta_bps), "meta"
    if cli_bps:
        return float(cli_bps), "cli"
    assumptions.append(f"{h.name}: link speed unknown; assumed {ASSUMED_LINK_BPS / 1e9:g} Gbit/s "
                       f"(give --link-speed for real utilization figures)")
    return ASSUMED_LINK_BPS, "assumed"


def _hosts(hosts: list[HostInput], host_flows: list[HostFlows], locals_: list[list[tuple[int, int]]],
           scans: list[StreamScan], col: int, bin_ns: int, cli_bps: Optional[float], busy_threshold: float,
           warnings: list[str], assumptions: list[str]) -> tuple[list[HostSummary], pd.DataFrame]:
    """Per-host tx/rx totals, sparse series and utilization summaries."""
    summaries, series = [], []
    for h, hf, local, stream in zip(hosts, host_flows, locals_, scans):
        link_bps, source = _link_speed(h, cli_bps, assumptions)
        hs = [f for f in stream.files if f.records]
        first = min((s.first_ns for s in hs), default=0)
        last = max((s.last_ns for s in hs), default=0)
        span_bins = last // bin_ns - first // bin_ns + 1 if hs else 0
        util = {}
        totals = {}
        for direction, src in (("tx", True), ("rx", False)):
            mask = local_mask(hf.keys, local, src=src)
            totals[direction] = (int(hf.agg[mask, col].sum()), int(hf.agg[mask, L.AGG_PACKETS].sum()))
            cells = mask[hf.cell_flow] if len(hf.cell_flow) else np.zeros(0, bool)
            bins, idx = np.unique(hf.cell_bin[cells], return_inverse=True)
            per_bin = np.bincount(idx, weights=hf.cell_bytes[cells], minlength=len(bins)).astype(np.int64)
            util[direction] = utilization(per_bin, span_bins, bin_ns, link_bps, busy_threshold)
            series.append(pd.DataFrame({"host": h.name, "direction": direction, "t_ns": bins * bin_ns,
                                        "bytes": per_bin, "bps": per_bin * 8e9 / bin_ns,
                                        "utilization": per_bin * 8e9 / bin_ns / link_bps}))
            if util[direction].peak > 1.0:
                warnings.append(f"{h.name}: {direction} peak rate is {util[direction].peak:.2f}x the link speed "
                                f"({link_bps / 1e9:g} Gbit/s, {source}); is the link speed right?")
        meta = h.meta or {}
        counters = meta.get("counters") or {}
        summaries.append(HostSummary(
            name=h.name, addresses=[address_text(*a) for a in local], link_speed_bps=link_bps,
            link_speed_source=source, tx_bytes=totals["tx"][0], rx_bytes=totals["rx"][0],
            tx_packets=totals["tx"][1], rx_packets=totals["rx"][1], first_ns=first, last_ns=last,
            tx_utilization=util["tx"], rx_utilization=util["rx"],
            drops={"dropped_by_kernel": counters.get("dropped_by_kernel"),
                   "dropped_by_interface": counters.get("dropped_by_interface")},
        ))
        for kind in ("dropped_by_kernel", "dropped_by_interface"):
            if counters.get(kind):
                warnings.append(f"{h.name}: tcpdump reports {counters[kind]} packets {kind.replace('_', ' ')}; "
                                f"byte counts are a lower bound")
    df = pd.concat(series, ignore_index=True) if series else pd.DataFrame()
    return summaries, df

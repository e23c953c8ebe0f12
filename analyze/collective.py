"""The collective, end to end: topology, iterations, bytes per iteration and the ring theory check.

One entry point, `add_collective`, runs after `build_result` and stores two JSON-ready keys in
`Result.extra`: `topology` and `iterations`. Everything here is computed from the Result's tables; the
only file it may read is the NCCL log the user named.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from analyze.iterations import (
    host_percentiles, infer_windows, on_pairs, per_iteration, ring_theory, windows_from_markers,
)
from analyze.nccl_log import compare_rings, read_nccl_log
from analyze.topology import address_hosts, classify, flow_hosts, host_edges, ring_pairs

RING_KINDS = ("ring", "bidirectional_ring")


def launch_order_of(run: Optional[dict[str, Any]]) -> Optional[list[str]]:
    """Host launch order from run.json's "hosts" (names or {"name": ...} objects)."""
    hosts = (run or {}).get("hosts") or []
    names = [str(h.get("name") if isinstance(h, dict) else h) for h in hosts]
    return [n for n in names if n and n != "None"] or None


def _markers_gradient_bytes(markers: pd.DataFrame) -> Optional[float]:
    if "gradient_bytes" not in markers or markers["gradient_bytes"].dropna().empty:
        return None
    return float(markers["gradient_bytes"].dropna().median())


def add_collective(result: Any, *, launch_order: Optional[Sequence[str]] = None,
                   gradient_bytes: Optional[float] = None, nccl_log: Optional[Path] = None) -> None:
    """Compute `topology` and `iterations` from the result's tables and store them in result.extra."""
    tables = result.tables
    addr_host = address_hosts(result.hosts)
    host_names = [h.name for h in result.hosts]
    order_given = list(launch_order) if launch_order else launch_order_of(result.run)
    flows = tables.flows if tables is not None else pd.DataFrame()
    edges = host_edges(flows, addr_host) if len(flows) else host_edges(pd.DataFrame(), addr_host)
    topo = classify(edges, host_names, addr_host, order_given)
    markers = tables.markers if tables is not None else pd.DataFrame()

    ranks_per_host = 1
    if len(markers) and "rank" in markers:
        ranks_per_host = int(markers.groupby("host")["rank"].nunique().max())
    log = read_nccl_log(Path(nccl_log)) if nccl_log else None
    if log is not None:
        topo["nccl"] = compare_rings(log, topo["order"] if topo["kind"] in RING_KINDS else [], addr_host)
        ranks_per_host = max(ranks_per_host, log.ranks_per_host())
        if topo["nccl"]["matches"] is False:
            topo["notes"].append("the NCCL log's ring differs from the ring the packets took")
    if ranks_per_host > 1:
        topo["notes"].append(f"{ranks_per_host} ranks per server: only the inter-server ring edges are visible "
                             f"in packets; GPU-to-GPU hops inside a server are not")
    result.extra["topology"] = topo
    result.extra["iterations"] = _iterations(result, flows, addr_host, topo, markers, gradient_bytes, log)


def _iterations(result: Any, flows: pd.DataFrame, addr_host: dict[str, str], topo: dict[str, Any],
                markers: pd.DataFrame, gradient_bytes: Optional[float], log: Any) -> dict[str, Any]:
    """The `iterations` key: windows (markers or inferred), per-iteration bytes and the theory check."""
    bin_ns = int(result.bin_ns)
    out: dict[str, Any] = {"source": None, "method": None, "confidence": 0.0, "count": 0, "period_ns": None,
                           "per_iteration": [], "bytes_per_iteration_per_host": host_percentiles([], "", []),
                           "rx_bytes_per_iteration_per_host": host_percentiles([], "", []),
                           "implied_gradient_bytes": None, "theory_ratio": None, "notes": []}
    fs = result.tables.flow_series if result.tables is not None else pd.DataFrame()
    if flows.empty or fs is None or fs.empty:
        out["notes"].append("no traffic to cut into iterations")
        return out
    series = _with_hosts(fs, flow_hosts(flows, addr_host))
    series = series[series["src_host"] != series["dst_host"]]
    pairs = ring_pairs(topo)
    coll = series[on_pairs(series, pairs)] if pairs else series
    if len(markers):
        windows = windows_from_markers(markers)
        out.update(source="markers", method="markers", confidence=1.0)
    elif len(coll):
        windows, info = infer_windows(coll, bin_ns)
        out.update(source="inferred", method=info["method"], confidence=info["confidence"])
        out["notes"].extend(info["notes"])
    else:
        out["notes"].append("no collective traffic to cut into iterations")
        return out
    nodes = sorted({e["src"] for e in topo["edges"]} | {e["dst"] for e in topo["edges"]}) or \
        sorted(set(series["src_host"]))
    series = series[series["src_host"].isin(nodes) | series["dst_host"].isin(nodes)]
    per_it = per_iteration(series, windows, pairs, bin_ns, markers, nodes)
    starts = windows["start_ns"].to_numpy(np.int64)
    out.update(count=len(per_it), period_ns=float(np.median(np.diff(starts))) if len(starts) > 1 else None,
               per_iteration=per_it,
               bytes_per_iteration_per_host=host_percentiles(per_it, "bytes_by_host", nodes),
               rx_bytes_per_iteration_per_host=host_percentiles(per_it, "rx_bytes_by_host", nodes))
    comm = np.array([it["comm_ns"] for it in per_it if it["comm_ns"] > 0], dtype=np.float64)
    rates = np.array([it["rate_bps"] for it in per_it if it["comm_ns"] > 0], dtype=np.float64)
    out["comm_ns_median"] = float(np.median(comm)) if len(comm) else None
    out["rate_bps_median"] = float(np.median(rates)) if len(rates) else None

    known, source = (gradient_bytes, "option") if gradient_bytes else (_markers_gradient_bytes(markers), "markers")
    out["gradient_bytes"] = known
    out["gradient_bytes_source"] = source if known else None
    n = _ring_size(markers, log, len(nodes))
    if topo["kind"] in RING_KINDS:
        theory = ring_theory(out["bytes_per_iteration_per_host"]["median"], n, known)
        out.update(theory)
        out["notes"].append(f"theory: a ring all-reduce of S bytes over N={n} ranks sends 2(N-1)/N x S "
                            f"= {2 * (n - 1) / n:.4g} x S per host per iteration")
        if known and theory["theory_ratio"] is not None:
            out["notes"].append(f"measured/theory = {theory['theory_ratio']:.4f} ({result.byte_mode} bytes; "
                                f"headers above the gradient payload count in ip and wire modes)")
    else:
        out.update(ring_theory(None, n, None))
        out["notes"].append(f"no ring found ({topo['kind']}): the 2(N-1)/N x S check applies to ring all-reduce only")
    return out


def _with_hosts(fs: pd.DataFrame, fh: pd.DataFrame) -> pd.DataFrame:
    """flow_series cells of the flows in `fh`, with their src_host and dst_host as categoricals over the
    sorted host names: a join by flow id (an array lookup), and the later factorizing, comparing and
    isin on a million cells work on integer codes instead of strings (a merge on strings: ~20 ms per 100k)."""
    names = pd.Index(sorted(set(fh["src_host"]) | set(fh["dst_host"])))
    fid = fs["flow_id"].to_numpy(np.int64)
    ids = fh["flow_id"].to_numpy(np.int64)
    size = int(max(fid.max(initial=-1), ids.max(initial=-1))) + 1
    codes = {}
    for end in ("src_host", "dst_host"):
        by_flow = np.full(size, -1, dtype=np.int64)
        by_flow[ids] = names.get_indexer(fh[end])
        codes[end] = by_flow[fid]
    keep = codes["src_host"] >= 0
    out = fs[keep].reset_index(drop=True)
    for end, c in codes.items():
        out[end] = pd.Categorical.from_codes(c[keep], categories=names)
    return out


def _ring_size(markers: pd.DataFrame, log: Any, hosts_in_ring: int) -> int:
    """Ranks in the ring: from markers, else the NCCL log, else one rank per host."""
    if len(markers) and "rank" in markers:
        return int(markers["rank"].nunique())
    if log is not None and log.nranks:
        return int(log.nranks)
    return hosts_in_ring


__all__ = ["add_collective", "launch_order_of", "collective_lines"]


def collective_lines(extra: dict[str, Any]) -> list[str]:
    """The summary's topology and iterations section (a few human lines)."""
    t, it = extra["topology"], extra.get("iterations") or {}
    lines = ["", f"topology: {t['kind']} (confidence {t['confidence']:.2f})"]
    if t["order"]:
        arrow = " -> " if t["kind"] == "ring" else " <-> " if t["kind"] == "bidirectional_ring" else ", "
        lines.append("  " + arrow.join(t["order"][:12]) + (" ..." if len(t["order"]) > 12 else "")
                     + (arrow + t["order"][0] if t["kind"] in RING_KINDS else ""))
    if t["matches_launch_order"] is not None:
        lines.append(f"  launch order: {'matches' if t['matches_launch_order'] else 'DOES NOT match'}"
                     + (f" ({t['direction'].replace('_', ' ')})" if t.get("direction") else ""))
    if "nccl" in t and t["nccl"]["matches"] is not None:
        lines.append(f"  NCCL log ring: {'agrees' if t['nccl']['matches'] else 'DIFFERS'}")
    lines.extend(f"  note: {n}" for n in t["notes"])
    if it.get("count"):
        b = it["bytes_per_iteration_per_host"]
        how = it["source"] if it["method"] == it["source"] else f"{it['source']}: {it['method']}"
        lines.append(f"iterations: {it['count']} ({how}, confidence {it['confidence']:.2f})"
                     + (f", every {it['period_ns'] / 1e6:.4g} ms" if it.get("period_ns") else ""))
        lines.append(f"  bytes per iteration per host (tx): median {b['median']:,.0f}, p5 {b['p5']:,.0f}, "
                     f"p95 {b['p95']:,.0f}; rx median {it['rx_bytes_per_iteration_per_host']['median']:,.0f}")
        if it.get("comm_ns_median"):
            lines.append(f"  communication {it['comm_ns_median'] / 1e6:.4g} ms per iteration at "
                         f"{it['rate_bps_median'] / 1e9:.3g} Gbit/s per host")
        if it.get("implied_gradient_bytes"):
            lines.append(f"  implied gradient S = {it['implied_gradient_bytes']:,.0f} B "
                         f"(~{it['implied_params_fp32']:,.0f} fp32 / {it['implied_params_fp16']:,.0f} fp16 params)"
                         + (f"; measured/theory {it['theory_ratio']:.4f}" if it.get("theory_ratio") else ""))
    return lines

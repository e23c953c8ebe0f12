"""The analysis as a Chrome/Perfetto trace-event JSON, to open beside a PyTorch profiler (Kineto) trace.

Why: users read their step times in the profiler's timeline (ui.perfetto.dev, HTA). The same timeline with the
network's view beside it shows whether a slow step waited on the wire. Each host is a process with tracks for its
iterations, its communication window in each iteration and its ring steps per edge (runs of busy bins towards
one peer), counter tracks for its tx and rx utilization, and instant events where its data was re-sent (and, for
RDMA queue pairs, each NAK, CNP and resend).

Times follow Kineto's convention: `baseTimeNanoseconds` (wall clock, ns since the epoch) plus each event's `ts`
in µs. Every event sits on its host's own capture clock, the clock the profiler on that host reads; what was
captured by another host is moved onto it by the clock offsets the analysis estimated. merge() puts a Kineto
trace and this one into one file on a common base.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from analyze.model.findings import Job
from analyze.read.trace_file import read_trace
from analyze.model.result import Result, Tables

PID_BASE = 1_000_000  # above real process ids, so a merged Kineto trace's processes never share a pid with ours
TID_ITERATIONS, TID_COMMUNICATION, TID_WAITS, TID_STEPS = 1, 2, 3, 10


def trace_events(result: Result) -> dict[str, Any]:
    """The trace as a JSON-ready dict: {"traceEvents": [...], "baseTimeNanoseconds": ..., ...}."""
    t = result.tables
    if t is None:
        raise ValueError("the result has no tables (read from a saved JSON?): analyze the captures to get a trace")
    names = [h.name for h in result.hosts]
    starts = [h.first_ns for h in result.hosts if h.first_ns] or [0]
    base = min(starts) // 1_000_000_000 * 1_000_000_000
    offset = _offsets(result)
    owner = {a: h.name for h in result.hosts for a in h.addresses}
    events: list[dict[str, Any]] = []
    groups = _group_of_edge(result)
    for i, host in enumerate(names):
        pid = PID_BASE + i
        events += _meta(pid, host, i)
        iterations = _iterations(result, host)
        for k, (start, end) in enumerate(iterations):
            events.append(_slice(pid, TID_ITERATIONS, f"iteration {k}", start, end, base, {"iteration": k}))
        tx = t.host_series[(t.host_series["host"] == host) & (t.host_series["direction"] == "tx")]
        for k, (start, end) in enumerate(iterations):
            busy = tx[(tx["t_ns"] >= start) & (tx["t_ns"] < end) & (tx["bytes"] > 0)]
            if len(busy):
                first, last = int(busy["t_ns"].min()), int(busy["t_ns"].max()) + result.bin_ns
                sent = {"iteration": k, "bytes": int(busy["bytes"].sum())}
                events.append(_slice(pid, TID_COMMUNICATION, "communication", first, last, base, sent))
        peers = _ring_steps(t, owner, host, offset, result.bin_ns)
        for j, (peer, runs) in enumerate(sorted(peers.items())):
            tid = TID_STEPS + j
            events.append(_thread_name(pid, tid, f"ring step → {peer}{groups.get((host, peer), '')}", 10 + j))
            for start, end, nbytes in runs:
                events.append(_slice(pid, tid, f"→ {peer}", start, end, base, {"bytes": nbytes}))
        for direction in ("tx", "rx"):
            rows = t.host_series[(t.host_series["host"] == host) & (t.host_series["direction"] == direction)]
            events += _counter(pid, f"{direction} utilization %", rows, result.bin_ns, base)
        events += _resent(t, owner, host, result.bin_ns, pid, base)
        events += _rdma_instants(t, owner, host, pid, base)
        events += _waits(result, host, pid, offset.get(host, 0), base)
    for k, job in enumerate(result.jobs or []):
        events += _job_events(job, PID_BASE + len(names) + k, len(names) + k, offset, base)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base,
        "traceName": "ringscope",
        "ringscope": {"hosts": names, "bin_ns": result.bin_ns, "clock_offsets_ns": offset},
    }


def write_trace(result: Result, path: Path, beside: Iterable[Path] = ()) -> int:
    """Write the trace (merged with the Kineto traces BESIDE, if any) to PATH; its size in bytes."""
    doc = trace_events(result)
    for other in beside:
        doc = merge(read_trace(other), doc)
    data = json.dumps(doc, separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(data, 6) if path.suffix == ".gz" else data)
    return len(data)


def merge(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Both traces' events in one, on FIRST's base time (each event keeps its absolute time)."""
    base = int(first.get("baseTimeNanoseconds", 0))
    shift = (int(second.get("baseTimeNanoseconds", 0)) - base) / 1000
    moved = [dict(e, ts=e["ts"] + shift) if "ts" in e else e for e in second["traceEvents"]]
    return {**second, **first, "baseTimeNanoseconds": base, "traceEvents": first["traceEvents"] + moved}


def _waits(result: Result, host: str, pid: int, shift: int, base: int) -> list[dict[str, Any]]:
    """Where HOST is late into the collective (analyze.wire.stragglers): each iteration the ring waited for it,
    from the others' first sends to its entry, moved from the reference clock onto the host's."""
    late = [s for s in result.stragglers or [] if s.host == host and s.kind == "compute" and s.waits]
    if not late:
        return []
    out = [_thread_name(pid, TID_WAITS, "the ring waits for this host (compute straggler)", 2)]
    for s in late:
        for k, start, end in s.waits or []:
            args = {"iteration": k, "lost_ms": round((end - start) / 1e6, 3), "confidence": s.confidence}
            out.append(_slice(pid, TID_WAITS, f"ring waits for {host}", start + shift, end + shift, base, args))
    return out


def _offsets(result: Result) -> dict[str, int]:
    """Each host's clock ahead of the reference host's, in ns (0 where the analysis could not tell)."""
    hosts = result.clock.hosts if result.clock is not None else []
    return {h.name: int(h.offset_ns or 0) for h in hosts}


def _us(ns: int, base: int) -> float:
    return round((ns - base) / 1000, 3)


def _slice(pid: int, tid: int, name: str, start: int, end: int, base: int, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "name": name,
        "cat": "ringscope",
        "ts": _us(start, base),
        "dur": round(max(end - start, 0) / 1000, 3),
        "args": args,
    }


def _thread_name(pid: int, tid: int, name: str, order: int) -> dict[str, Any]:
    return {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name, "sort_index": order}}


def _meta(pid: int, host: str, order: int) -> list[dict[str, Any]]:
    return [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"{host} (ringscope: network)"}},
        {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": order}},
        _thread_name(pid, TID_ITERATIONS, "iterations", 0),
        _thread_name(pid, TID_COMMUNICATION, "communication", 1),
    ]


def _job_events(job: Job, pid: int, order: int, offset: dict[str, int], base: int) -> list[dict[str, Any]]:
    """A process per job (where the capture holds several, or other traffic): a thread per host with the job's
    iterations on that host's clock. The host processes above show the heaviest job's."""
    w = f", W = {job.world_size}" if job.world_size else ""
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"{job.name}{w} (ringscope: job)"}},
        {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": order}},
    ]
    rows = job.iterations.per_iteration if job.iterations is not None else []
    for tid, host in enumerate(job.hosts, 1):
        events.append(_thread_name(pid, tid, f"{host}: iterations", tid))
        shift = offset.get(host, 0)
        for r in rows:
            start, end = int(r.start_ns) + shift, int(r.end_ns) + shift
            events.append(_slice(pid, tid, f"iteration {r.index}", start, end, base, {"iteration": r.index}))
    return events


def _group_of_edge(result: Result) -> dict[tuple[str, str], str]:
    """A pipeline job's edges, each with the name of its group for its track: " (data-parallel group 0)" or
    " (pipeline boundary 0-1)"; empty for one collective."""
    out = {}
    for i, g in enumerate((result.topology.groups if result.topology else None) or []):
        pair = f" {g.between[0]}-{g.between[1]}" if g.between else ""
        name = f" (data-parallel group {i})" if g.kind == "data_parallel" else f" (pipeline boundary{pair})"
        for src, dst in g.edges:
            out[(src, dst)] = name
    return out


def _iterations(result: Result, host: str) -> list[tuple[int, int]]:
    """The host's iteration windows on its own clock: its ranks' markers, else the job's iterations (found on
    the reference clock) moved onto the host's clock."""
    m = result.tables.markers if result.tables is not None else None
    if m is not None and len(m) and (m["host"] == host).any():
        g = m[m["host"] == host].groupby("iteration").agg(start=("start_ns", "min"), end=("end_ns", "max"))
        return [(int(a), int(b)) for a, b in zip(g["start"], g["end"])]
    rows = result.iterations.per_iteration if result.iterations is not None else []
    shift = _offsets(result).get(host, 0)
    return [(int(r.start_ns) + shift, int(r.end_ns) + shift) for r in rows]


def _on_host(ns: np.ndarray, seen_by: str, host: str, offset: dict[str, int]) -> np.ndarray:
    """Times read on SEEN_BY's clock, moved onto HOST's."""
    return ns - offset.get(seen_by, 0) + offset.get(host, 0)


def _ring_steps(
    t: Tables, owner: dict[str, str], host: str, offset: dict[str, int], bin_ns: int
) -> dict[str, list[tuple[int, int, int]]]:
    """Per peer the host sends to, runs of consecutive busy bins: (start ns, end ns, bytes), on the host's clock."""
    flows = t.flows[t.flows["src"].map(owner) == host]
    out: dict[str, list[tuple[int, int, int]]] = {}
    for peer, group in flows.groupby(flows["dst"].map(owner)):
        if peer == host:
            continue
        parts = []
        for view, ids in group.groupby("view")["flow_id"]:
            rows = t.flow_series[t.flow_series["flow_id"].isin(ids)]
            parts.append(pd.DataFrame({"t": _on_host(rows["t_ns"].to_numpy(), view, host, offset), "b": rows["bytes"]}))
        series = pd.concat(parts).groupby("t")["b"].sum() if parts else pd.Series(dtype="int64")
        out[str(peer)] = _runs(series.index.to_numpy(np.int64), series.to_numpy(np.int64), bin_ns)
    return out


def _runs(t: np.ndarray, nbytes: np.ndarray, bin_ns: int) -> list[tuple[int, int, int]]:
    """Consecutive bins (at most one bin apart) as (start, end, bytes) runs."""
    keep = nbytes > 0
    t, nbytes = t[keep], nbytes[keep]
    if not len(t):
        return []
    cut = np.flatnonzero(np.diff(t) > bin_ns) + 1
    starts, ends = np.r_[0, cut], np.r_[cut, len(t)]
    sums = np.add.reduceat(nbytes, starts)
    return [(int(t[a]), int(t[b - 1]) + bin_ns, int(s)) for a, b, s in zip(starts, ends, sums)]


def _counter(pid: int, name: str, rows: pd.DataFrame, bin_ns: int, base: int) -> list[dict[str, Any]]:
    """A counter track of utilization per bin, back to 0 after each run of busy bins."""
    t = rows["t_ns"].to_numpy(np.int64)
    u = rows["utilization"].to_numpy(np.float64) * 100
    events = [
        {"ph": "C", "pid": pid, "name": name, "ts": _us(int(a), base), "args": {"%": round(float(v), 3)}}
        for a, v in zip(t, u)
    ]
    gaps = np.flatnonzero(np.diff(np.r_[t, np.iinfo(np.int64).max]) > bin_ns)
    events += [
        {"ph": "C", "pid": pid, "name": name, "ts": _us(int(t[g]) + bin_ns, base), "args": {"%": 0}} for g in gaps
    ]
    return sorted(events, key=lambda e: e["ts"])


RDMA_INSTANTS = {"nak": "NAK", "rnr_nak": "RNR NAK", "nak_error": "NAK (error)", "cnp": "CNP", "resent": "RDMA resend"}


def _rdma_instants(t: Tables, owner: dict[str, str], host: str, pid: int, base: int) -> list[dict[str, Any]]:
    """An instant per NAK, CNP and resend of the queue pairs the host sends on, as its own capture saw them (on its
    clock): the requester told to go back or to slow down, and when it resent."""
    ev = t.rdma_events
    if ev is None or not len(ev):
        return []
    ev = ev[(ev["host"] == host) & ev["what"].isin(list(RDMA_INSTANTS))]
    flows = t.flows.set_index("flow_id")
    ev = ev[ev["flow_id"].map(flows["src"]).map(owner) == host]
    qp = ev["flow_id"].map(flows["qp"])
    return [
        {
            "ph": "i",
            "s": "t",
            "pid": pid,
            "tid": TID_COMMUNICATION,
            "name": RDMA_INSTANTS[what],
            "ts": _us(int(ns), base),
            "args": {"qp": int(q), "psn": int(psn)},
        }
        for ns, what, q, psn in zip(ev["t_ns"], ev["what"], qp, ev["value"])
    ]


def _resent(t: Tables, owner: dict[str, str], host: str, bin_ns: int, pid: int, base: int) -> list[dict[str, Any]]:
    """An instant event per bin in which the host's data flows re-sent bytes. The transport samples are read on
    the sender's capture (analyze.wire.transport), so they are on the host's clock already."""
    s = t.transport_samples
    if s is None or not len(s):
        return []
    s = s[s["what"] == "resent_bytes"]
    mine = s[s["flow_id"].map(t.flows.set_index("flow_id")["src"]).map(owner) == host]
    if not len(mine):
        return []
    ns = mine["t_ns"].to_numpy(np.int64)
    per_bin = pd.Series(mine["value"].to_numpy(), index=ns // bin_ns * bin_ns).groupby(level=0).sum()
    return [
        {
            "ph": "i",
            "s": "p",
            "pid": pid,
            "tid": TID_COMMUNICATION,
            "name": "retransmission",
            "ts": _us(int(a), base),
            "args": {"resent_bytes": int(v)},
        }
        for a, v in per_bin.items()
    ]

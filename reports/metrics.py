"""Prometheus metrics: the families ringscope exports, from a running capture (a live poll) and from a finished
analysis (its typed Result), written in the Prometheus text format or in OpenMetrics.

Why these names: a dashboard joins them with NCCL Inspector's, so the labels that mean the same thing take its
names (`node` for a host, `n_nodes`, `nranks`, `comm_name` for a job); units are Prometheus's base units (bytes,
seconds, ratios), counters end in `_total`. No label is a port, an address or a flow: a series per host, per job
and per heavy edge between captured hosts (edges under a tenth of the heaviest one's bytes, a rank mesh's control
traffic, are left out), so 500 hosts make thousands of series, not millions.

Why no sample timestamps in a finished analysis's file: node_exporter's textfile collector refuses a file that
carries them, and Prometheus drops samples older than its head block; the capture's own times are gauges instead
(`ringscope_capture_start_timestamp_seconds`, `..._end_...`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

from analyze.confidence.thresholds import CONFIDENT
from analyze.live.now import HEAVY_EDGE, Now
from capture.layout import RunManifest

if TYPE_CHECKING:
    from analyze.model.findings import Iterations, Straggler, Transport, WhatIf
    from analyze.model.result import Result

PREFIX = "ringscope_"
TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
JOB = "job 1"  # comm_name of the capture's one (or heaviest) job, as the live view names jobs


@dataclass
class Family:
    """One metric family: its name without the prefix (and, for a counter, without `_total`), its kind
    (counter, gauge, info), help, and samples as (labels, value)."""

    name: str
    kind: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: Optional[float], **labels: Any) -> None:
        """A sample, skipped where the value is not known."""
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            self.samples.append(({k: str(v) for k, v in labels.items()}, float(value)))


def render(families: Iterable[Family], openmetrics: bool = False) -> str:
    """FAMILIES as an exposition: the Prometheus text format (0.0.4), or OpenMetrics 1.0 (its counters' and
    infos' family names without the sample suffix, a `# EOF` at the end). Families with no sample are left out."""
    out: list[str] = []
    for f in families:
        if not f.samples:
            continue
        base = PREFIX + f.name
        suffix = {"counter": "_total", "info": "_info"}.get(f.kind, "")
        if openmetrics:
            out += [f"# HELP {base} {_help(f.help)}", f"# TYPE {base} {f.kind}"]
        else:  # the text format knows no info type: an info is a gauge whose value is 1
            kind = "gauge" if f.kind == "info" else f.kind
            out += [f"# HELP {base}{suffix} {_help(f.help)}", f"# TYPE {base}{suffix} {kind}"]
        out += [f"{base}{suffix}{_labels(labels)} {_number(value)}" for labels, value in f.samples]
    if openmetrics:
        out.append("# EOF")
    return "\n".join(out) + "\n"


def wants_openmetrics(accept: Optional[str]) -> bool:
    """Whether an HTTP Accept header asks for OpenMetrics (as Prometheus's scraper does when it may)."""
    return bool(accept) and "application/openmetrics-text" in str(accept)


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for v in labels.values())
    return "{" + ",".join(f'{k}="{v}"' for k, v in zip(labels, quoted)) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _shared_families() -> dict[str, Family]:
    """The families both sources fill: per host, per heavy edge, per job's iterations."""
    families = [
        ("tx", "host_transmit_bytes", "counter", "IP bytes the host sent, as captured on its interface."),
        ("rx", "host_receive_bytes", "counter", "IP bytes the host received, as captured on its interface."),
        ("speed", "host_link_speed_bytes_per_second", "gauge", "The host's link speed (line rate), bytes/s."),
        ("resent", "host_resent_bytes", "counter", "Bytes the host's TCP flows sent again (retransmissions)."),
        ("packets", "capture_packets", "counter", "IP packets read from the host's capture so far."),
        ("drops", "capture_kernel_dropped_packets", "gauge", "Packets tcpdump says the kernel dropped."),
        ("lost", "capture_lost_packets", "gauge", "Packets lost at the capture's end (not written)."),
        ("edges", "edge_transmit_bytes", "counter", "IP bytes one captured host sent another (a heavy edge)."),
        ("count", "iterations", "gauge", "Iterations the job finished (markers, or found in the traffic)."),
        ("confidence", "iterations_confidence_ratio", "gauge", "How sure the iteration count is, 0 to 1."),
        ("last", "last_iteration_duration_seconds", "gauge", "The last finished iteration's length."),
        ("last_bytes", "last_iteration_transmit_bytes", "gauge", "What each host sent in the last iteration."),
    ]
    return {key: Family(name, kind, text) for key, name, kind, text in families}


def live_families(now: Now, job: str = JOB) -> list[Family]:
    """A running capture at one poll (analyze.live.view): per host bytes, link speed, re-sent bytes and the
    capture's health; per heavy edge its bytes; the job's iterations so far, how sure, the last one's length and
    what each host sent in it; the limiter of the capture's latest analysis (analyze.live.limiter) where one ran."""
    f = _shared_families()
    capturing = Family("capture_capturing", "gauge", "1 while the host's agent is capturing, else 0.")
    for h in now.hosts:
        f["tx"].add(h.tx_bytes, node=h.name)
        f["rx"].add(h.rx_bytes, node=h.name)
        f["speed"].add(None if h.link_speed_bps is None else h.link_speed_bps / 8, node=h.name)
        f["resent"].add(h.resent_bytes, node=h.name)
        f["packets"].add(h.packets, node=h.name)
        f["drops"].add(h.kernel_drops, node=h.name)
        f["lost"].add(h.lost_packets, node=h.name)
        capturing.add(None if h.status is None else float(h.status == "capturing"), node=h.name)
    for src, dst, sent in now.edge_bytes:
        f["edges"].add(sent, node=src, peer=dst)
    n_nodes = str(len(now.hosts))
    if now.iterations is not None:
        f["count"].add(now.iterations, comm_name=job, n_nodes=n_nodes, source=now.iterations_source)
        f["confidence"].add(now.iterations_confidence, comm_name=job, n_nodes=n_nodes)
        f["last"].add(now.last_iteration_s, comm_name=job, n_nodes=n_nodes)
        for host, sent in sorted(now.last_iteration_bytes.items()):
            f["last_bytes"].add(sent, comm_name=job, node=host)
    for j in now.jobs[1:]:  # the first is the heaviest job, given above
        f["count"].add(j.iterations, comm_name=j.name, n_nodes=str(j.hosts), source="traffic")
        f["confidence"].add(j.confidence, comm_name=j.name, n_nodes=str(j.hosts))
    limiter, sure = _limiter_families()
    if now.limiter is not None:
        limiter.add(1, comm_name=job, n_nodes=n_nodes, **limiter_labels(*now.limiter))
        sure.add(now.limiter[1], comm_name=job, n_nodes=n_nodes)
    return [*f.values(), capturing, limiter, sure]


def limiter_labels(limiter: str, confidence: float) -> dict[str, str]:
    """The limiter's labels, live and offline alike: `limiter` is what the diagnosis states as fact, or "unsure"
    below CONFIDENT (a partial capture that cannot yet tell says so instead of another answer); `reading` is what
    it reads either way. Why: an alert on limiter="link" must not fire on a guess, and the live view's analysis of
    a half-written capture once read "sender" where the whole run's read "link" at 0.73, itself unsure."""
    return {"limiter": limiter if confidence >= CONFIDENT else "unsure", "reading": limiter}


def _limiter_families() -> tuple[Family, Family]:
    return (
        Family("limiter", "info", "What keeps the job's links from line rate, as the transport diagnosis says."),
        Family("limiter_confidence_ratio", "gauge", "How sure the transport diagnosis is of its limiter, 0 to 1."),
    )


def analysis_families(result: "Result") -> list[Family]:
    """A finished analysis: the live families for the whole capture, and per job its iterations, their mean length
    and bytes per host, each host's utilization, the limiter, the what-if's scaling factor at line rate, the
    stragglers' lost time; the capture's start and end times. Read from the typed Result (a saved one read back
    with Result.from_json serves as well)."""
    f = _shared_families()
    util = Family("host_utilization_ratio", "gauge", "Mean share of line rate the host's link carried.")
    resent_by_host: dict[str, float] = {}
    names = {a: h.name for h in result.hosts for a in h.addresses or []}
    for flow in result.flows:
        host = names.get(flow.src)
        if host:
            resent_by_host[host] = resent_by_host.get(host, 0) + (flow.retransmitted_bytes or 0)
    for h in result.hosts:
        f["tx"].add(h.tx_bytes, node=h.name)
        f["rx"].add(h.rx_bytes, node=h.name)
        f["speed"].add(None if not h.link_speed_bps else h.link_speed_bps / 8, node=h.name)
        f["resent"].add(resent_by_host.get(h.name, 0), node=h.name)
        f["packets"].add((h.tx_packets or 0) + (h.rx_packets or 0), node=h.name)
        for direction, used in (("tx", h.tx_utilization), ("rx", h.rx_utilization)):
            util.add(used.mean if used is not None else None, node=h.name, direction=direction)
        f["drops"].add((h.drops or {}).get("dropped_by_kernel"), node=h.name)
    for (src, dst), sent in _heavy_edges(result, names).items():
        f["edges"].add(sent, node=src, peer=dst)
    mean = Family("iteration_duration_seconds", "gauge", "The job's mean iteration length.")
    per_host = Family("iteration_transmit_bytes", "gauge", "What each host sent per iteration, on average.")
    limiter, sure = _limiter_families()
    scaling = Family("whatif_scaling_factor_ratio", "gauge", "Scaling factor with the network at line rate.")
    lost = Family("straggler_lost_seconds", "gauge", "Time per iteration the ring waits for a straggler.")
    for job in _jobs(result):
        _job_families(job, f, mean, per_host, [limiter, sure], scaling, lost)
    run = RunManifest(result.run)
    start = Family("capture_start_timestamp_seconds", "gauge", "When the capture started (Unix time).")
    end = Family("capture_end_timestamp_seconds", "gauge", "When the capture ended (Unix time).")
    firsts = [h.first_ns for h in result.hosts if h.first_ns]
    lasts = [h.last_ns for h in result.hosts if h.last_ns]
    start.add((run.start_ns or min(firsts, default=None) or math.nan) / 1e9)
    end.add((run.end_ns or max(lasts, default=None) or math.nan) / 1e9)
    return [*f.values(), util, mean, per_host, limiter, sure, scaling, lost, start, end]


def _heavy_edges(result: "Result", names: dict[str, str]) -> dict[tuple[str, str], int]:
    """Bytes (the analysis's byte mode; IP by default, as the live view counts) per pair of captured hosts, the
    pairs under a tenth of the heaviest one's left out."""
    sent: dict[tuple[str, str], int] = {}
    for flow in result.flows:
        src, dst = names.get(flow.src), names.get(flow.dst)
        if src and dst and src != dst:
            sent[(src, dst)] = sent.get((src, dst), 0) + int(flow.bytes or 0)
    heaviest = max(sent.values(), default=0)
    return {pair: b for pair, b in sorted(sent.items()) if b >= HEAVY_EDGE * heaviest}


@dataclass
class _JobPart:
    """What the families read of one job: a job of a capture that holds several, else the whole result."""

    name: str  # comm_name
    n_nodes: int
    world_size: Optional[int]
    iterations: Optional["Iterations"]
    transport: Optional["Transport"]
    scaling: Optional["WhatIf"]
    stragglers: list["Straggler"]


def _jobs(result: "Result") -> list[_JobPart]:
    """Each job of a capture that holds several, else the whole capture as one."""
    hosts = len(result.hosts)
    if result.jobs:
        return [
            _JobPart(
                j.name or f"job {i + 1}",
                len(j.hosts) if j.hosts else hosts,
                j.world_size,
                j.iterations,
                j.transport,
                j.scaling,
                j.stragglers or [],
            )
            for i, j in enumerate(result.jobs)
        ]
    return [_JobPart(JOB, hosts, None, result.iterations, result.transport, result.scaling, result.stragglers or [])]


def _job_families(
    job: _JobPart,
    its: dict[str, Family],
    mean: Family,
    per_host: Family,
    limiter: tuple[Family, Family] | list[Family],
    scaling: Family,
    lost: Family,
) -> None:
    """One job's samples into the families."""
    it = job.iterations
    name = job.name
    labels = {
        "comm_name": name,
        "n_nodes": str(job.n_nodes),
        "nranks": str(job.world_size or (it.ring_size if it is not None else None) or ""),
    }
    if it is not None and it.count:
        its["count"].add(it.count, source=it.source or "", **labels)
        its["confidence"].add(it.confidence, **labels)
        mean.add(None if not it.period_ns else it.period_ns / 1e9, **labels)
        windows = it.per_iteration or []
        if windows:
            its["last"].add((windows[-1].end_ns - windows[-1].start_ns) / 1e9, **labels)
            for host, sent in sorted((windows[-1].bytes_by_host or {}).items()):
                its["last_bytes"].add(sent, comm_name=name, node=host)
        sums: dict[str, float] = {}
        for w in windows:
            for host, sent in (w.bytes_by_host or {}).items():
                sums[host] = sums.get(host, 0.0) + sent
        for host, total in sorted(sums.items()):
            per_host.add(total / len(windows), comm_name=name, node=host)
    transport = job.transport
    if transport is not None and transport.limiter:
        limiter[0].add(1, **limiter_labels(transport.limiter, float(transport.confidence or 0.0)), **labels)
        limiter[1].add(transport.confidence, **labels)
    what = job.scaling
    if what is not None and not what.unsure:  # an unsure what-if is not a number to put on a dashboard
        scaling.add(what.measured.full_utilization_scaling_factor if what.measured is not None else None, **labels)
    for s in job.stragglers:
        lost.add(s.lost_ns_per_iteration / 1e9, comm_name=name, node=s.host, kind=s.kind)


def write_metrics(result: "Result", path: Path) -> int:
    """A finished analysis as a textfile for node_exporter's collector (text format, `.prom`); its size. Written
    beside and renamed into place, so a collector never reads half a file."""
    text = render(analysis_families(result))
    part = path.with_name(f".{path.name}.part")
    part.write_text(text)
    os.replace(part, path)
    return len(text)

"""Each job analyzed as a run of its own, and the traffic of none set aside.

analyze.collective.jobs says which flows are which job's. Where the capture is one job and nothing else, the
result is analyzed whole, as it always was. Otherwise every job gets a result of its own, cut from the whole one
(its hosts, its flows, their series and TCP counters), and the same steps run on it: the collective, the
captures that missed it, the transport (an edge whose link other traffic shared is called so), the re-sent
bytes, the what-if. The heaviest job's findings are the top level of the result; `jobs` lists them all, and
`other_traffic` holds the rest with its share of each job's links.

What the user gave for the job (--gradient-bytes, --iterations, --single-iteration-time, --world-size,
--ranks-per-host, the NCCL log) anchors the heaviest job only; the markers, which do not say their job, only a
capture of one job.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Optional

import numpy as np
import pandas as pd

from capture.layout import HostMeta
from capture.units import ns_of
from analyze.collective.inference import add_collective
from analyze.collective.jobs import split_jobs
from analyze.collective.bootstrap import find_bootstrap
from analyze.collective.proxies import add_proxies
from analyze.collective.keepalives import find_keepalives
from analyze.confidence.coverage import capture_problems
from analyze.model.findings import ImpliedBytes, Iterations, Job, OtherConnection, OtherTraffic, SharedLink
from analyze.collective.resent import leave_out_resent
from analyze.model.result import Given, Result, Tables
from analyze.whatif.attach import add_whatif
from analyze.whatif.link_fixes import hosts_to_price, price_link_fixes
from analyze.tables.flows import connection_ends
from analyze.tables.hosts import address_hosts, flow_hosts
from analyze.wire.rank_profiles import backward_spans, check_with_profiles
from analyze.wire.rdma import diagnose_rdma, rdma_transport
from analyze.wire.stragglers import add_stragglers
from analyze.wire.timeline import wire_timeline
from analyze.wire.transport import diagnose

TOP_OTHER = 20  # other connections listed by name; the rest are counted


def analyze_jobs(result: Result, metas: Mapping[str, HostMeta | None], given: Given) -> None:
    """Set the collective, transport and what-if on RESULT: whole where it is one job, else per job (module doc).
    METAS: each host's meta.json by name."""
    whole = result.tables
    if whole is None or whole.flows.empty:
        _analyze(result, metas, given, None)
        return
    result.keepalives, ras = find_keepalives(result)
    result.bootstrap, boot = find_bootstrap(result)
    if result.bootstrap is not None:
        boot = np.concatenate([boot, add_proxies(result, result.bootstrap, boot)])
    own = np.concatenate([ras, boot])
    if len(own):  # NCCL's own keep-alive ring and bootstrap are no job's traffic: the analyses run without them
        result.tables = _tables_of(whole, ~whole.flows["flow_id"].isin(own).to_numpy(), None, whole.markers)
    try:
        _by_job(result, metas, given)
    finally:
        result.tables = whole


def _by_job(result: Result, metas: Mapping[str, HostMeta | None], given: Given) -> None:
    """analyze_jobs on RESULT's tables as they stand (NCCL's keep-alives already set apart)."""
    tables = result.tables
    assert tables is not None
    fh = flow_hosts(tables.flows, address_hosts(result.hosts))
    views = tables.flow_views
    opened = views.groupby("flow_id")["opened"].any() if "opened" in views else pd.Series(dtype=bool)
    fh["opened"] = opened.reindex(fh["flow_id"]).fillna(False).to_numpy(bool)
    split = split_jobs(tables.flows, fh)
    if split.method == "whole":
        if split.note:  # jobs could not be told apart: said, not left for the reader to guess
            result.assumptions.append(split.note)
        _analyze(result, metas, given, None)
        return
    jobs = [_cut(result, split.flow_job == j, several=split.jobs > 1) for j in range(split.jobs)]
    other = split.flow_job < 0
    shares = [_shared_links(result, fh, split.flow_job == j, other, f"job {j + 1}") for j in range(split.jobs)]
    for j, job in enumerate(jobs):
        mine = given if j == 0 else Given()
        beside = {
            f"job {k + 1}": _shared_links(result, fh, split.flow_job == j, split.flow_job == k, f"job {j + 1}")
            for k in range(split.jobs)
            if k != j
        }
        _analyze(job, metas, mine, _sharers({"other traffic": shares[j], **beside}))
        result.assumptions.extend(f"job {j + 1}: {a}" for a in job.assumptions)
        result.warnings.extend(f"job {j + 1}: {w}" for w in job.warnings)
    top = jobs[0]
    result.topology, result.iterations, result.transport = top.topology, top.iterations, top.transport
    result.scaling, result.link_bound, result.capture_problems = top.scaling, top.link_bound, top.capture_problems
    result.stragglers = top.stragglers
    result.jobs = [_record(f"job {j + 1}", job) for j, job in enumerate(jobs)]
    result.other_traffic = _other(tables.flows, fh, other, [s for links in shares for s in links], split.note)


def _analyze(
    result: Result,
    metas: Mapping[str, HostMeta | None],
    given: Given,
    shared: Optional[dict[str, tuple[float, float, str]]],
) -> None:
    add_collective(result, given)
    views = result.tables.flow_views if result.tables is not None else pd.DataFrame()
    own = [metas.get(h.name) for h in result.hosts]
    result.capture_problems = capture_problems(result.hosts, own, views, result.iterations) or None
    result.transport = diagnose(result, shared)
    result.rdma = diagnose_rdma(result)
    if result.rdma is not None and result.rdma.limiter and (result.transport is None or not result.transport.edges):
        result.transport = rdma_transport(result.rdma)
    leave_out_resent(result)  # S from the unique bytes, before the what-if divides by it
    if result.iterations is not None:
        timeline = result.iterations.timeline = wire_timeline(result)
        if timeline is not None and given.profiles:
            timeline.profiled_backward_ns = [ns_of(x) for x in backward_spans(given.profiles)] or None
    fixes = add_stragglers(result)  # first: a slow link that paces the ring leaves the what-if's compute unsure
    add_whatif(result, single_iteration_time_s=given.single_iteration_time_s)
    priced = hosts_to_price(fixes)  # the per-link what-if, by the wire model from the fixed hosts' own timelines
    price_link_fixes(result, fixes, wire_timeline(result, only=priced) if priced else None)
    check_with_profiles(result, given.profiles)


def _cut(result: Result, mask: np.ndarray, several: bool) -> Result:
    """The result of one job: its flows (MASK over the flows table's rows), their views, series and TCP
    counters, the hosts they join; the markers only where the capture holds one job (they do not say theirs)."""
    t = result.tables
    assert t is not None
    flows = t.flows[mask]
    addr_host = address_hosts(result.hosts)
    ends = set(flows["src"].map(addr_host).dropna()) | set(flows["dst"].map(addr_host).dropna())
    hosts = [h for h in result.hosts if h.name in ends]
    run = dict(result.run or {})
    if several:  # one command and one launch order for the capture cannot say which job's they are
        run.pop("command", None)
        run.pop("hosts", None)
    return replace(
        result,
        hosts=hosts,
        flows=[r for r, m in zip(result.flows, mask) if m],
        warnings=[],
        assumptions=[],
        run=run or None,
        tables=_tables_of(t, mask, [h.name for h in hosts], t.markers.iloc[0:0] if several else t.markers),
    )


def _tables_of(t: Tables, mask: np.ndarray, hosts: Optional[list[str]], markers: pd.DataFrame) -> Tables:
    """The tables of the flows MASK picks (over the flows table's rows): their views, series and counters, and
    the host series of HOSTS (all where None)."""
    flows = t.flows[mask].reset_index(drop=True)
    ids = flows["flow_id"].to_numpy()

    def of_flows(frame: Optional[pd.DataFrame]) -> Optional[pd.DataFrame]:
        return None if frame is None else frame[frame["flow_id"].isin(ids)].reset_index(drop=True)

    series = t.host_series
    return replace(
        t,
        flows=flows,
        flow_views=of_flows(t.flow_views),
        flow_series=of_flows(t.flow_series),
        judged_series=of_flows(t.judged_series),
        host_series=series[series["host"].isin(hosts)] if hosts is not None and len(series) else series,
        markers=markers,
        transport=of_flows(t.transport),
        transport_samples=of_flows(t.transport_samples),
        rdma=of_flows(t.rdma),
        rdma_events=of_flows(t.rdma_events),
    )


def _formula(its: Iterations) -> str:
    """How S is implied from the job's bytes: its pattern's theory over its W ranks, or why none applies."""
    p = its.pattern
    if p is None or p.factor is None:
        return f"W = {its.ring_size} ranks; " + (p.formula if p is not None else "no bytes theory")
    return (
        f"W = {its.ring_size} ranks, each whose ring successor is on another host sending {p.factor:.4g} x S per "
        f"iteration: {p.formula}"
    )


def _record(name: str, job: Result) -> Job:
    its, topo = job.iterations, job.topology
    flows = job.tables.flows if job.tables is not None else pd.DataFrame()
    implied = None
    if its is not None and its.ring_size:
        implied = ImpliedBytes(
            bytes=its.implied_gradient_bytes,
            formula=_formula(its),
            confidence=its.implied_gradient_bytes_confidence,
        )
    sure = [topo.confidence] if topo is not None else []
    if its is not None and its.count:
        sure.append(its.confidence)
    connections = len(set(zip(*connection_ends(flows["src"], flows["sport"], flows["dst"], flows["dport"]))))
    return Job(
        name=name,
        hosts=[h.name for h in job.hosts],
        flows=len(flows),
        connections=connections,
        bytes=int(flows["bytes"].sum()) if len(flows) else 0,
        world_size=its.ring_size if its is not None else None,
        ranks_per_host=its.ranks_per_host if its is not None else None,
        ranks_source=its.ring_size_source if its is not None else None,
        topology=topo,
        pattern=its.pattern if its is not None else None,
        iterations=its,
        implied_parameter_bytes=implied,
        phases=its.phases if its is not None else None,
        transport=job.transport,
        scaling=job.scaling,
        link_bound=job.link_bound,
        stragglers=job.stragglers,
        rdma=job.rdma,
        capture_problems=job.capture_problems,
        confidence=round(min(sure), 3) if sure else 0.0,
    )


def _sharers(by: dict[str, list[SharedLink]]) -> dict[str, tuple[float, float, str]]:
    """Per sending host of a job: the share of its link that others took while the job's edges from it were busy,
    their rate (bit/s) and who, the largest first (analyze.wire.transport calls such an edge `shared`). BY: each
    sharer's links (other traffic, every other job), all measured over the same bins (those the job sent in)."""
    rows: dict[str, list[tuple[str, SharedLink]]] = {}
    for who, links in by.items():
        for link in links:
            if link.direction == "tx":
                rows.setdefault(link.host, []).append((who, link))
    out = {}
    for host, found in rows.items():
        mine = found[0][1].job_bytes
        others = sum(link.other_bytes for _, link in found)
        found.sort(key=lambda x: -x[1].other_bytes)
        who = " and ".join(f"{w} ({link.other_bytes / (mine + others):.0%})" for w, link in found)
        out[host] = (others / (mine + others), sum(link.other_rate_bps for _, link in found), who)
    return out


def _shared_links(result: Result, fh: pd.DataFrame, job: np.ndarray, other: np.ndarray, name: str) -> list[SharedLink]:
    """Per host of the job and direction: other traffic's bytes on that host's link in the bins the job used it."""
    t = result.tables
    assert t is not None
    series = t.flow_series
    fid = series["flow_id"].to_numpy(np.int64)
    size = int(max(fid.max(initial=-1), fh["flow_id"].max())) + 1
    role = np.zeros(size, np.int8)  # 1: the job's flow, 2: other traffic
    role[fh["flow_id"].to_numpy(np.int64)[job]] = 1
    role[fh["flow_id"].to_numpy(np.int64)[other]] = 2
    out = []
    bin_ns = int(result.bin_ns)
    for direction, end in (("tx", "src_host"), ("rx", "dst_host")):
        host_of = np.full(size, None, dtype=object)
        host_of[fh["flow_id"].to_numpy(np.int64)] = fh[end].to_numpy(object)
        cells = pd.DataFrame(
            {"host": host_of[fid], "role": role[fid], "t": series["t_ns"].to_numpy(np.int64), "b": series["bytes"]}
        )
        cells = cells[cells["role"] > 0]
        per = cells.groupby(["host", "t", "role"])["b"].sum().unstack("role", fill_value=0)
        if 1 not in per or 2 not in per:
            continue
        busy = per[per[1] > 0]
        for host, rows in busy.groupby(level="host"):
            job_b, other_b = int(rows[1].sum()), int(rows[2].sum())
            if other_b:
                out.append(
                    SharedLink(
                        job=name,
                        host=str(host),
                        direction=direction,
                        job_bytes=job_b,
                        other_bytes=other_b,
                        share=round(other_b / (job_b + other_b), 4),
                        other_rate_bps=other_b * 8e9 / (len(rows) * bin_ns),
                    )
                )
    return out


def _other(
    flows: pd.DataFrame, fh: pd.DataFrame, other: np.ndarray, shared: list[SharedLink], note: str
) -> OtherTraffic:
    mine = flows[other]
    ends = fh[other]
    top = mine.assign(src_host=ends["src_host"].to_numpy(), dst_host=ends["dst_host"].to_numpy()).nlargest(
        TOP_OTHER, "bytes"
    )
    return OtherTraffic(
        bytes=int(mine["bytes"].sum()),
        flows=len(mine),
        connections=[
            OtherConnection(
                str(r.src_host),
                str(r.dst_host),
                int(r.sport),
                int(r.dport),
                str(r.proto),
                int(r.bytes),
                int(r.start_ns),
                int(r.end_ns),
            )
            for r in top.itertuples()
        ],
        shared_links=sorted(shared, key=lambda s: -s.share),
        notes=[note],
    )

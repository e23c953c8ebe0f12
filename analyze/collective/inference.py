"""The collective, end to end: topology, iterations, bytes per iteration and the ring theory check.

One entry point, `add_collective`, runs after `build_result` and sets the result's `topology` and
`iterations` (analyze.model.findings). Everything here is computed from the Result's tables; the
only file it may read is the NCCL log the user named.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from analyze.collective.iterations import (
    per_ring_send,
    assign_cuts,
    host_percentiles,
    per_iteration,
    ring_theory,
    windows_from_markers,
)
from analyze.collective.nccl_log import compare_rings, read_nccl_log
from analyze.collective.ranks import RingRanks, TrafficRanks, ranks_from_connections, ring_ranks
from analyze.confidence.thresholds import CONFIDENT
from analyze.model.findings import Bootstrap, Clock, Group, IterationRecord, Iterations, Pattern, Phase, Topology
from analyze.read.bin_choice import LADDER_NS, from_traffic
from analyze.model.result import Given, Result
from analyze.collective.staircase import EdgeSeries, Staircase, infer, widened
from analyze.collective.stalls import STALL_CONFIDENCE, STALL_SHARE, stall_share
from analyze.collective.halving import cube_sends, cube_step, settled
from analyze.collective.groups import find_groups, per_iteration_bytes, ring_sends
from analyze.collective.microbatches import boundary_cells, boundary_schedule
from analyze.collective.pattern import NCCL_SHARDED, confirmed, name_pattern, nccl_sharded, pipeline_pattern
from analyze.collective.topology import PIPELINE_GROUPS, RING_KINDS, classify, host_edges, ring_pairs
from analyze.tables.hosts import address_hosts, flow_hosts
from capture import layout


def launch_order_of(run: Optional[dict[str, Any]]) -> Optional[list[str]]:
    """Host launch order from run.json (capture.layout), None when it names none."""
    return layout.RunManifest(run).launch_order or None


def _markers_gradient_bytes(markers: pd.DataFrame) -> Optional[float]:
    if "gradient_bytes" not in markers or markers["gradient_bytes"].dropna().empty:
        return None
    return float(markers["gradient_bytes"].dropna().median())


def add_collective(result: Result, given: Given = Given()) -> None:
    """Compute the topology and the iterations from the result's tables and set them on the result, the job as
    GIVEN: its gradient bytes (S) and iteration count (the one the user knows) anchor the inference without
    markers; its world size or ranks per host (W, or W per host) are checked against the connections
    (analyze.collective.ranks); its launch order and NCCL log name the ring's direction and rings."""
    launch_order, gradient_bytes, iterations = given.launch_order, given.gradient_bytes, given.iterations
    world_size, ranks_per_host = given.world_size, given.ranks_per_host
    nccl_log = Path(given.nccl_log) if given.nccl_log else None
    tables = result.tables
    addr_host = address_hosts(result.hosts)
    host_names = [h.name for h in result.hosts]
    order_given = list(launch_order) if launch_order else launch_order_of(result.run)
    flows = tables.flows if tables is not None else pd.DataFrame()
    markers = tables.markers if tables is not None else pd.DataFrame()
    inside = _inside_marked_iterations(flows, tables.flow_series if tables is not None else None, markers)
    edges = host_edges(flows, addr_host)
    topo = classify(host_edges(inside, addr_host) if inside is not None else edges, host_names, addr_host, order_given)
    if inside is not None:
        _whole_run_bytes(topo, edges)
        outside = int(flows["bytes"].sum() - inside["bytes"].sum())
        topo.notes.append(
            f"shape judged on the traffic of the marked iterations from the second on; {outside:,} bytes before "
            f"and after them (set-up, parameter broadcast, the first step's waits, teardown) left out"
        )
    elif topo.kind not in RING_KINDS:
        late = _after_setup(flows, tables.flow_series if tables is not None else None)
        again = classify(host_edges(late, addr_host), host_names, addr_host, order_given) if late is not None else None
        if late is not None and again is not None and again.kind in (*RING_KINDS, "halving_doubling"):
            _whole_run_bytes(again, edges)
            again.notes.append(
                f"shape judged on the traffic after the first {SETUP_SHARE:.0%} of the job's bytes: the whole run "
                f"reads as {topo.kind}: the set-up (DDP's parameter broadcast, Horovod's broadcast) loads other "
                f"pairs before the steps; {int(flows['bytes'].sum() - late['bytes'].sum()):,} bytes left out of the "
                f"shape (its edges keep the whole run's bytes)"
            )
            topo = again

    # one way round, or halving by steps: one collective
    found = find_groups(edges) if topo.kind not in ("ring", "halving_doubling") else None
    if found is not None:
        topo.groups = found["groups"]
        stages = sum(g.kind == "data_parallel" for g in topo.groups)
        topo.notes.append(
            f"{stages} data-parallel groups joined by pipeline links, confidence {found['confidence']:.2f}: the host "
            f"pairs' bytes drop {found['evidence']['drop_to_pipeline_links']:.3g}x from the groups' to the links', "
            f"and the links match the groups host to host"
            + ("" if topo.kind == "unknown" else f" (read as one collective: a {topo.kind.replace('_', ' ')})")
        )
        # the structure read is the groups: the headline says so, as sure as they are (it read "unknown, 0.00"
        # above groups named at 1.00)
        topo.kind, topo.confidence = PIPELINE_GROUPS, float(found["confidence"])
    log = read_nccl_log(Path(nccl_log)) if nccl_log else None
    if log is not None:
        topo.nccl = compare_rings(log, topo.order if topo.kind in RING_KINDS else [], addr_host)
        if topo.nccl.matches is False:
            topo.notes.append("the NCCL log's ring differs from the ring the packets took")
    in_ring = len(topo.order) or len({e.src for e in topo.edges})
    peers = sorted({x for e in topo.edges for x in (e.src, e.dst)} - set(host_names))  # in the shape, not captured
    traffic = _traffic_ranks(flows, addr_host, host_names, peers)
    ranks = ring_ranks(
        markers,
        log,
        in_ring,
        result.run,
        traffic=traffic,
        bootstrap=_bootstrap_of(result, topo),
        world_size=world_size,
        ranks_per_host=ranks_per_host,
    )
    most = max(list((ranks.per_host or {}).values()) + [log.ranks_per_host() if log is not None else 1, 1])
    if most > 1:
        topo.notes.append(
            f"{most} ranks per server: only the inter-server ring edges are visible "
            f"in packets; GPU-to-GPU hops inside a server are not"
        )
    result.topology = topo
    mesh = traffic is not None  # gloo's rank mesh: the framework the bytes theory depends on
    its = _iterations(result, flows, addr_host, topo, markers, gradient_bytes, ranks, iterations, found, mesh)
    result.iterations = its


def _schedules(
    groups: list[Group],
    series: pd.DataFrame,
    flows: pd.DataFrame,
    clock: Optional[Clock],
    bin_ns: int,
    count: int,
    sure: float,
) -> None:
    """Each pipeline boundary's micro-batches, in flight and schedule (analyze.collective.microbatches), as sure as
    its reading (and, one micro-batch at a time, the iterations it counts per: SURE)."""
    stages = sum(g.kind == "data_parallel" for g in groups)
    views = flows.drop_duplicates("flow_id").set_index("flow_id")["view"]
    offsets = {h.name: int(h.offset_ns or 0) for h in (clock.hosts if clock is not None else [])}
    cells = boundary_cells(series, views, offsets)
    for g in groups:
        if g.kind != "pipeline":
            continue
        links = sorted({(a, b) for a, b in g.edges if a < b})
        found = boundary_schedule(cells, links, bin_ns, count, stages)
        if found is None:
            continue
        g.micro_batches, g.in_flight, g.schedule = found.micro_batches, found.in_flight, found.kind
        g.bubble_share, g.schedule_evidence = found.bubble_share, found.evidence
        # F^k (BF)^(m-k) B^k repeats as a whole only once an iteration for k > 1; k = 1 is FB m times over, so m
        # is the iteration count's
        g.schedule_confidence = round(found.confidence if found.in_flight > 1 else min(found.confidence, sure), 3)


def _spread(world_size: int, hosts: list[str]) -> Optional[dict[str, int]]:
    """W ranks spread evenly over HOSTS (as torchrun and horovodrun place them), where W is a multiple of them: W
    given by the user with the connections not counting ranks per host (a pipeline's subgroups add to the mesh)."""
    if not hosts or world_size % len(hosts):
        return None
    return {h: world_size // len(hosts) for h in hosts}


def _bootstrap_of(result: Result, topo: Topology) -> Optional[Bootstrap]:
    """NCCL's bootstrap where its hosts are this job's shape's (another job's root counts other ranks)."""
    b = result.bootstrap
    shape = {x for e in topo.edges for x in (e.src, e.dst)}
    if b is None or not shape or {b.root_host, *b.ranks_per_host} != shape:
        return None
    return b


def _traffic_ranks(
    flows: pd.DataFrame, addr_host: dict[str, str], host_names: list[str], peers: list[str]
) -> Optional[TrafficRanks]:
    """Ranks per host as the job's connections count them (analyze.collective.ranks), over the hosts it joins
    and PEERS, the uncaptured hosts in its shape: seen from the captured side, they are ranks too."""
    if flows.empty:
        return None
    fh = flow_hosts(flows, addr_host)
    joined = set(fh["src_host"]) | set(fh["dst_host"])
    return ranks_from_connections(fh, [h for h in host_names if h in joined] + [p for p in peers if p in joined], peers)


def _whole_run_bytes(topo: Topology, edges: pd.DataFrame) -> None:
    """The shape's edges with their whole run's bytes, flows and share (EDGES: every host pair over the run), as
    the topology always reports them: only which pairs make the shape was judged inside the iterations."""
    whole = edges.set_index(["src", "dst"])
    total = float(edges["bytes"].sum())
    for e in topo.edges:
        row = whole.loc[(e.src, e.dst)]
        e.bytes, e.payload_bytes, e.flows = int(row["bytes"]), int(row["payload_bytes"]), int(row["flows"])
        e.share, e.inferred = (round(e.bytes / total, 6) if total else 0.0), bool(row["inferred"])


# Without markers the steps' start is not known before the ring is: the shape is judged again on the traffic
# after this share of the job's bytes has passed. DDP's parameter broadcast, before the first step, sends one
# step's bytes or less (24 of 248 MB on a real 8-step run); a ring's edges carry bytes all through.
SETUP_SHARE = 0.25


def _after_setup(flows: pd.DataFrame, series: Optional[pd.DataFrame]) -> Optional[pd.DataFrame]:
    """FLOWS with their bytes counted after the first SETUP_SHARE of the span of the series (None without)."""
    if series is None or not len(series) or not len(flows):
        return None
    ordered = series.sort_values("t_ns", kind="stable")
    t = ordered["t_ns"].to_numpy(np.int64)
    passed = np.cumsum(ordered["bytes"].to_numpy(np.float64))
    lo = int(t[min(int(np.searchsorted(passed, SETUP_SHARE * passed[-1])), len(t) - 1)])
    return _bytes_between(flows, series, lo, int(t[-1]) + 1)


def _bytes_between(flows: pd.DataFrame, series: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """FLOWS with their bytes counted in [lo, hi) only (payload bytes scaled by each flow's share inside), the
    flows with none left out."""
    t = series["t_ns"].to_numpy(np.int64)
    kept = series[(t >= lo) & (t < hi)]
    inside = kept.groupby("flow_id")["bytes"].sum().reindex(flows["flow_id"]).fillna(0).to_numpy(np.int64)
    total = flows["bytes"].to_numpy(np.int64)
    share = np.divide(inside, total, out=np.zeros(len(total)), where=total > 0)
    out = flows.assign(bytes=inside, payload_bytes=np.round(flows["payload_bytes"].to_numpy() * share).astype(np.int64))
    return out[out["bytes"] > 0]


def _inside_marked_iterations(
    flows: pd.DataFrame, series: Optional[pd.DataFrame], markers: pd.DataFrame
) -> Optional[pd.DataFrame]:
    """FLOWS with their bytes counted inside the marked iterations only (None without markers or series).

    Why: a job's set-up is not its shape. DDP broadcasts the parameters from rank 0 to every rank before the
    first step, a star as heavy as a step of the ring; with two ranks per host the mesh it adds to the ring was
    classified "mesh" and no bytes theory applied. The markers say when the steps ran, so the shape is judged
    on the traffic from the second step's start to the last step's end: ranks enter the first step at different
    times, and the ones that enter it first wait there for the others' broadcast (a tree over the hosts, seen
    inside step 0 on a real 8-rank run). Payload bytes are scaled by each flow's share of its bytes inside."""
    if not len(markers) or series is None or not len(series) or not len(flows):
        return None
    windows = windows_from_markers(markers)
    lo = int(windows["start_ns"].iloc[1 if len(windows) > 1 else 0])
    return _bytes_between(flows, series, lo, int(windows["end_ns"].max()))


def _iterations(
    result: Result,
    flows: pd.DataFrame,
    addr_host: dict[str, str],
    topo: Topology,
    markers: pd.DataFrame,
    gradient_bytes: Optional[float],
    ranks: RingRanks,
    count_given: Optional[int] = None,
    found: Optional[dict[str, Any]] = None,
    mesh: bool = True,
) -> Iterations:
    """The `iterations` key: windows (markers or inferred), per-iteration bytes and the theory check. FOUND: the
    job's data-parallel groups and pipeline links (analyze.collective.groups), whose theory replaces the ring's.
    MESH: gloo's rank mesh is in the connections (the framework, which the bytes theory depends on)."""
    bin_ns = int(result.bin_ns)
    out = Iterations()
    fs = result.tables.flow_series if result.tables is not None else pd.DataFrame()
    if flows.empty or fs is None or fs.empty:
        out.notes.append("no traffic to cut into iterations")
        return out
    series = _with_hosts(fs, flow_hosts(flows, addr_host))
    pairs = ring_pairs(topo)
    n = ranks.world_size
    cut = _windows(out, result, flows, addr_host, topo, markers, series, pairs, gradient_bytes, n, count_given, mesh)
    if cut is None:
        return out
    windows, cell_iteration = cut
    nodes = sorted({e.src for e in topo.edges} | {e.dst for e in topo.edges}) or sorted(set(series["src_host"]))
    keep = (series["src_host"].isin(nodes) | series["dst_host"].isin(nodes)).to_numpy()
    if not keep.all():  # a copy of every cell, mostly for nothing: a ring's cells are all its nodes'
        series = series[keep]
        cell_iteration = cell_iteration[keep] if cell_iteration is not None else None
    per_it = _per_iteration_bytes(out, series, windows, pairs, topo, markers, nodes, cell_iteration, bin_ns)
    known, source = (gradient_bytes, "option") if gradient_bytes else (_markers_gradient_bytes(markers), "markers")
    out.gradient_bytes, out.gradient_bytes_source = known, source if known else None
    out.ring_sends_per_host, out.ranks_per_host = ranks.sends, ranks.per_host
    out.ring_size_source, out.ring_size_sure = ranks.source, ranks.sure
    if found is not None and topo.groups:
        pattern = _groups_pattern(out, result, flows, addr_host, topo, series, per_it, ranks, found)
    else:
        pattern = name_pattern(topo.kind, topo.order, per_it, n, mesh)
    out.pattern = _theory(out, result, pattern, topo, per_it, nodes, ranks, known, mesh)
    return out


def _windows(
    out: Iterations,
    result: Result,
    flows: pd.DataFrame,
    addr_host: dict[str, str],
    topo: Topology,
    markers: pd.DataFrame,
    series: pd.DataFrame,
    pairs: list[tuple[str, str]],
    gradient_bytes: Optional[float],
    n: int,
    count_given: Optional[int],
    mesh: bool,
) -> Optional[tuple[pd.DataFrame, Optional[np.ndarray]]]:
    """The iterations' windows, from the ranks' markers or else from the staircase in the collective's bytes, and
    each series cell's iteration where the staircase assigned one; None (with a note in OUT) where there are none."""
    bin_ns = int(result.bin_ns)
    cell_iteration = None
    if len(markers):
        windows = windows_from_markers(markers)
        out.source, out.method, out.confidence, out.confident = "markers", "markers", 1.0, True
        if count_given and count_given != len(windows):
            out.notes.append(
                f"DISAGREEMENT: --iterations {count_given} was given, but the markers hold "
                f"{len(windows)} iterations; the markers are used"
            )
    elif pairs:
        hint = _bytes_hint(gradient_bytes, n, topo.kind, result.byte_mode, mesh)
        edges = _edge_series(result.tables, flows, addr_host, pairs)
        step = cube_step(topo.order) if topo.kind == "halving_doubling" else None
        stairs = infer(edges, bin_ns, count_given, hint, step)
        if count_given or hint:
            stairs = _check_anchors(stairs, infer(edges, bin_ns, step=step), count_given, gradient_bytes, hint)
        if not count_given:

            def doubt(reading: Staircase) -> Staircase:
                return _checked_for_stalls(reading, result, flows, addr_host)

            stairs = _checked_at_double_bin(doubt(stairs), edges, bin_ns, hint, step, doubt)
        out.notes.extend(stairs.notes)
        if stairs.count < 1:
            out.notes.append("no repeating iterations found in the collective's traffic")
            return None
        windows, cell_iteration = _stair_windows(stairs, series, flows)
        out.source, out.method, out.evidence = "inferred", "bytes_staircase", stairs.evidence
        out.confidence, out.confident = stairs.confidence, stairs.confidence >= CONFIDENT
        out.period_bytes_per_edge, out.clock = round(stairs.period_bytes, 1), stairs.edges[0].view
    else:
        out.notes.append("no collective traffic to cut into iterations")
        return None
    return windows, cell_iteration


def _per_iteration_bytes(
    out: Iterations,
    series: pd.DataFrame,
    windows: pd.DataFrame,
    pairs: list[tuple[str, str]],
    topo: Topology,
    markers: pd.DataFrame,
    nodes: list[str],
    cell_iteration: Optional[np.ndarray],
    bin_ns: int,
) -> list[IterationRecord]:
    """Each iteration's bytes per host and edge (analyze.collective.iterations.per_iteration), with the count, the
    period, each host's percentiles, the communication time and rate, and the set-up and teardown phases, in OUT."""
    grouped = [(e[0], e[1]) for g in topo.groups or [] for e in g.edges]
    on_edges = pairs + [e for e in grouped if e not in pairs]
    per_it = per_iteration(series, windows, on_edges, bin_ns, markers, nodes, cell_iteration)
    starts = windows["start_ns"].to_numpy(np.int64)
    out.phases = _phases(series, int(starts.min()), int(windows["end_ns"].max()), bin_ns)
    out.count, out.period_ns, out.per_iteration = len(per_it), steady_period(starts), per_it
    out.bytes_per_iteration_per_host = host_percentiles([it.bytes_by_host for it in per_it], nodes)
    out.rx_bytes_per_iteration_per_host = host_percentiles([it.rx_bytes_by_host for it in per_it], nodes)
    comm = np.array([it.comm_ns for it in per_it if it.comm_ns > 0], dtype=np.float64)
    rates = np.array([it.rate_bps for it in per_it if it.comm_ns > 0], dtype=np.float64)
    out.comm_ns_median = float(np.median(comm)) if len(comm) else None
    out.rate_bps_median = float(np.median(rates)) if len(rates) else None
    return per_it


def _groups_pattern(
    out: Iterations,
    result: Result,
    flows: pd.DataFrame,
    addr_host: dict[str, str],
    topo: Topology,
    series: pd.DataFrame,
    per_it: list[IterationRecord],
    ranks: RingRanks,
    found: dict[str, Any],
) -> Pattern:
    """A job of data-parallel groups joined by pipeline links: each group's bytes per iteration and S_g, each
    boundary's micro-batch schedule (into TOPO's groups), and the pipeline's pattern."""
    bin_ns = int(result.bin_ns)
    groups = topo.groups or []
    # as sure as the groups and the iterations it divides by (S_g also as the ranks W_g counts)
    sure = min(found["confidence"], out.confidence)
    per_host = ranks.per_host or _spread(ranks.world_size, sorted({h for g in groups for h in g.hosts}))
    sends = ring_sends(flow_hosts(flows, addr_host), groups)
    per_iteration_bytes(groups, per_it, per_host, sure, ranks.sure and per_host is not None, sends)
    # the bin chosen from the traffic fits the ring's bursts, not a boundary's micro-batches: between merging
    # them all (10 ms: unread or unsure) and resolving them (a fine --bin), it split some and merged others
    # (GPipe, 4 micro-batches, read as 3 at 0.83 in CI); it reads at the old default unless --bin is given
    wide = max(bin_ns, LADDER_NS[-1]) if from_traffic(result.bin_choice) else bin_ns
    _schedules(groups, series, flows, result.clock, wide, len(per_it), out.confidence)
    return pipeline_pattern(found["confidence"], found["evidence"])


def _theory(
    out: Iterations,
    result: Result,
    pattern: Pattern,
    topo: Topology,
    per_it: list[IterationRecord],
    nodes: list[str],
    ranks: RingRanks,
    known: Optional[float],
    mesh: bool,
) -> Pattern:
    """The bytes theory of PATTERN against each host's bytes per iteration: S implied, the measured/theory ratio
    where S is KNOWN; returns the pattern settled by it (halving and doubling, NCCL's sharded all-gathers)."""
    n = ranks.world_size
    if pattern.factor:
        if topo.kind == "halving_doubling":  # what each host sends over its cube's pairs, not the swaps after
            per_send = cube_sends(per_it, topo.order)
        else:
            per_send = per_ring_send([it.bytes_by_host for it in per_it], nodes, ranks.sends)
        theory = ring_theory(per_send, n, known, pattern.factor)
        pattern = confirmed(pattern, theory.theory_ratio if known else None)
        doubled = settled(pattern, theory.theory_ratio if known else None, n)
        if doubled.factor != pattern.factor:  # an all-reduce by halving and doubling: its own theory, read again
            theory = ring_theory(per_send, n, known, doubled.factor)
        pattern = doubled
        sharded = nccl_sharded(pattern, theory.theory_ratio if known else None, mesh, n)
        if sharded is not pattern:  # NCCL's FSDP: its own theory, read again
            pattern, theory = sharded, ring_theory(per_send, n, known, sharded.factor)
        theory.into(out)
        # S implied by the bytes per iteration is as sure as the iterations it divides by and the pattern it reads
        sure = min(out.confidence, pattern.confidence) if ranks.sure and ranks.placed else min(out.confidence, 0.5)
        out.implied_gradient_bytes_confidence = sure if theory.implied_gradient_bytes else None
        out.notes.append(
            f"theory: {pattern.formula}; over N={n} ranks {pattern.factor:.4g} x S per host per iteration"
            + (f", per rank whose ring successor is on another host ({ranks.source})" if ranks.sends else "")
        )
        if ranks.note:
            out.notes.append(ranks.note)
        if known and theory.theory_ratio is not None:
            out.notes.append(
                f"measured/theory = {theory.theory_ratio:.4f} ({result.byte_mode} bytes; "
                f"headers above the gradient payload count in ip and wire modes)"
            )
    else:
        ring_theory(None, n, None).into(out)
        out.notes.append(f"S unsure: {pattern.formula}")
    return pattern


def _phases(series: pd.DataFrame, first_ns: int, last_ns: int, bin_ns: int) -> list[Phase]:
    """The job's bytes between its hosts before its first iteration (set-up: rendezvous, the parameter
    broadcast) and after its last (teardown), with when: reported apart, never part of an iteration or the shape."""
    t = series["t_ns"].to_numpy(np.int64)
    nbytes = series["bytes"].to_numpy(np.int64)
    out = []
    for name, sel in (("set-up", t < first_ns), ("teardown", t >= last_ns)):
        if sel.any():
            lo, hi = int(t[sel].min()), int(t[sel].max()) + bin_ns
            out.append(Phase(name=name, start_ns=lo, end_ns=hi, bytes=int(nbytes[sel].sum())))
    return out


def steady_period(starts: np.ndarray) -> Optional[float]:
    """The mean step from the second iteration's start on, as the slope of a least-squares line through the
    starts. Not from the first start: iteration 0 carries the warm-up, and without markers its start is not
    on the wire at all (its forward pass sends nothing). The slope weighs every start, where last minus first
    over the count rests on two: one boundary a lossy link's retransmission timeout put early moved that by
    3 % over 10 iterations. Not a median of steps: bin-rounded steps are off by up to a bin each."""
    s = starts[1:] if len(starts) >= 3 else starts
    if len(s) < 2:
        return None
    k = np.arange(len(s), dtype=np.float64)
    return float(np.polyfit(k, (s - s[0]).astype(np.float64), 1)[0])


def _bytes_hint(
    gradient_bytes: Optional[float], n: int, kind: str, byte_mode: str, mesh: bool = True
) -> Optional[tuple[float, float]]:
    """Bytes per ring edge per iteration that --gradient-bytes S allows: 2(N-1)/N x S plus headers (ip and
    wire modes: up to ~5 % on a 1500-byte MTU without segmentation offload) and what a lossy link re-sends; without
    gloo's mesh up to NCCL's FSDP, 3(N-1)/N x S one way round (analyze.collective.pattern.nccl_sharded)."""
    if not gradient_bytes or kind not in RING_KINDS or n < 2:
        return None
    theory = 2 * (n - 1) / n * gradient_bytes
    most = (1.15 if byte_mode == "payload" else 1.25) * theory
    return 0.98 * theory, most * (NCCL_SHARDED if kind == "ring" and not mesh else 1.0)


# A count the staircase reads differently, and as surely, at twice the bin is as likely the one as the other:
# ddp-lossy-rto's 200 ms retransmission timeouts read as 14 steps at 2 ms bins and as 28, both sure, at 4 ms.
COUNT_DISAGREES = 0.5
# The count is checked at twice the bin on this many edges at most, spread evenly over the edges by bytes (byte
# classes keep their shares): every ring edge carries the same steps, and tracking all 512 of a 512-host ring a
# second time took 0.9 s of its analysis. Where the wider reading is to stand, it is read again from every edge.
CHECK_EDGES = 64
WIDEN = 3  # doublings of the bin an unsure count is read again at, in turn (8x: 1 ms bins up to 8 ms)


def _checked_at_double_bin(
    stairs: Staircase,
    edges: list[EdgeSeries],
    bin_ns: int,
    hint: Optional[tuple[float, float]],
    step: Any,
    doubt: Callable[[Staircase], Staircase],
    widen: int = WIDEN,
) -> Staircase:
    """STAIRS, unsure where the same edges binned twice as wide surely count other iterations (issue 45: no judgment
    may change when the bin is doubled); where they count the same and only the wider bins are sure, their
    reading: a fast ring's steps inside an iteration show as pauses at the finer bins and blur the period (gloo
    on 4 hosts, 6 steps: sure at 2 ms, 0.00 at 1 ms, where a longer period could not be ruled out). Where both
    are unsure, up to WIDEN times wider bins are asked in turn the same way. DOUBT: what else makes a reading
    unsure (its cuts at retransmission stalls), asked of every wider reading too."""
    some = edges
    if step is None and len(edges) > CHECK_EDGES:
        some = sorted(edges, key=lambda e: float(e.nbytes.sum()))[:: -(-len(edges) // CHECK_EDGES)]
    other = doubt(infer(widened(some, 2 * bin_ns), 2 * bin_ns, None, hint, step))
    if len(some) < len(edges) and other.count == stairs.count and stairs.confidence < CONFIDENT <= other.confidence:
        other = doubt(infer(widened(edges, 2 * bin_ns), 2 * bin_ns, None, hint, step))
    if other.count == stairs.count:
        if stairs.confidence < CONFIDENT <= other.confidence:
            note = f"read at {2 * bin_ns / 1e6:g} ms bins, where the count is sure; at {bin_ns / 1e6:g} ms the same"
            return replace(other, notes=[*other.notes, note + f" count read {stairs.confidence:.2f}"])
        return stairs
    if other.confidence < CONFIDENT and stairs.confidence < CONFIDENT and widen > 1:
        # both unsure: bins still finer than the sends' spacing (ddp-100mbit at 1-3 ms read 1,841-3,683 at 0.00,
        # 8 sure from 4 ms up); twice as wide again, from the same CHECK_EDGES, and a sure wider reading read
        # again from every edge before it stands (a 512-host ring unsure at every width read all its edges at
        # each: 2.2 of its 11 s)
        wide = _checked_at_double_bin(other, widened(some, 2 * bin_ns), 2 * bin_ns, hint, step, doubt, widen - 1)
        if wide.confidence < CONFIDENT:
            return stairs
        if len(some) < len(edges):
            width = wide.edges[0].bin_ns
            whole = doubt(infer(widened(edges, width), width, None, hint, step))
            if whole.count != wide.count or whole.confidence < CONFIDENT:
                return stairs
            wide = replace(whole, notes=[*whole.notes, f"read at {width / 1e6:g} ms bins, where the count is sure"])
        return replace(wide, notes=[*wide.notes, f"at {bin_ns / 1e6:g} ms {stairs.count} at {stairs.confidence:.2f}"])
    if other.confidence < CONFIDENT:
        return stairs  # an unsure reading at twice the bin contradicts nothing
    if stairs.confidence < CONFIDENT:
        # unsure here, sure of another count at twice the bin: bins finer than the sends' own spacing cut every
        # step into pieces (ddp-100mbit: 64 kB segments 5 ms apart at 100 Mbit/s read 11 at 0.07 in 5 ms bins, 8
        # sure at 10 and 20 ms, as its ranks recorded). The wider reading stands where it also holds at twice its
        # own bin, read from every edge; else the finer one, unsure, as it was
        if len(some) < len(edges):
            other = doubt(infer(widened(edges, 2 * bin_ns), 2 * bin_ns, None, hint, step))
        if other.confidence < CONFIDENT:
            return stairs
        wide = _checked_at_double_bin(other, widened(edges, 2 * bin_ns), 2 * bin_ns, hint, step, doubt, 1)
        if wide.confidence < CONFIDENT:
            return stairs
        note = f"read at {2 * bin_ns / 1e6:g} ms bins, where the count is sure and holds at twice that"
        return replace(
            wide, notes=[*wide.notes, f"{note}; at {bin_ns / 1e6:g} ms {stairs.count} at {stairs.confidence:.2f}"]
        )
    note = (
        f"UNSURE: at {2 * bin_ns / 1e6:g} ms bins the same traffic reads as {other.count} iterations, not "
        f"{stairs.count}; a count that moves with the bin is not sure (markers settle it)"
    )
    return replace(
        stairs,
        confidence=min(stairs.confidence, COUNT_DISAGREES),
        evidence={**stairs.evidence, "count_at_double_bin": float(other.count)},
        notes=[*stairs.notes, note],
    )


def _checked_for_stalls(stairs: Staircase, result: Result, flows: pd.DataFrame, addr_host: dict[str, str]) -> Staircase:
    """STAIRS, unsure where its cuts end in retransmissions as often as a lossy link's stalls would
    (analyze.collective.stalls)."""
    samples = result.tables.transport_samples if result.tables is not None else None
    if stairs.confidence < CONFIDENT or samples is None or not len(samples):
        return stairs  # nothing stated as fact to doubt, or no re-sent segment to doubt it by
    share = stall_share(stairs, samples, flow_hosts(flows, addr_host), int(result.bin_ns))
    if share < STALL_SHARE:
        return stairs
    note = (
        f"UNSURE: {share:.0%} of the cuts (median edge) end where the edge sends a lost segment again: pauses a "
        "retransmission timeout made look like the pauses between steps (a finer --bin, or markers, tells)"
    )
    return replace(
        stairs,
        confidence=min(stairs.confidence, STALL_CONFIDENCE),
        evidence={**stairs.evidence, "cuts_ending_in_a_resend": round(share, 3)},
        notes=[*stairs.notes, note],
    )


def _check_anchors(
    anchored: Staircase,
    free: Staircase,
    count_given: Optional[int],
    gradient_bytes: Optional[float],
    hint: Optional[tuple[float, float]],
) -> Staircase:
    """What the user said, checked against the traffic. An anchor the traffic confirms makes the answer sure
    (the search bounded by it found it, with equal bytes per step); one it contradicts is reported, and the
    traffic's own answer is kept, unsure. One the traffic agrees with never makes it less sure: the bounded
    search's checks may read worse than the free one's at the same count (a pipeline at 1 ms bins, 0.77 alone
    and 0.53 with its count given)."""
    notes = []
    if count_given:
        if anchored.count == count_given:
            notes.append(f"--iterations {count_given}: the traffic shows {count_given} repeating steps")
        else:
            notes.append(
                f"DISAGREEMENT: --iterations {count_given} was given, but the traffic shows no "
                f"{count_given} steps of equal bytes"
            )
    if hint and gradient_bytes:
        if anchored.count and hint[0] * 0.98 <= anchored.period_bytes <= hint[1] * 1.02:
            notes.append(
                f"--gradient-bytes {gradient_bytes:,.0f}: the bytes per ring edge per iteration "
                f"({anchored.period_bytes:,.0f}) fit the bytes theory's multiple of S plus headers"
            )
        else:
            notes.append(
                f"DISAGREEMENT: --gradient-bytes {gradient_bytes:,.0f} implies {hint[0] / 0.98:,.0f} B per "
                f"ring edge per iteration, but no such step repeats in the traffic"
            )
    if (
        free.count
        and free.count != anchored.count
        and (free.confidence >= CONFIDENT or free.confidence > anchored.confidence)
    ):
        notes.append(
            f"DISAGREEMENT: without the anchors the traffic shows {free.count} iterations "
            f"(confidence {free.confidence:.2f})"
        )
    if any(n.startswith("DISAGREEMENT") for n in notes):
        out = free if free.count else anchored
        out.confidence = min(out.confidence, 0.5)
        out.notes.append("the count shown is the traffic's own, unsure while it disagrees with what was given")
    else:  # the traffic's own reading of the same count, where it is surer, stands: an anchor never lowers it
        out = free if free.count == anchored.count and free.confidence > anchored.confidence else anchored
        if _confirmed(anchored.evidence, anchored.count):
            out.confidence = max(out.confidence, 0.95)
    out.notes.extend(notes)
    return out


def _confirmed(ev: dict[str, float], count: int) -> bool:
    """Whether steps found inside the anchors' bounds pass every check but the count's and the bin width's, which
    the anchor stands in for: equal bytes, teeth on pauses, little left over, no other period as good. Equal bytes
    alone prove nothing of one step (the gradient bytes of eight ranks on two hosts' traffic of four: one step
    of two iterations' bytes, none of its teeth on a pause)."""
    return (
        count >= 2
        and ev.get("bytes_spread", 1.0) <= 0.02
        and ev.get("teeth_on_pauses", 0.0) >= 0.9
        and ev.get("left_over", 1.0) <= 0.4
        and ev.get("edges_agreeing", 0.0) >= 0.9
        and ev.get("sub_multiple_ambiguity", 1.0) <= 0.2
        and not ev.get("longer_period_untested", 0.0)
    )


def _edge_series(
    tables: Any, flows: pd.DataFrame, addr_host: dict[str, str], pairs: list[tuple[str, str]]
) -> list[EdgeSeries]:
    """Each collective edge's bytes per bin from the flows' chosen views (the sender's capture where there is
    one), on the clock of the host that captured them (the edge's most common view). Cells are grouped by
    integer codes in one sort, not a frame per edge: that cost grows with the hosts."""
    fh = flow_hosts(flows, addr_host)
    names = pd.Index(sorted(set(fh["src_host"]) | set(fh["dst_host"]) | set(fh["view"])))
    size = int(fh["flow_id"].max()) + 1 if len(fh) else 0
    code = {}
    for col in ("src_host", "dst_host", "view"):
        by_flow = np.full(size, -1, dtype=np.int64)
        by_flow[fh["flow_id"].to_numpy(np.int64)] = names.get_indexer(fh[col])
        code[col] = by_flow
    fs = tables.flow_series
    fid = fs["flow_id"].to_numpy(np.int64)
    n = len(names)
    pair_of = {int(names.get_loc(a)) * n + int(names.get_loc(b)): (a, b) for a, b in pairs}
    pair = code["src_host"][fid] * n + code["dst_host"][fid]
    keep = np.isin(pair, list(pair_of))
    pair, view = pair[keep], code["view"][fid][keep]
    t, nbytes = fs["t_ns"].to_numpy(np.int64)[keep], fs["bytes"].to_numpy(np.float64)[keep]
    # grouped by edge and view only: np.unique below puts each group's times in order (a third sort key, the
    # time, cost a lexsort of every cell: 0.2 s of 9 M cells at 512 hosts)
    order = np.argsort(pair * (n + 1) + view, kind="stable")
    pair, view, t, nbytes = pair[order], view[order], t[order], nbytes[order]
    if not len(pair):  # the edges' flows left no series cell (every packet dated outside the capture's span)
        return []
    cuts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1], True])
    out = []
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        main = int(np.bincount(view[lo:hi]).argmax())
        mine = slice(lo, hi)
        sel = view[mine] == main
        times, inv = np.unique(t[mine][sel], return_inverse=True)
        src, dst = pair_of[int(pair[lo])]
        out.append(EdgeSeries(src, dst, str(names[main]), times, np.bincount(inv, weights=nbytes[mine][sel])))
    order_of = {pr: i for i, pr in enumerate(pairs)}
    return sorted(out, key=lambda e: order_of[(e.src, e.dst)])


def _stair_windows(stairs: Staircase, series: pd.DataFrame, flows: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The iteration windows on the first edge's clock, and every cell's iteration: a cell of a collective
    edge cut at that edge's own teeth, any other cell at the teeth of an edge its capturing host holds (the
    same clock: hosts' clocks differ by milliseconds on real clusters), else at the first edge's. Cells are
    grouped by integer codes (series' host categoricals, views by flow id), one sort for all of them."""
    ref = stairs.edges[0].cut_ns
    windows = pd.DataFrame({"iteration": np.arange(len(ref) - 1), "start_ns": ref[:-1], "end_ns": ref[1:]})
    names = series["src_host"].cat.categories  # _with_hosts gives both ends the same sorted categories
    n = len(names)
    fid = series["flow_id"].to_numpy(np.int64)
    by_flow = np.full(int(max(fid.max(initial=-1), flows["flow_id"].max()) + 1), -1, dtype=np.int64)
    by_flow[flows["flow_id"].to_numpy(np.int64)] = names.get_indexer(flows["view"])
    view = by_flow[fid]
    cuts_of: dict[int, np.ndarray] = {}  # group key -> teeth: a view's own (key < 0), an edge in a view
    for e in reversed(stairs.edges):  # the first edge a host holds wins for its other cells
        v = int(names.get_loc(e.view)) if e.view in names else -2
        cuts_of[-2 - v] = e.cut_ns
        cuts_of[(names.get_loc(e.src) * n + names.get_loc(e.dst)) * (n + 1) + v + 1] = e.cut_ns
    # the key (source * n + destination) * (n + 1) + view + 1, built in place: every temporary is a copy of the
    # cells (23 MB at 512 hosts), and this held nine of them at the analysis's peak
    own = series["src_host"].cat.codes.to_numpy(np.int64) * n
    own += series["dst_host"].cat.codes.to_numpy()
    own *= n + 1
    own += view
    own += 1
    known = np.array(sorted(cuts_of), dtype=np.int64)  # looked up by binary search: np.isin sorted 1 M cells
    at = np.searchsorted(known, own)
    np.minimum(at, len(known) - 1, out=at)
    hit = known[at] == own
    del at
    view = -2 - view
    key = np.where(hit, own, view)
    del own, view, hit
    order = np.argsort(key, kind="stable")
    key = key[order]
    bounds = np.flatnonzero(np.r_[True, key[1:] != key[:-1], True])
    t = series["t_ns"].to_numpy(np.int64)
    it = np.full(len(t), -1, dtype=np.int64)
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        rows = order[lo:hi]
        it[rows] = assign_cuts(t[rows], cuts_of.get(int(key[lo]), ref))
    return windows, it


def _with_hosts(fs: pd.DataFrame, fh: pd.DataFrame) -> pd.DataFrame:
    """flow_series cells of the flows in `fh` between two hosts, with their src_host and dst_host as categoricals
    over the sorted host names: a join by flow id (an array lookup), and the later factorizing, comparing and
    isin on a million cells work on integer codes instead of strings (a merge on strings: ~20 ms per 100k). The
    cells are copied only when some are left out (each copy: 100 MB at 512 hosts)."""
    names = pd.Index(sorted(set(fh["src_host"]) | set(fh["dst_host"])))
    fid = fs["flow_id"].to_numpy(np.int64)
    ids = fh["flow_id"].to_numpy(np.int64)
    size = int(max(fid.max(initial=-1), ids.max(initial=-1))) + 1
    codes = {}
    for end in ("src_host", "dst_host"):
        by_flow = np.full(size, -1, dtype=np.int64)
        by_flow[ids] = names.get_indexer(fh[end])
        codes[end] = by_flow[fid]
    keep = (codes["src_host"] >= 0) & (codes["src_host"] != codes["dst_host"])
    out = fs.copy(deep=False) if keep.all() else fs[keep].reset_index(drop=True)
    for end, c in codes.items():
        out[end] = pd.Categorical.from_codes(c[keep], categories=names)
    return out


__all__ = ["add_collective", "launch_order_of"]

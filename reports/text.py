"""Everything ringscope prints on a terminal: the analysis summary, its topology, iterations and what-if
lines, and `ringscope whatif`'s tables. Rendering only: each function takes the typed Result (or one of its
findings) and returns text, so the summary, the report and the JSON are three views of one result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import fields

from analyze.collective.topology import PIPELINE_GROUPS, RING_KINDS
from analyze.confidence.doubt import headline
from analyze.confidence.thresholds import CONFIDENT
from analyze.model.findings import (
    KeepAlives,
    Clock,
    Group,
    HostClock,
    Iterations,
    Job,
    LinkBound,
    LinkFix,
    OtherTraffic,
    Rdma,
    ScalingPoint,
    Socket,
    Straggler,
    Topology,
    Transport,
    WhatIf,
)
from analyze.model.result import HostSummary, Result
from analyze.tables.capture_holes import GAPPED, incomplete_lines
from analyze.whatif.link_fixes import interval_words
from capture.units import format_rate

PATTERN_NAMES = {
    "ring_allreduce": "ring all-reduce",
    "sharded_data_parallel": "sharded data parallel",
    "sharded_grad_op": "sharded data parallel, parameters gathered once a step",
    "pipeline": "pipeline stages with a data-parallel group each",
    "reduce_scatter": "reduce-scatter by recursive halving",
    "halving_doubling_allreduce": "all-reduce by halving and doubling",
}
GROUPS_SHOWN = 8  # a pipeline job's groups in the summary, at most (all in the JSON and the report)
HOSTS_SHOWN = 16  # hosts listed one per line; beyond, the extremes and the distribution
EXTREMES = 5  # hosts shown at each end of a longer table
NAMES_SHOWN = 6  # host names listed for a note that repeats for many
CLOCKS_SHOWN = 8  # hosts' clocks listed by name; beyond, the range and the furthest
STRAGGLERS_SHOWN = 8  # stragglers listed, the costliest first (all in the JSON)
TIED = 0.02  # link fixes whose savings differ by under this share name the same slow edge
NOTABLE_SAVING = 0.05  # a single link's fix saving under this share of the iteration is not worth a line of its own


def summary_text(result: Result) -> str:
    """The human summary: captures, hosts with utilization, top flows, warnings."""
    lines = []
    packets = sum(c.packets for c in result.captures)
    lines.append(
        f"{len(result.captures)} capture file(s), {packets:,} packets, {len(result.hosts)} host(s), "
        f"{len(result.flows):,} flow(s); bytes counted as {result.byte_mode}, bins of {result.bin_ns / 1e6:g} ms"
        + (f" ({result.bin_choice})" if result.bin_choice else "")
    )
    for problem in result.capture_problems or []:
        lines.append(f"CAPTURE PROBLEM: {problem}")
    held = {c.host: c.coverage for c in result.captures if c.coverage is not None}
    start = min((c.first_ns for c in result.captures if c.packets), default=0)
    lines.extend(f"CAPTURE INCOMPLETE: {line}" for line in incomplete_lines(list(held), list(held.values()), start))
    lines.append("")
    lines.extend(host_lines(result.hosts, {host: c.fraction for host, c in held.items()}))
    lines.append("")
    lines.append("top flows (by bytes):")
    for f in result.flows[:10]:
        ends = f"{f.src} -> {f.dst} qp {f.qp:#x}" if f.qp is not None else f"{f.src}:{f.sport} -> {f.dst}:{f.dport}"
        lines.append(
            f"  {ends} {f.proto:<5} {f.bytes:>15,} B "
            f"{format_rate(f.mean_bps):>14}  retrans {f.retransmitted_bytes:,} B  (view: {f.view}"
            + ("" if f.held is None else f", which holds {f.held:.0%} of it: every capture of it has holes")
            + ")"
        )
    if len(result.flows) > 10:
        lines.append(f"  ... and {len(result.flows) - 10:,} more")
    hosts = {h.name: h.addresses for h in result.hosts}
    if result.clock is not None:
        lines.extend(clock_lines(result.clock, hosts))
    if result.jobs:
        for job in result.jobs:
            lines.extend(job_lines(job, len(result.jobs)))
        if result.other_traffic is not None:
            lines.extend(other_lines(result.other_traffic))
    else:
        lines.extend(_findings_lines(result))
    if result.keepalives is not None:
        firsts = [h.first_ns for h in result.hosts if h.first_ns]
        lines.extend(keepalive_lines(result.keepalives, min(firsts) if firsts else 0))
    if result.bootstrap is not None:
        lines += ["", *(f"NCCL bootstrap: {note}" for note in result.bootstrap.notes)]
    lines += [f"assumed: {a}" for a in said_once(result.assumptions, hosts)]
    lines += [f"warning: {w}" for w in said_once(result.warnings, hosts)]
    return "\n".join(lines)


def _findings_lines(of: Result | Job) -> list[str]:
    """A job's (or a one-job capture's) topology, iterations, what-if, transport and stragglers."""
    lines = []
    if of.topology is not None:
        lines.extend(collective_lines(of.topology, of.iterations))
    if of.scaling is not None:
        lines.extend(scaling_lines(of.scaling))
    if of.link_bound is not None:
        lines.extend(bound_lines(of.link_bound))
    if of.transport is not None:
        lines.extend(transport_lines(of.transport))
    if of.rdma is not None:
        lines.extend(rdma_lines(of.rdma))
    if of.stragglers is not None:
        sure = of.iterations is not None and (of.iterations.source == "markers" or of.iterations.confident)
        fixes = of.scaling.per_edge if of.scaling is not None else of.link_bound.per_edge if of.link_bound else None
        lines.extend(straggler_lines(of.stragglers, fixes, sure))
    return lines


def straggler_lines(found: list[Straggler], fixes: list[LinkFix] | None, sure: bool = True) -> list[str]:
    """Who holds the ring back, one line each (or that no one does), then the per-link what-if's best fix. Not
    SURE (the iterations were inferred unsure): an empty list is no finding either."""
    lines = [""]
    if not found and not sure:
        lines.append("stragglers: none found, UNSURE: they are read per iteration, and the iterations are unsure")
    elif not found:
        lines.append("stragglers: none (no host enters the collective late, no link runs well under the others' pace)")
    ranked = sorted(found, key=lambda s: -s.lost_ns_per_iteration)
    for s in ranked[:STRAGGLERS_SHOWN]:
        rank = f" (rank {s.rank})" if s.rank is not None else ""
        doubt = "" if s.confidence >= CONFIDENT else ": UNSURE"
        lines.append(
            f"straggler: {s.host}{rank}, {s.kind}: {s.lost_ns_per_iteration / 1e6:.0f} ms lost per iteration in "
            f"{s.iterations_affected} iterations (confidence {s.confidence:.2f}{doubt})"
        )
        lines.extend(f"  {e}" for e in s.evidence)
    if len(ranked) > STRAGGLERS_SHOWN:
        lines.append(f"  ... and {len(ranked) - STRAGGLERS_SHOWN} more stragglers (all in the JSON: stragglers)")
    if fixes:
        best = fixes[0]
        # both ends of one slow edge save alike: either link's fix speeds that edge up
        tied = [f for f in fixes if f.saving_ns >= best.saving_ns * (1 - TIED)]
        rest = fixes[len(tied) :]
        if best.saving_share >= NOTABLE_SAVING:
            other = max((f.saving_share for f in rest), default=0.0)
            names = " or ".join(f"{f.host}'s" for f in tied[:2]) + (" (or ...)" if len(tied) > 2 else "")
            usual = (
                f" (at the others' {best.usual_bps / 1e6:,.0f} Mbit/s: {best.saving_ns_if_usual / 1e6:.0f} ms)"
                if best.saving_ns_if_usual is not None and best.usual_bps
                else ""
            )
            lines.append(
                f"per-link what-if: {names} link at line rate saves {best.saving_ns / 1e6:.0f} ms per "
                f"iteration ({best.saving_share:.0%}{interval_words(best)}){usual}; no other single link saves more "
                f"than {other:.0%}"
            )
            lines.append(f"  {_fix_pricing(best)}")
        else:
            lines.append(f"per-link what-if: no single link saves {NOTABLE_SAVING:.0%} of the iteration")
    return lines


def _fix_pricing(fix: LinkFix) -> str:
    """How the per-link what-if priced FIX, in words."""
    if fix.priced_by == "wire model" and fix.ring_speedup:
        return (
            f"priced by the what-if's wire model: {fix.host}'s own iterations replayed with the ring's slowest edge "
            f"{fix.ring_speedup:.3g}x as fast (no faster than line rate)"
        )
    return "priced by the edges' own needs per iteration (the wire model could not replay this host)"


def job_lines(job: Job, of: int) -> list[str]:
    """One job's block: a head line (hosts, ranks, bytes, how sure), then its topology, iterations, what-if and
    transport as a capture of one job shows them."""
    hosts = ", ".join(job.hosts[:NAMES_SHOWN]) + (
        f" and {len(job.hosts) - NAMES_SHOWN} more" if len(job.hosts) > NAMES_SHOWN else ""
    )
    kind = PATTERN_NAMES.get(job.pattern.kind, "") if job.pattern is not None else ""
    ranks = f" over {job.world_size} ranks" if job.world_size else ""
    head = [
        "",
        f"== {job.name} of {of}: {kind + ranks + ', ' if kind else ''}{len(job.hosts)} host(s) ({hosts}), "
        f"{job.connections:,} connection(s), {job.bytes:,} B (confidence {job.confidence:.2f})",
    ]
    for problem in job.capture_problems or []:
        head.append(f"CAPTURE PROBLEM: {problem}")
    return head + _findings_lines(job)


def keepalive_lines(ka: KeepAlives, t0_ns: int) -> list[str]:
    """NCCL's RAS keep-alives: how many, and each silence (a hung or dead process), longest first."""
    lines = [
        "",
        f"NCCL keep-alives (RAS): {ka.connections} connection(s) among {len(ka.hosts)} host(s), "
        f"{ka.messages:,} message(s); set apart from the collective",
    ]
    for s in sorted(ka.silences, key=lambda s: -s.seconds)[:EXTREMES]:
        lines.append(
            f"  SILENT: {s.host} sent no keep-alive for {s.seconds:g} s from {(s.start_ns - t0_ns) / 1e9:.1f} s "
            f"into the capture{' to its end' if s.until_end else ''} ({', '.join(s.peers)} waiting): {s.meaning}; "
            "a hung or dead process there"
        )
    if len(ka.silences) > EXTREMES:
        lines.append(f"  ... and {len(ka.silences) - EXTREMES:,} more silences")
    if not ka.silences:
        lines.append("  every host kept talking: no process hung or died while captured")
    return lines


def other_lines(other: OtherTraffic) -> list[str]:
    """Traffic of no job: its bytes, the heaviest flows, and the job links it shared."""
    lines = ["", f"== other traffic (set aside from every job): {other.flows:,} flow(s), {other.bytes:,} B"]
    for c in other.connections[:5]:
        lines.append(f"  {c.src}:{c.sport} -> {c.dst}:{c.dport} {c.proto:<5} {c.bytes:>15,} B")
    if len(other.connections) > 5 or other.flows > len(other.connections):
        lines.append(f"  ... and {other.flows - min(5, len(other.connections)):,} more flow(s)")
    for link in other.shared_links[:EXTREMES]:
        lines.append(
            f"  shares {link.host} {link.direction} with {link.job}: {link.share:.0%} of the bytes while "
            f"{link.job} used it ({link.other_rate_bps / 1e6:,.0f} Mbit/s)"
        )
    if len(other.shared_links) > EXTREMES:
        lines.append(f"  ... and {len(other.shared_links) - EXTREMES} more shared link(s)")
    return lines


def _host_row(h: HostSummary, held: Mapping[str, float]) -> str:
    """One host's row; a host whose capture is incomplete says so at its end: its own figures are short."""
    u = h.tx_utilization
    link = format_rate(h.link_speed_bps) + ("*" if h.link_speed_source == "assumed" else "")
    short = held.get(h.name, 1.0)
    return (
        f"{h.name[:20]:<20} {link:>12} {h.tx_bytes:>15,} {h.rx_bytes:>15,}  "
        f"{u.mean:>8.1%} {u.busy_fraction:>7.1%} {u.while_busy:>8.1%} {u.p99:>7.1%}"
        + (f"  capture {short:.0%}: short" if short < 1 - GAPPED else "")
    )


def host_lines(hosts: Sequence[HostSummary], held: Mapping[str, float] | None = None) -> list[str]:
    """The host table: every host up to HOSTS_SHOWN; beyond, the EXTREMES hosts that sent the most and the least
    (a straggler or a host that missed the job is at one end), then the distribution over all of them, so 500
    hosts take a screen, not 500 lines. HELD: each host's capture coverage, where known."""
    held = held or {}
    head = f"{'host':<20} {'link':>12} {'tx bytes':>15} {'rx bytes':>15}  {'tx util mean/busy/while-busy/p99':>34}"
    if len(hosts) <= HOSTS_SHOWN:
        return [head, *(_host_row(h, held) for h in hosts)]
    ranked = sorted(hosts, key=lambda h: (-h.tx_bytes, h.name))
    lines = [head, *(_host_row(h, held) for h in ranked[:EXTREMES])]
    lines.append(f"{'...':<20} {len(hosts) - 2 * EXTREMES:,} more hosts between these")
    lines += [_host_row(h, held) for h in ranked[-EXTREMES:]]
    tx = [float(h.tx_bytes) for h in hosts]
    busy = [h.tx_utilization.while_busy for h in hosts if not math.isnan(h.tx_utilization.while_busy)]
    spread = f"tx bytes min {min(tx):,.0f} / median {_median(tx):,.0f} / max {max(tx):,.0f}"
    if busy:
        spread += (
            f"; tx util while busy p5 {_quantile(busy, 0.05):.1%} / median {_median(busy):.1%} / "
            f"p95 {_quantile(busy, 0.95):.1%}"
        )
    return [*lines, f"all {len(hosts):,} hosts: {spread}"]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def said_once(notes: Sequence[str], hosts: dict[str, list[str]]) -> list[str]:
    """Notes that repeat for host after host ("h7: link speed unknown; ...", "h7: own address inferred from
    traffic as 10.0.0.7 ...") said once, with how many hosts and which; any other note as it was written. What
    may differ between the repeats is each host's own name and addresses."""
    groups: dict[str, list[tuple[str, str]]] = {}  # the note with its host's name and addresses masked
    for note in notes:
        host, sep, rest = note.partition(": ")
        if sep and host in hosts:
            for address in hosts[host]:
                rest = rest.replace(address, "its address")
            groups.setdefault(rest, []).append((host, note))
        else:
            groups.setdefault(note, []).append(("", note))
    out = []
    for text, members in groups.items():
        names = [host for host, _ in members if host]
        if len(names) < 2:
            out += [note for _, note in members]
            continue
        shown = ", ".join(names[:NAMES_SHOWN])
        if len(names) > NAMES_SHOWN:
            shown += f", ... ({len(names) - NAMES_SHOWN:,} more)"
        out.append(f"{len(names):,} hosts ({shown}): {text}")
    return out


def clock_lines(clock: Clock, hosts: dict[str, list[str]]) -> list[str]:
    """The hosts' clocks against the reference, as the packets show them: every host up to CLOCKS_SHOWN, else
    the range of the offsets and the hosts furthest off (one line either way), then the notes."""
    known = [h for h in clock.hosts if h.name != clock.reference and h.offset_ns is not None]

    def one(h: HostClock) -> str:
        drift = f" {h.drift_ppm:+.1f} ppm" if h.drift_ppm is not None else ""
        return f"{h.name} {(h.offset_ns or 0) / 1e6:+.3f} ms{drift} (±{(h.uncertainty_ns or 0) / 1e3:.0f} µs)"

    if len(known) <= CLOCKS_SHOWN:
        text = "; ".join(one(h) for h in known) or "none"
    else:
        offsets = [(h.offset_ns or 0) / 1e6 for h in known]
        furthest = sorted(known, key=lambda h: -abs(h.offset_ns or 0))[:3]
        text = (
            f"{len(known):,} hosts, offsets {min(offsets):+.3f} to {max(offsets):+.3f} ms (median "
            f"{_median(offsets):+.3f} ms); furthest: " + "; ".join(one(h) for h in furthest)
        )
    lines = ["", f"clocks from the packets, against {clock.reference}: {text}"]
    return lines + [f"  {note}" for note in said_once(clock.notes, hosts)]


def socket_text(sockets: list[Socket]) -> str:
    """An edge's data sockets in a few words, where it runs over several (NCCL's socket transport): how many, and
    which lag (the edge waits for them); "" for an edge of one data connection (beside control or mesh ones)."""
    data = [s for s in sockets if s.data]
    if len(data) < 2:
        return ""
    slow = [f":{s.sport} -> :{s.dport} at {s.rate_while_busy or 0:.0%} of line rate" for s in data if s.lags]
    return f"{len(data)} data sockets" + (f", lagging {', '.join(slow)}" if slow else ", none lags")


def sending_rate(in_bursts: float | None, in_bins: float | None) -> str:
    """An edge's rate while sending in words: its bursts' (packet times, the same at any bin) and its busy bins'."""
    bursts = f"{in_bursts:.0%} of line rate in bursts" if in_bursts is not None else "bursts not timed"
    bins = f"{in_bins:.0%} over its busy bins" if in_bins is not None else "no busy bin"
    return f"{bursts}, {bins}"


def rdma_lines(rdma: Rdma) -> list[str]:
    """RDMA queue pairs folded into edges: per judged edge its limiter, QPs, loss and congestion in one line."""
    lines = ["", f"rdma: {len(rdma.qps):,} queue pair(s) in {len(rdma.edges):,} edge(s)"]
    for e in rdma.edges[:12]:
        if e.limiter is None:
            continue
        rtt = f"{e.ack_rtt_median_ns / 1e3:.3g} us" if e.ack_rtt_median_ns is not None else "-"
        lines.append(
            f"  {e.src} -> {e.dst}: {e.limiter} ({e.confidence:.2f}); {len(e.qps)} QP(s), "
            f"{sending_rate(e.burst_rate, e.rate_while_busy)}, {e.resent_fraction:.2%} re-sent, {e.naks} NAK(s), "
            f"{e.timeouts} timeout(s), {e.cnps} CNP(s), "
            f"{e.ce_fraction:.2%} CE, ACK rtt median {rtt}"
        )
    return lines + [f"  note: {n}" for n in rdma.notes]


def transport_lines(transport: Transport) -> list[str]:
    """Why the links are not full: the job's limiter with its evidence, then one line per judged edge."""
    limiter = transport.limiter
    if limiter is None:
        return ["", "transport: not judged"] + [f"  note: {n}" for n in transport.notes]
    sure = "" if transport.confidence >= 0.5 else ": UNSURE"
    lines = ["", f"transport limiter: {limiter} (confidence {transport.confidence:.2f}{sure})"]
    lines += [f"  {e}" for e in transport.evidence]
    for e in transport.edges[:12]:
        if e.limiter is None:
            continue
        rtt = f"{e.rtt_median_ns / 1e6:.3g} ms" if e.rtt_median_ns is not None else "-"
        window = f"{e.window_full_fraction:.0%}" if e.window_full_fraction is not None else "?"
        lines.append(
            f"  {e.src} -> {e.dst}: {e.limiter} ({e.confidence:.2f}); {sending_rate(e.burst_rate, e.rate_while_busy)}, "
            f"{e.retransmitted_fraction:.2%} re-sent, window full {window}, rtt median {rtt}"
            + (f"; {socket_text(e.sockets)}" if socket_text(e.sockets) else "")
        )
    return lines + [f"  note: {n}" for n in transport.notes]


def topology_name(t: Topology) -> str:
    """The shape in words: a pipeline job's groups counted (2 data-parallel groups joined by a pipeline
    boundary), else the kind as the JSON writes it."""
    if t.kind != PIPELINE_GROUPS:
        return t.kind
    stages = sum(g.kind == "data_parallel" for g in t.groups or [])
    links = sum(g.kind == "pipeline" for g in t.groups or [])
    return f"{stages} data-parallel groups joined by {links} pipeline {'boundary' if links == 1 else 'boundaries'}"


def collective_lines(t: Topology, it: Iterations | None) -> list[str]:
    """The summary's topology and iterations section (a few human lines)."""
    lines = ["", f"topology: {topology_name(t)} (confidence {t.confidence:.2f})"]
    if t.order:
        arrow = " -> " if t.kind == "ring" else " <-> " if t.kind == "bidirectional_ring" else ", "
        lines.append(
            "  "
            + arrow.join(t.order[:12])
            + (" ..." if len(t.order) > 12 else "")
            + (arrow + t.order[0] if t.kind in RING_KINDS else "")
        )
    if t.matches_launch_order is not None:
        lines.append(
            f"  launch order: {'matches' if t.matches_launch_order else 'DOES NOT match'}"
            + (f" ({t.direction.replace('_', ' ')})" if t.direction else "")
        )
    if t.nccl is not None and t.nccl.matches is not None:
        lines.append(f"  NCCL log ring: {'agrees' if t.nccl.matches else 'DIFFERS'}")
    lines.extend(f"  note: {n}" for n in t.notes)
    if it is not None and it.count:
        b, rx = it.bytes_per_iteration_per_host, it.rx_bytes_per_iteration_per_host
        how = it.source if it.method == it.source else f"{it.source}: {it.method}"
        sure = it.source == "markers" or it.confidence >= CONFIDENT
        lines.append(
            f"iterations: {it.count} ({how}, confidence {it.confidence:.2f}"
            + ("" if sure else ": UNSURE, a guess")
            + ")"
            + (f", every {it.period_ns / 1e6:.4g} ms" if it.period_ns else "")
        )
        lines.append(
            f"  bytes per iteration per host (tx): median {b.median:,.0f}, p5 {b.p5:,.0f}, "
            f"p95 {b.p95:,.0f}; rx median {rx.median:,.0f}"
        )
        if it.comm_ns_median and it.rate_bps_median is not None:
            lines.append(
                f"  communication {it.comm_ns_median / 1e6:.4g} ms per iteration at "
                f"{it.rate_bps_median / 1e9:.3g} Gbit/s per host"
            )
        lines.extend(f"  note: {n}" for n in it.notes if n.startswith("DISAGREEMENT"))
        if it.phases:
            lines.append(
                "  outside the iterations: "
                + "; ".join(f"{p.name} {p.bytes:,} B over {(p.end_ns - p.start_ns) / 1e9:.3g} s" for p in it.phases)
            )
        if it.ring_size and it.ring_size_source:
            per = sorted(set((it.ranks_per_host or {}).values()))
            lines.append(
                f"  ranks: W = {it.ring_size}"
                + (f", {per[0]} per host" if len(per) == 1 else f", {per[0]}-{per[-1]} per host" if per else "")
                + f" ({it.ring_size_source})"
                + ("" if it.ring_size_sure is not False else ": UNSURE")
            )
        if it.pattern is not None:
            doubt = "" if it.pattern.confidence >= CONFIDENT else f": UNSURE ({it.pattern.confidence:.2f})"
            lines.append(f"  pattern: {it.pattern.formula}{doubt}")
        lines.extend(group_lines(t.groups or []))
        if it.implied_gradient_bytes:
            s_sure = it.implied_gradient_bytes_confidence
            lines.append(
                f"  implied gradient S = {it.implied_gradient_bytes:,.0f} B "
                f"(~{it.implied_params_fp32:,.0f} fp32 / {it.implied_params_fp16:,.0f} fp16 params)"
                + (f"; measured/theory {it.theory_ratio:.4f}" if it.theory_ratio else "")
                + (f": UNSURE ({s_sure:.2f})" if s_sure is not None and s_sure < CONFIDENT else "")
            )
    return lines


def group_lines(groups: list[Group]) -> list[str]:
    """A pipeline job's groups, one line each (GROUPS_SHOWN at most): a data-parallel group's hosts and its stage's
    S_g, a boundary's host pairs, its bytes per link per direction and its schedule, UNSURE below CONFIDENT."""
    lines = []
    for g in groups[:GROUPS_SHOWN]:
        per = g.implied_bytes
        doubt = "" if (g.confidence or 0.0) >= CONFIDENT else f": UNSURE ({g.confidence or 0.0:.2f})"
        if g.kind == "data_parallel":
            text = f"data-parallel group {', '.join(g.hosts[:6])}{' ...' if len(g.hosts) > 6 else ''}"
            text += f": stage gradients S_g = {per:,.0f} B{doubt}" if per else ""
        else:
            pairs = sorted({" <-> ".join(sorted(e)) for e in g.edges})
            text = f"pipeline boundary {', '.join(pairs[:4])}{' ...' if len(pairs) > 4 else ''}"
            text += f": {per:,.0f} B per link each way per iteration{doubt}" if per else ""
            text += schedule_text(g)
        lines.append(f"  {text}")
    if len(groups) > GROUPS_SHOWN:
        lines.append(f"  ... and {len(groups) - GROUPS_SHOWN} more groups (all in the JSON: topology.groups)")
    return lines


SCHEDULE_NAMES = {
    "one_at_a_time": "one micro-batch at a time through the stages",
    "gpipe": "GPipe: every forward, then every backward",
    "1f1b": "1F1B",
}


def schedule_text(g: Group) -> str:
    """A boundary's micro-batches and schedule, with the model's bubble ('' where not read)."""
    if not g.micro_batches or not g.schedule:
        return ""
    sure = g.schedule_confidence or 0.0
    doubt = "" if sure >= CONFIDENT else f", UNSURE ({sure:.2f})"
    return (
        f"; {g.micro_batches} micro-batches per iteration, {g.in_flight} in flight "
        f"({SCHEDULE_NAMES.get(g.schedule, g.schedule)}): bubble {g.bubble_share or 0.0:.0%} of the step in the "
        f"model (stages of equal time){doubt}"
    )


def scaling_lines(scaling: WhatIf) -> list[str]:
    """The summary's what-if: one line of numbers, then the verdict's first sentences (1–3 lines). When its
    inputs are unsure the first line says so, the numbers are marked as resting on them, the replay and what the
    wire read follow, no conclusion is printed, and the last line names what would make it sure."""
    m = scaling.measured
    numbers = [f"T {scaling.single_iteration_time_ns / 1e6:.4g} ms"]
    if m is not None:
        for value, label in (
            (m.full_utilization_scaling_factor, "scaling factor with the link fully used"),
            (m.scaling_factor_at_measured_efficiency, "at the measured efficiency"),
            (m.measured_scaling_factor, "measured"),
        ):
            if value is not None:
                numbers.append(f"{label} {value:.3f}")
    unsure = scaling.unsure
    if unsure:
        return [
            "",
            f"what-if ({scaling.model} model): {headline(unsure)}",
            "  no conclusion: these numbers rest on that guess: " + ", ".join(numbers),
            *_wire_lines(scaling),  # the replay is shown whatever else is unsure (issue 44)
            "  to make it sure, give one of: " + "; ".join(unsure.would_make_sure),
        ]
    # the verdict's first sentence repeats the numbers above; then one line per sentence, at most three
    sentences = [s.strip().rstrip(".") + "." for s in (scaling.verdict or "").split(". ") if s.strip()]
    return [
        "",
        f"what-if ({scaling.model} model): " + ", ".join(numbers),
        *_wire_lines(scaling),
        *(f"  {s}" for s in (sentences[1:4] if len(sentences) > 1 else sentences)),
    ]


def _wire_lines(scaling: WhatIf) -> list[str]:
    """What the wire model read and whether it reproduces the measured iteration (the summary's second and third
    what-if lines)."""
    fit, r = scaling.wire, scaling.replay
    out = []
    if r is not None:
        out.append(
            f"  replay of the measured iteration: {r.modelled_iteration_ns / 1e6:.4g} ms against "
            f"{r.measured_iteration_ns / 1e6:.4g} ms (error {r.error:+.1%})"
            + (": it does not reproduce the job, do not act on the numbers below" if r.flagged else "")
        )
    if fit is not None:
        ms = 1e-6
        chained = fit.readiness == "chained"
        end = "the window takes" if chained else "backward ends"
        out.append(
            f"  from the wire: link idle {fit.idle_ns * ms:.4g} ms, communicating {fit.window_ns * ms:.4g} ms at "
            f"{fit.efficiency:.0%} of line rate, {end} {fit.backward_end_ns * ms:.4g} ms"
            f"{' with an infinitely fast link' if chained else ' in'} "
            f"({fit.backward_end_ns_low * ms:.4g}-{fit.backward_end_ns_high * ms:.4g}"
            + (
                f", from {fit.backward_profiled_steps} rank-steps of the ranks' profiles)"
                if fit.backward_profiled_steps
                else ")"
            )
            + (
                f"; the busy link hid {'the compute under it' if chained else 'when buckets were ready'}: "
                "predictions are ranges"
                if fit.hidden
                else ""
            )
        )
    return out


def bound_lines(bound: LinkBound) -> list[str]:
    """The summary's link-bound what-if (a sharded or pipeline job): the bounds, the busiest links, the speeds to
    buy; while unsure, the numbers marked as resting on the guess and what would make them sure."""
    low, high = bound.scaling_factor
    t_lo, t_hi = bound.compute_ns
    t = f"T {t_lo / 1e6:.4g} ms" if t_lo == t_hi else f"T {t_lo / 1e6:.4g}–{t_hi / 1e6:.4g} ms"
    numbers = f"{t}, scaling factor at line rate {low:.3f} (no overlap) to {high:.3f} (full overlap)"
    links = "  busiest links per iteration: " + ", ".join(
        f"{x.host} {x.bytes_per_iteration / 1e6:.3g} MB = {x.line_rate_ns / 1e6:.3g} ms at "
        f"{format_rate(x.link_speed_bps)}"
        for x in bound.links[:3]
    )
    if bound.unsure:
        return [
            "",
            f"what-if (link bounds): {headline(bound.unsure)}",
            "  no conclusion: these numbers rest on that guess: " + numbers,
            links,
            "  to make it sure, give one of: " + "; ".join(bound.unsure.would_make_sure),
        ]
    buy = "; ".join(
        f"{b.target}: {format_rate(b.full_overlap_bps)} (full overlap) to {format_rate(b.no_overlap_bps)} (none)"
        for b in bound.buy
    )
    return [
        "",
        "what-if (link bounds): " + numbers,
        "  model: " + bound.formula,
        links,
        f"  link speed for scaling factor {buy}",
    ]


def _replay_lines(result: WhatIf) -> list[str]:
    """The replay error, printed before the counterfactuals it vouches for; nothing when there is no replay.

    A flagged replay says plainly that the what-if is not to be trusted yet, and what usually makes a profile
    miss its job: a profile of another model, batch or device, a wrong T, or another bucket rule or precision.
    """
    from analyze.whatif.calculation import REPLAY_TOLERANCE

    r = result.replay
    if not r:
        return []
    m = result.measured
    link = m.link_speed_bps if m is not None else None
    eff = m.transport_efficiency if m is not None else None
    rate = format_rate(r.bandwidth_bps)
    at = (
        f"{rate}: {format_rate(link)} at the measured {eff:.0%} efficiency"
        if eff and link is not None
        else f"{rate}, no efficiency measured"
    )
    lines = [
        f"replay of the measured run (N = {r.workers}, {at}): the model gives "
        f"{r.modelled_iteration_ns / 1e6:.4g} ms per iteration against {r.measured_iteration_ns / 1e6:.4g} ms "
        f"measured (error {r.error:+.1%})"
    ]
    if result.wire is not None:
        lines.append(
            "  T and the overlap were read from the wire (the link's idle time, each window's sends), so this "
            "checks the replay of the capture's own iterations; a faster or slower link moves only the sends."
        )
    elif not r.single_iteration_time_given:
        lines.append(
            "  T was solved from the measured period so that the replay reproduces it; give "
            "--single-iteration-time to check the whole iteration."
        )
    if r.flagged and result.wire is not None:
        lines.append(
            f"  The replay misses the measured iteration by more than {REPLAY_TOLERANCE:.0%}: the iterations it "
            f"sampled differ from the median one (a stall, a changing pace); the what-if below should not be "
            f"trusted until a capture of steadier iterations reproduces it."
        )
    elif r.flagged:
        grad = m.gradient_bytes if m is not None else None
        lines.append(
            f"  The replay misses the measured iteration by more than {REPLAY_TOLERANCE:.0%}: the what-if below "
            f"does not reproduce the measured job and should not be trusted until it does. Check that the profile "
            f"was recorded with this job's model, batch size and device "
            f"({result.profile['gradient_bytes'] / 1e6:.1f} MB "
            f"of gradients"
            + (f" against {grad / 1e6:.1f} MB implied by the capture" if grad else "")
            + f", backward {result.profile['backward_ns'] / 1e6:.4g} ms), that T is this job's single-GPU "
            f"iteration time, and that the bucket rule (--buckets) and precision (--fp16) are the job's."
        )
    return lines


def render_whatif(result: WhatIf) -> str:
    """Plain-text summary for the terminal."""
    source = (
        f"{result.profile['gradient_bytes'] / 1e6:.1f} MB of gradients in {result.profile['tensors']} tensors"
        if result.wire is None
        else f"read from {result.wire.iterations} sampled host-iterations of the capture"
    )
    lines = [
        f"what-if ({result.model} model): T = {result.single_iteration_time_ns / 1e6:.2f} ms single-GPU iteration, "
        f"{'the window at an infinitely fast link' if _chained(result) else 'backward'} "
        f"{result.profile['backward_ns'] / 1e6:.2f} ms, {source}",
        *(
            [headline(result.unsure) + " (the verdict at the end says what would make it sure)"]
            if result.unsure
            else []
        ),
        *_replay_lines(result),
        "",
        f"{'workers':>7}  {'bandwidth':>12}  {'compr.':>6}  {'overhead':>10}  {'scaling':>7}  iteration",
    ]
    for p in result.points:
        lines.append(
            f"{p.workers:>7}  {format_rate(p.bandwidth_bps):>12}  {p.compression:>6g}  "
            f"{p.overhead_ns / 1e6:>7.3f} ms  {p.scaling_factor:>7.4f}  {_iteration_cell(p)}"
        )
    lines += [
        "",
        "compression needed for scaling factor "
        + " / ".join(f"{x:g}" for x in sorted({r.target for r in result.needed_compression})),
    ]
    by_key: dict[tuple[int, float], list[str]] = {}
    for r in result.needed_compression:
        c = r.compression
        by_key.setdefault((r.workers, r.bandwidth_bps), []).append("—" if c is None or c != c else f"{c:.3g}×")
    for (n, b), cells in by_key.items():
        lines.append(f"{n:>7}  {format_rate(b):>12}  " + "  ".join(f"{c:>8}" for c in cells))
    lines += [
        "",
        f"communication hides behind {'the compute' if _chained(result) else 'backward'} from: "
        + ", ".join(f"N={h.workers}: {_rate_or_infinite(h.bandwidth_bps)}" for h in result.hide_bandwidth),
    ]
    if result.measured:
        m = result.measured
        shown = {f.name: getattr(m, f.name) for f in fields(m) if getattr(m, f.name) is not None}
        lines += [
            "",
            "measured: " + ", ".join(_measured_item(k, v) for k, v in shown.items()),
        ]
    lines += ["", "assumed: " + "; ".join(result.assumptions), "", result.verdict]
    return "\n".join(lines)


def _measured_item(key: str, value: object) -> str:
    """'iteration_time=106.4 ms', 'transport_efficiency=0.8985': a duration (ns in the result) in ms, a float to
    four places, anything else as it is."""
    if key.endswith("_ns") and isinstance(value, int):
        return f"{key.removesuffix('_ns')}={value / 1e6:.4g} ms"
    return f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"


def _iteration_cell(p: ScalingPoint) -> str:
    """'146 ms (135-162)': the predicted iteration and the interval the capture cannot narrow, where it has one."""
    if p.iteration_ns is None:
        return ""
    cell = f"{p.iteration_ns / 1e6:.4g} ms"
    lo, hi = p.iteration_ns_low, p.iteration_ns_high
    if lo is not None and hi is not None and hi - lo > 1e-3 * p.iteration_ns:
        cell += f" ({lo / 1e6:.4g}-{hi / 1e6:.4g})"
    return cell


def _rate_or_infinite(bps: float | None) -> str:
    """A rate; None is one JSON could not hold (it has no infinity): never reached, '∞' as format_rate writes it."""
    return format_rate(math.inf if bps is None else bps)


__all__ = ["summary_text", "collective_lines", "scaling_lines", "bound_lines", "transport_lines", "render_whatif"]


def _chained(result: WhatIf) -> bool:
    """A sharded or pipeline job's what-if: the wire model with chained readiness (its compute waits on its
    communication, which overlaps all of it, not only backward)."""
    return result.wire is not None and result.wire.readiness == "chained"

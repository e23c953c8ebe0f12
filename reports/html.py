"""The self-contained HTML report: one file, plotly embedded, opens offline.

`render_html(result)` takes the analyzer's Result. With its tables (an analysis of captures) the time series
are drawn; a Result read back from its JSON form (`Result.from_json`, for `ringscope report RESULT.json`) has
everything but the time series, and those sections say so. It never reads captures and never judges: the
verdict is the result's own (analyze.verdict). Sections, in order: Verdict, Run, Ring topology, Link
utilization, Flows, Iterations, What-if, Transport.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from analyze import __version__
from analyze.confidence.thresholds import CONFIDENT
from analyze.model.findings import Group, Iterations, Job, LinkBound, LinkFix, OtherTraffic, Topology, Transport, WhatIf
from analyze.model.result import SCHEMA_VERSION, CaptureSummary, HostSummary, Result, Tables
from capture.layout import RunManifest
from analyze.tables.capture_holes import GAPPED, when_missing
from analyze.verdict import judge
from reports import figures as F
from reports import host_spread
from reports.key_numbers import duration, key_numbers, num, pct, rate, size
from reports.page import e, figure_block, page
from reports.ring_diagram import LABELLED, mismatched_edges, ring_svg
from reports.text import schedule_text, socket_text, topology_name

FLOW_TABLE_ROWS = 500
TABLE_ROWS = 256  # rows of a per-host or per-edge table; 4,096 rows of each of three took 5 s to open
SHIFTS_LISTED = 8  # hosts whose clock shifts the utilization note lists one by one
RING_NAMED = 16  # hosts the ring order names one by one
T = TypeVar("T")
CAPTURE_TABLE_ROWS = 200
SECTIONS = [
    ("verdict", "Verdict"),
    ("run", "Run"),
    ("topology", "Ring topology"),
    ("utilization", "Link utilization"),
    ("flows", "Flows"),
    ("iterations", "Iterations"),
    ("whatif", "What-if"),
    ("transport", "Transport"),
    ("stragglers", "Stragglers"),
]


def render_html(
    result: Result, *, title: str | None = None, max_points: int = F.MAX_POINTS, detail: Sequence[str] = ()
) -> str:
    """The report as one HTML string. Beyond a few dozen hosts the figures draw the hosts' spread and a few hosts
    in full (reports.host_spread): DETAIL names them (unknown names are the caller's to refuse)."""
    run = RunManifest(result.run)
    hosts = result.hosts
    shown = host_spread.detail_hosts(hosts, result.stragglers or [], detail) if host_spread.many(hosts) else None
    title = title or (f"ringscope report — {run.run_id}" if run.run_id else "ringscope report")
    body = [
        _section("verdict", "Verdict", _verdict_html(result)),
        _section("run", "Run", _run_html(result, run)),
        _section("topology", "Ring topology", _topology_html(result.topology)),
        _section("utilization", "Link utilization over time", _utilization_html(result, max_points, shown)),
        _section("flows", "Per-flow throughput", _flows_html(result, max_points)),
        _section("iterations", "Iterations", _iterations_html(result.iterations, hosts, shown)),
        _section("whatif", "What-if: the network at full utilization", _whatif_html(result.scaling, result.link_bound)),
        _section("transport", "Transport: why the links are not full", _transport_html(result)),
        _section("stragglers", "Who holds the ring back", _stragglers_html(result)),
    ]
    if result.jobs:
        body.insert(2, _section("jobs", "Jobs and other traffic", _jobs_html(result.jobs, result.other_traffic)))
        for i, job in enumerate(result.jobs[1:], 2):
            body.append(_job_section(job, i, hosts))
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sub = (
        f"{len(hosts)} host(s), {len(result.captures)} capture file(s); ringscope "
        f"{__version__}, result schema {SCHEMA_VERSION}; generated {now}"
    )
    sections = SECTIONS if not result.jobs else [*SECTIONS[:2], ("jobs", "Jobs"), *SECTIONS[2:]]
    sections += [(f"job-{i}", j.name) for i, j in enumerate(result.jobs or [], 1) if i > 1]
    return page(title, sub, sections, "".join(body))


def write_html(result: Result, path: Path, *, title: str | None = None, detail: Sequence[str] = ()) -> int:
    """Write the report; returns its size in bytes."""
    text = render_html(result, title=title, detail=detail).encode("utf-8")
    Path(path).write_bytes(text)
    return len(text)


def _section(anchor: str, heading: str, inner: str) -> str:
    return f'<section id="{anchor}"><h2>{e(heading)}</h2>{inner}</section>'


def _both_ends(items: list[T], key: Callable[[T], float], what: str, by: str) -> tuple[list[T], str]:
    """ITEMS as a table shows them: all where they fit in TABLE_ROWS, else the half with the highest KEY and the
    half with the lowest (the outliers both ways, the highest first), and a note saying so."""
    if len(items) <= TABLE_ROWS:
        return items, ""
    ranked = sorted(items, key=key, reverse=True)
    half = TABLE_ROWS // 2
    note = (
        f'<p class="note">Showing the {half} {what} with the most {by} and the {half} with the least, of '
        f"{len(items):,}; every one is in the result JSON (`ringscope analyze --json`).</p>"
    )
    return ranked[:half] + ranked[-half:], note


def _placeholder(text: str, key: str) -> str:
    return f'<p class="placeholder" data-missing="{e(key)}">{e(text)}</p>'


def _shown(value: float | None) -> float | None:
    """A value as the result's JSON writes it: a NaN or infinite float is null there."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _in(ns: int | None, unit_ns: float) -> float | None:
    """A duration of the result (ns) in the table's unit, to four places; None where it was not measured."""
    return None if ns is None else round(ns / unit_ns, 4)


# ---- verdict ----------------------------------------------------------------------------------------


def _verdict_html(result: Result) -> str:
    v = result.verdict or judge(result)
    cards = "".join(
        f'<div class="number" data-key="{e(n.key)}"><div class="label">{e(n.label)}</div>'
        f'<div class="value{" long" if len(n.value) > 9 else ""}">{e(n.value)}</div><div class="detail">{e(n.detail)}</div></div>'
        for n in key_numbers(result)
    )
    return (
        f'<p class="verdict-head answer-{e(v.answer)}" data-answer="{e(v.answer)}">{e(v.headline)}</p>'
        f'<div class="numbers">{cards}</div><p class="verdict-text">{e(v.text)}</p>'
    )


# ---- run --------------------------------------------------------------------------------------------


def _utc(ns: float | None) -> str:
    value = num(ns)
    if value is None:
        return "—"
    return _dt.datetime.fromtimestamp(value / 1e9, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _run_html(result: Result, run: RunManifest) -> str:
    """The run manifest (run.json, read through capture.layout.RunManifest), the capture span, the hosts and the
    capture files."""
    return "".join(
        [
            _run_facts(result, run),
            _hosts_table(result.hosts),
            _captures_table(result.captures) if result.captures else "",
            _listed("Warnings", "warnings", [str(w) for w in result.warnings or []], "None."),
            _listed(
                "Assumed",
                "assumptions",
                [str(a) for a in result.assumptions or []],
                "Nothing: every value came from the capture or its metadata.",
            ),
        ]
    )


def _run_facts(result: Result, run: RunManifest) -> str:
    """The run's facts as a definition list: command, launch order, span, training, packets, drops, files."""
    hosts = result.hosts
    command = run.command
    launch = run.launch_order
    firsts = [h.first_ns for h in hosts if h.last_ns]
    lasts = [h.last_ns for h in hosts if h.last_ns]
    span = (max(lasts) - min(firsts)) if firsts and lasts else None
    captures = result.captures
    packets = sum(int(c.packets or 0) for c in captures)
    kernel = sum(int(h.drops.get("dropped_by_kernel") or 0) for h in hosts)
    iface = sum(int(h.drops.get("dropped_by_interface") or 0) for h in hosts)
    unknown = sum(1 for h in hosts if h.drops.get("dropped_by_kernel") is None)
    bad_files = [c for c in captures if c.warnings]
    kv = [
        (
            "command",
            f"<code>{e(command)}</code>" if command else '<span class="muted">not recorded (no run.json)</span>',
        ),
        (
            "hosts in launch order",
            e(" → ".join(launch)) if launch else '<span class="muted">not recorded (no run.json)</span>',
        ),
        (
            "capture span",
            f"{e(duration(span))} ({e(_utc(min(firsts)) if firsts else '—')} to {e(_utc(max(lasts)) if lasts else '—')})",
        ),
    ]
    if run.training:
        t = run.training
        kv.append(
            (
                "training",
                f"{e(duration((num(t.get('end_ns')) or 0) - (num(t.get('start_ns')) or 0)))}, "
                f"exit code {e(t.get('exit_code'))}",
            )
        )
    elif run.exit_code is not None:
        kv.append(("exit code", e(run.exit_code)))
    if run.status:
        kv.append(("capture status", e(run.status) + (f" — {e(run.error)}" if run.error else "")))
    kv += [
        ("packets", f"{packets:,} in {len(captures)} file(s)"),
        (
            "dropped by tcpdump",
            f"{kernel:,} by the kernel, {iface:,} by the interface"
            + (f" ({unknown} host(s) without counters)" if unknown else ""),
        ),
        ("files with problems", f"{len(bad_files)} (truncated or damaged parts are skipped and counted)"),
        ("incomplete captures", _incomplete(captures)),
        (
            "bytes counted as",
            f"{e(result.byte_mode)}; {e(float(result.bin_ns or 0) / 1e6)} ms bins"
            + (f" ({e(result.bin_choice)})" if result.bin_choice else ""),
        ),
    ]
    return '<dl class="kv">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in kv) + "</dl>"


def _hosts_table(hosts: Sequence[HostSummary]) -> str:
    """One row per host: addresses, link speed, bytes, utilization and tcpdump's drops."""
    rows = []
    shown, more = _both_ends(list(hosts), lambda h: float(h.tx_bytes or 0), "hosts", "bytes sent")
    for h in shown:
        tx, rx, d = h.tx_utilization, h.rx_utilization, h.drops
        rows.append(
            f'<tr data-host="{e(h.name)}"><td>{e(h.name)}</td><td class="mono">{e(", ".join(map(str, h.addresses or [])))}</td>'
            f'<td class="n" data-v="{e(num(h.link_speed_bps) or 0)}">{e(rate(h.link_speed_bps))}'
            f"{' (assumed)' if h.link_speed_source == 'assumed' else ''}</td>"
            f'<td class="n" data-v="{e(h.tx_bytes)}">{e(size(h.tx_bytes))}</td>'
            f'<td class="n" data-v="{e(h.rx_bytes)}">{e(size(h.rx_bytes))}</td>'
            f'<td class="n">{e(pct(tx.mean))}</td><td class="n">{e(pct(tx.while_busy))}</td>'
            f'<td class="n">{e(pct(tx.peak))}</td><td class="n">{e(pct(rx.while_busy))}</td>'
            f'<td class="n">{e(_count(d.get("dropped_by_kernel")))} / {e(_count(d.get("dropped_by_interface")))}</td></tr>'
        )
    return (
        '<h3>Hosts</h3><table class="sortable hosts"><thead><tr><th>host</th><th>addresses</th><th class="n">link speed</th>'
        '<th class="n">tx</th><th class="n">rx</th><th class="n">tx util. mean</th><th class="n">tx util. while busy</th>'
        '<th class="n">tx peak</th><th class="n">rx util. while busy</th><th class="n">drops kernel / iface</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{more}"
    )


def _captures_table(captures: Sequence[CaptureSummary]) -> str:
    """The capture files, the least complete first, at most CAPTURE_TABLE_ROWS of them."""
    crow = []
    for c in sorted(captures, key=_held)[:CAPTURE_TABLE_ROWS]:  # the least complete first
        crow.append(
            f'<tr><td class="mono">{e(c.path)}</td><td>{e(c.host)}</td><td>{e(c.format)}</td>'
            f'<td class="n" data-v="{e(c.packets)}">{int(c.packets or 0):,}</td>'
            f'<td class="n" data-v="{e(c.bytes)}">{e(size(c.bytes))}</td>'
            f'<td class="n" data-v="{e(_held(c))}">{e(pct(c.coverage.fraction) if c.coverage else "—")}</td>'
            f"<td>{e('; '.join(map(str, c.warnings or [])) or 'ok')}</td></tr>"
        )
    more = (
        f'<p class="note">… and {len(captures) - CAPTURE_TABLE_ROWS:,} more files.</p>'
        if len(captures) > CAPTURE_TABLE_ROWS
        else ""
    )
    return (
        '<details><summary>Capture files</summary><div class="scroll"><table class="sortable"><thead><tr>'
        '<th>file</th><th>host</th><th>format</th><th class="n">packets</th><th class="n">file size</th>'
        '<th class="n">host capture holds</th><th>health</th>'
        f"</tr></thead><tbody>{''.join(crow)}</tbody></table></div>{more}</details>"
    )


def _listed(title: str, css: str, items: list[str], none: str) -> str:
    """A titled list with its count (the warnings, the assumptions), or NONE said where it is empty."""
    return f"<h3>{title} ({len(items)})</h3>" + (
        f'<ul class="{css}">' + "".join(f"<li>{e(item)}</li>" for item in items) + "</ul>"
        if items
        else f'<p class="muted">{none}</p>'
    )


def _held(c: CaptureSummary) -> float:
    """The share of its host's traffic a capture holds (1 where not measured)."""
    return c.coverage.fraction if c.coverage is not None else 1.0


def _incomplete(captures: list[CaptureSummary]) -> str:
    """The hosts whose capture missed more than GAPPED of their flows' payload, each with its share held."""
    short = {c.host: c.coverage for c in captures if c.coverage is not None and c.coverage.fraction < 1 - GAPPED}
    start = min((c.first_ns for c in captures if c.packets), default=0)
    if not short:
        return "none: every capture holds its flows' payload (sequence numbers, PSNs, tcpdump's counters)"
    return e(
        "; ".join(f"{h}: {pct(v.fraction)} held ({v.source}){when_missing(v, start)}" for h, v in sorted(short.items()))
        + ": their flows are read from the other end's capture"
    )


def _count(value: int | None) -> str:
    return "—" if value is None else f"{int(value):,}"


# ---- jobs ---------------------------------------------------------------------------------------------


def _jobs_html(jobs: list[Job], other: OtherTraffic | None) -> str:
    """One row per job (the sections below the table are the first's; each other job has a section of its own),
    and the traffic of none with the job links it shared."""
    head = "<tr><th>job</th><th>hosts</th><th>ranks W</th><th>topology</th><th>pattern</th><th>iterations</th>"
    head += "<th>S implied</th>"
    head += "<th>limiter</th><th>confidence</th></tr>"
    rows = []
    for i, j in enumerate(jobs, 1):
        it, topo = j.iterations, j.topology
        count = f"{it.count} ({it.confidence:.2f})" if it is not None and it.count else "—"
        link = f'<a href="#job-{i}">{e(j.name)}</a>' if i > 1 else e(j.name) + " (the sections below)"
        rows.append(
            f"<tr><td>{link}</td><td>{len(j.hosts)}</td><td>{_count(j.world_size)}</td>"
            f"<td>{e(topo.kind if topo else '—')}</td><td>{e(j.pattern.kind if j.pattern else '—')}</td>"
            f"<td>{e(count)}</td>"
            f"<td>{e(size(j.implied_parameter_bytes.bytes if j.implied_parameter_bytes else None))}</td>"
            f"<td>{e(j.transport.limiter if j.transport and j.transport.limiter else '—')}</td>"
            f"<td>{j.confidence:.2f}</td></tr>"
        )
    out = [f"<table>{head}{''.join(rows)}</table>"]
    if other is not None:
        out.append(f"<p>Other traffic, set aside from every job: {other.flows:,} flow(s), {e(size(other.bytes))}.</p>")
        links = [
            f"<tr><td>{e(s.host)} {e(s.direction)}</td><td>{e(s.job)}</td><td>{s.share:.0%}</td>"
            f"<td>{e(rate(s.other_rate_bps))}</td></tr>"
            for s in other.shared_links[:20]
        ]
        if links:
            out.append(
                "<table><tr><th>link</th><th>shared with</th><th>other traffic's share</th><th>its rate</th></tr>"
                + "".join(links)
                + "</table>"
            )
    return "".join(out)


def _job_section(job: Job, index: int, hosts: list[HostSummary]) -> str:
    mine = [h for h in hosts if h.name in set(job.hosts)]
    inner = (
        "<h3>Topology</h3>"
        + _topology_html(job.topology)
        + "<h3>Iterations</h3>"
        + _iterations_html(
            job.iterations, mine, host_spread.detail_hosts(mine, [], ()) if host_spread.many(mine) else None
        )
        + "<h3>What-if</h3>"
        + _whatif_html(job.scaling, job.link_bound)
    )
    # the first job's sections hold the same figures and ring markers: this job's get ids of their own
    for old_id in ('id="fig-', 'data-target="fig-', 'id="arrow', "url(#arrow"):
        inner = inner.replace(old_id, old_id.replace("fig-", f"job{index}-fig-").replace("arrow", f"job{index}-arrow"))
    return _section(f"job-{index}", f"{job.name}: {len(job.hosts)} host(s), W = {_count(job.world_size)}", inner)


# ---- topology ---------------------------------------------------------------------------------------


def _topology_html(topo: Topology | None) -> str:
    if topo is None:
        return _placeholder(
            "No topology in this result: the collective's topology analysis did not run "
            "(or this result predates it), so the ring cannot be drawn.",
            "topology",
        )
    order = list(topo.order or [])
    launch = list(topo.launch_order or [])
    bad = mismatched_edges(topo)
    conf = num(topo.confidence)
    facts = [("kind", e(topology_name(topo)) + (f" (confidence {conf:.0%})" if conf is not None else ""))]
    if order:
        facts.append(
            (
                "ring order",
                f'<span class="ring-order" data-order="{e(",".join(order))}">' + _ring_text(order) + "</span>",
            )
        )
    if launch:
        facts.append(("launch order", e(" → ".join(launch))))
        match = topo.matches_launch_order
        if match is False or bad:
            facts.append(
                (
                    "launch order check",
                    '<span class="mismatch-text">the ring does not follow the launch order'
                    + (
                        f": {len(bad)} edge(s) join hosts that are not launch-order neighbours (red, dashed)"
                        if bad
                        else ""
                    )
                    + "</span>",
                )
            )
        elif match is True:
            facts.append(("launch order check", "the ring follows the launch order"))
    shown, more = _both_ends(list(topo.edges or []), lambda x: float(x.bytes or 0), "edges", "bytes")
    rows = "".join(
        f'<tr class="{"mismatch" if (x.src, x.dst) in bad else ""}"><td>{e(x.src)}</td>'
        f'<td>{e(x.dst)}</td><td class="n" data-v="{e(x.bytes)}">{e(size(x.bytes))}</td>'
        f'<td class="n">{e(x.flows)}</td><td class="n">{e(pct(x.share))}</td></tr>'
        for x in sorted(shown, key=lambda x: -(x.bytes or 0))
    )
    notes = "".join(f"<li>{e(n)}</li>" for n in topo.notes or [])
    side = (
        '<dl class="kv">'
        + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in facts)
        + "</dl>"
        + (
            '<table class="sortable edges"><thead><tr><th>from</th><th>to</th><th class="n">bytes</th><th class="n">flows</th>'
            f'<th class="n">share</th></tr></thead><tbody>{rows}</tbody></table>{more}'
            if rows
            else ""
        )
        + _groups_table(topo.groups or [])
        + (f'<ul class="assumptions">{notes}</ul>' if notes else "")
    )
    return (
        f'<div class="ring-wrap"><div>{ring_svg(topo)}<p class="note">{_ring_caption(len(order))}</p></div>'
        f"<div>{side}</div></div>"
    )


def _ring_caption(hosts: int) -> str:
    """How to read the ring diagram, which drops arrowheads and most names beyond LABELLED hosts."""
    if hosts <= LABELLED:
        return "Arrows point the way the data flows; width is proportional to bytes; numbers are ring positions."
    return (
        f"{hosts:,} hosts: each a dot, a few named; the data flows along the ring order; width is proportional to "
        "bytes; hover a dot or an edge for its host, position and bytes."
    )


def _ring_text(order: list[str]) -> str:
    """The ring order as text, back to its first host; beyond RING_NAMED hosts its two ends with a count between
    (4,096 names filled four screens)."""
    if len(order) <= RING_NAMED:
        return e(" → ".join(order + order[:1]))
    k = RING_NAMED // 2
    return e(" → ".join(order[:k]) + f" → … {len(order) - 2 * k:,} more … → " + " → ".join(order[-k:] + order[:1]))


def _groups_table(groups: list[Group]) -> str:
    """A pipeline job's groups: each data-parallel group's hosts and stage gradients, each boundary's host pairs
    and bytes per link each way per iteration."""
    if not groups:
        return ""
    rows = []
    for i, g in enumerate(groups):
        pairs = sorted({" ↔ ".join(sorted(x)) for x in g.edges}) if g.kind == "pipeline" else g.hosts
        rows.append(
            f'<tr data-kind="{e(g.kind)}"><td>{i}</td><td>{e(g.kind.replace("_", " "))}</td>'
            f'<td class="mono">{e(", ".join(pairs))}</td>'
            f'<td class="n">{e(size(g.bytes_per_iteration))}</td><td class="n">{e(size(g.implied_bytes))}</td>'
            f"<td>{e(schedule_text(g).lstrip('; '))}</td></tr>"
        )
    return (
        '<table class="sortable groups"><thead><tr><th>group</th><th>kind</th><th>hosts</th>'
        '<th class="n">bytes per iteration</th><th class="n">S_g (data parallel) or per link each way</th>'
        f"<th>micro-batches (pipeline)</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


# ---- series -----------------------------------------------------------------------------------------


def _span(result: Result) -> tuple[int, int] | None:
    bin_ns = int(result.bin_ns or 1)
    firsts = [int(h.first_ns) for h in result.hosts if h.last_ns]
    lasts = [int(h.last_ns) for h in result.hosts if h.last_ns]
    if not firsts:
        return None
    return min(firsts) // bin_ns * bin_ns, (max(lasts) // bin_ns + 1) * bin_ns


def _no_series(key: str) -> str:
    return _placeholder(
        "This report was rendered from a result JSON, which holds summaries but not the time series. "
        "Run `ringscope report` on the capture directory (or `ringscope analyze --html`) to draw them.",
        key,
    )


def _utilization_html(result: Result, max_points: int, shown: list[str] | None) -> str:
    tables: Tables | None = result.tables
    if tables is None or tables.host_series is None:
        return _no_series("host_series")
    span = _span(result)
    if span is None or len(tables.host_series) == 0:
        return _placeholder("No traffic from the hosts' own addresses was captured: nothing to draw.", "host_series")
    bin_ns = int(result.bin_ns)
    busy_threshold = float(result.busy_threshold or 0)
    series, shifts = F.on_reference_clock(tables.host_series, result.clock, bin_ns)
    if shifts:
        span = (span[0] - max(0, max(shifts.values())), span[1] - min(0, min(shifts.values())))
    wanted = set(shown or ())
    hosts = result.hosts if shown is None else [h for h in result.hosts if h.name in wanted]
    spread = ""
    if shown is not None:
        spread = (
            f'<p class="note">{len(result.hosts)} hosts: per time bucket, the median host\'s transmit and receive '
            f"utilization, the band from the 5th to the 95th percentile of the hosts and the busiest host. Below, "
            f"{len(hosts)} hosts in full ({e(', '.join(shown))}): the ones named with --host, else the stragglers "
            f"and the hosts that sent least and most.</p>"
            + figure_block(
                "fig-utilization-spread", host_spread.utilization_spread_figure(series, result.hosts, bin_ns, *span)
            )
        )
    spec, resolution = F.utilization_figure(series, hosts, bin_ns, busy_threshold, *span, max_points=max_points)
    moved = "; ".join(f"{e(h)} {-s / 1e6:+g} ms" for h, s in shifts.items())
    if len(shifts) > SHIFTS_LISTED:  # 512 hosts' shifts filled a screen above the figure
        ms = np.array([-s / 1e6 for s in shifts.values()])
        moved = (
            f"{len(ms)} of them, by {ms.min():+g} to {ms.max():+g} ms (median {np.median(ms):+g} ms; each host's "
            "in the clock key of the JSON)"
        )
    clock_note = (
        f" Times are on {e(result.clock.reference)}'s clock: the hosts' clocks, measured from the packets, "
        f"moved {moved}."
        if shifts and result.clock is not None
        else ""
    )
    return (
        f'<p class="note">Transmit (tx) and receive (rx) rate of each host\'s link as a share of its line rate; '
        f"the dashed line is the line rate; grey shading marks bins where the host was communicating "
        f"(tx or rx ≥ {busy_threshold:.0%} of line rate). Drag to zoom, double-click to reset."
        f"{clock_note}</p>" + spread + figure_block("fig-utilization", spec, resolution)
    )


def _flows_html(result: Result, max_points: int) -> str:
    out = []
    tables = result.tables
    if tables is None or tables.flow_series is None or tables.flows is None:
        out.append(_no_series("flow_series"))
    else:
        span = _span(result)
        if span is not None and len(tables.flow_series):
            spec, resolution = F.flow_figure(
                tables.flow_series, tables.flows, int(result.bin_ns), *span, max_points=max_points
            )
            out.append(
                f'<p class="note">The {F.TOP_FLOWS} largest flows by bytes; all others summed into one line.</p>'
                + figure_block("fig-flows", spec, resolution)
            )
        else:
            out.append(_placeholder("No flow traffic to draw.", "flow_series"))
    flows = sorted(result.flows, key=lambda f: -(f.bytes or 0))
    rows = []
    for i, f in enumerate(flows[:FLOW_TABLE_ROWS]):
        dur = float((f.end_ns or 0) - (f.start_ns or 0))
        rows.append(
            f'<tr><td class="n">{i + 1}</td><td class="mono">{e(f.src)}</td><td class="n">{e(f.sport)}</td>'
            f'<td class="mono">{e(f.dst)}</td><td class="n">{e(f.dport)}</td><td>{e(f.proto)}</td>'
            f'<td class="n" data-v="{e(f.bytes)}">{e(size(f.bytes))}</td>'
            f'<td class="n" data-v="{e(f.packets)}">{int(f.packets or 0):,}</td>'
            f'<td class="n" data-v="{e(_shown(f.mean_bps))}">{e(rate(f.mean_bps))}</td>'
            f'<td class="n" data-v="{dur:.0f}">{e(duration(dur))}</td>'
            f'<td class="n" data-v="{e(f.retransmitted_bytes)}">{e(size(f.retransmitted_bytes))}</td>'
            f"<td>{e(f.view)}</td></tr>"
        )
    more = (
        f'<p class="note">Showing the {FLOW_TABLE_ROWS:,} largest of {len(flows):,} flows; all are in '
        f"`ringscope analyze --json/--out`.</p>"
        if len(flows) > FLOW_TABLE_ROWS
        else ""
    )
    out.append(
        f'<h3>Flow table ({len(flows):,} flows; click a column to sort)</h3><div class="scroll">'
        '<table class="sortable flows"><thead><tr><th class="n">#</th><th>source</th><th class="n">port</th>'
        '<th>destination</th><th class="n">port</th><th>proto</th><th class="n">bytes</th><th class="n">packets</th>'
        '<th class="n">mean rate</th><th class="n">duration</th><th class="n">retransmitted</th><th>counted at</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{more}"
    )
    return "".join(out)


# ---- transport --------------------------------------------------------------------------------------


def _rdma_html(result: Result) -> str:
    """RDMA queue pairs folded into edges: a row per edge and the per-QP rate, CNP/NAK/resend and ACK figures."""
    r = result.rdma
    if r is None:
        return ""
    rows = []
    for x in r.edges or []:
        rows.append(
            f'<tr data-limiter="{e(x.limiter)}"><td class="mono">{e(x.src)} → {e(x.dst)}</td>'
            f'<td>{e(x.limiter or "not judged")}</td><td class="n">{float(x.confidence or 0):.2f}</td>'
            f'<td class="n">{len(x.qps)}</td><td class="n">{e(pct(x.burst_rate))} / {e(pct(x.rate_while_busy))}</td>'
            f'<td class="n">{float(x.resent_fraction or 0):.2%}</td><td class="n">{int(x.naks):,}</td>'
            f'<td class="n">{int(x.timeouts):,}</td><td class="n">{int(x.cnps):,}</td>'
            f'<td class="n">{float(x.ce_fraction or 0):.2%}</td><td class="n">{e(_in(x.ack_rtt_median_ns, 1e3))}</td></tr>'
        )
    table = (
        '<div class="scroll"><table class="sortable rdma"><thead><tr><th>edge</th><th>limiter</th>'
        '<th class="n">confidence</th><th class="n">QPs</th><th class="n">line rate in bursts / busy bins</th>'
        '<th class="n">re-sent packets</th><th class="n">NAKs</th><th class="n">timeouts</th><th class="n">CNPs</th>'
        '<th class="n">CE marked</th><th class="n">ACK RTT median (µs)</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
    span = _span(result)
    figures = "".join(figure_block(i, spec) for i, spec in F.rdma_figures(r, span[0] if span else 0))
    head = f"<h3>RDMA: {len(r.qps):,} queue pair(s)" + (f", limiter {e(r.limiter)}" if r.limiter else "") + "</h3>"
    notes = "".join(f"<li>{e(x)}</li>" for x in [*(r.evidence or []), *(r.notes or [])])
    return (
        head
        + f"<ul>{notes}</ul>"
        + '<p class="note">Each edge folds its queue pairs (NCCL_IB_QPS_PER_CONNECTION): packets sent again after '
        "NAKs or the requester's timer, CNPs and CE marks from the transport headers, ACK round trips in the "
        "sender's capture. Whether QPs share a path through the fabric is not visible in a capture.</p>"
        + table
        + figures
    )


def _transport_html(result: Result) -> str:
    return _transport_tcp_html(result) + _rdma_html(result)


def _transport_tcp_html(result: Result) -> str:
    t: Transport | None = result.transport
    if t is None:
        return _placeholder("No transport diagnosis in this result.", "transport")
    if not t.limiter:
        return _placeholder("Not judged: " + "; ".join(str(n) for n in t.notes or []), "transport")
    sure = float(t.confidence or 0) >= 0.5
    head = (
        f'<p class="verdict-head" data-limiter="{e(t.limiter)}">'
        f"{'' if sure else 'UNSURE — '}Limiter: {e(t.limiter)} (confidence {float(t.confidence):.2f})</p>"
    )
    items = "".join(f"<li>{e(x)}</li>" for x in [*(t.evidence or []), *(t.notes or [])])
    rows = []
    shown, more = _both_ends(list(t.edges or []), lambda x: float(x.rate_while_busy or 0), "edges", "rate while busy")
    for x in shown:
        window = (
            f"{size(x.inflight_mean_bytes)} / {size(x.window_mean_bytes)}"
            if x.window_mean_bytes is not None
            else f"{size(x.inflight_mean_bytes)} / scale unknown"
        )
        rows.append(
            f'<tr data-limiter="{e(x.limiter)}"><td class="mono">{e(x.src)} → {e(x.dst)}</td>'
            f'<td>{e(x.limiter or "not judged")}</td><td class="n">{float(x.confidence or 0):.2f}</td>'
            f'<td class="n">{e(pct(x.burst_rate))} / {e(pct(x.rate_while_busy))}</td>'
            f'<td class="n">{float(x.retransmitted_fraction or 0):.2%}</td>'
            f'<td class="n">{int(x.dup_acks or 0):,}</td><td class="n">{int(x.sack_acks or 0):,}</td>'
            f'<td class="n">{int(x.zero_windows or 0):,}</td><td class="n">{e(window)}</td>'
            f'<td class="n">{e(pct(x.window_full_fraction))}</td>'
            f'<td class="n">{e(_in(x.rtt_min_ns, 1e6))} / {e(_in(x.rtt_median_ns, 1e6))} / {e(_in(x.rtt_p99_ns, 1e6))}</td>'
            f"<td>{e(socket_text(x.sockets) or str(len(x.sockets) or 1))}</td></tr>"
        )
    table = (
        '<div class="scroll"><table class="sortable transport"><thead><tr><th>edge</th><th>limiter</th>'
        '<th class="n">confidence</th><th class="n">line rate in bursts / busy bins</th><th class="n">re-sent</th>'
        '<th class="n">dup ACKs</th><th class="n">SACK ACKs</th><th class="n">zero windows</th>'
        '<th class="n">in flight / window (mean)</th><th class="n">window full</th>'
        '<th class="n">RTT min / median / p99 (ms)</th><th>sockets</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>{more}"
    )
    if not t.edges:  # judged from the RDMA queue pairs: their table follows
        return head + f"<ul>{items}</ul>"
    span = _span(result)
    figures = "".join(figure_block(i, spec) for i, spec in F.transport_figures(t, span[0] if span else 0))
    return (
        head
        + f"<ul>{items}</ul>"
        + "<p class=\"note\">Each ring edge from its sender's capture: TCP's re-sent bytes, duplicate ACKs, SACKs, "
        "zero windows, bytes in flight against the receiver's advertised window and round trips, and its rate over "
        "its busy bins (see docs/transport.md).</p>" + table + figures
    )


# ---- iterations and what-if -------------------------------------------------------------------------


def _iterations_html(it: Iterations | None, hosts: list[HostSummary], shown: list[str] | None) -> str:
    if it is None:
        return _placeholder(
            "No iterations in this result: the iteration analysis did not run or found none "
            "(markers.jsonl gives them exactly).",
            "iterations",
        )
    b = it.bytes_per_iteration_per_host
    conf = num(it.confidence)
    sure = it.source == "markers" or (conf is not None and conf >= CONFIDENT)
    found = e(it.source) + (f" (confidence {conf:.2f})" if conf is not None else "")
    if not sure:
        found += " — UNSURE: a guess, not a finding; markers, --iterations or --gradient-bytes make it sure"
    facts = [
        ("found by", found),
        ("iterations", e(it.count)),
        ("period", e(duration(it.period_ns))),
        (
            "bytes sent per host per iteration",
            f"median {e(size(b.median))} (p5 {e(size(b.p5))}, p95 {e(size(b.p95))})",
        ),
        ("gradient bytes S implied", e(size(it.implied_gradient_bytes))),
    ]
    if it.pattern is not None:
        doubt = "" if it.pattern.confidence >= CONFIDENT else f" — UNSURE ({it.pattern.confidence:.2f})"
        facts.insert(-1, ("pattern", e(it.pattern.formula + doubt)))
    ratio = num(it.theory_ratio)
    if ratio is not None:
        facts.append(("measured / theory", f"{ratio:.3f}"))
    names = [str(h.name) for h in hosts]
    out = ['<dl class="kv">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"]
    spread = None if shown is None else host_spread.iteration_spread_traces(it, names, shown)
    for fig_id, spec in F.iteration_figures(it, names, len(names), spread):
        out.append(figure_block(fig_id, spec))
    return "".join(out)


def _whatif_html(sc: WhatIf | None, bound: LinkBound | None = None) -> str:
    if sc is None and bound is not None:
        return _bound_html(bound)
    if sc is None:
        return _placeholder(
            "No what-if in this result. `ringscope whatif RESULT.json --profile PROFILE "
            "--single-iteration-time T` computes the full-utilization scaling factor and the "
            "compression each bandwidth needs.",
            "scaling",
        )
    m = sc.measured
    chained = sc.wire is not None and sc.wire.readiness == "chained"  # a sharded or pipeline job's
    facts = [
        ("model", e(sc.model)),
        ("single-GPU iteration time T", e(duration(sc.single_iteration_time_ns))),
        (f"communication hides behind {'the compute' if chained else 'backward'} from", e(rate(sc.hide_bandwidth_bps))),
    ]
    if m is not None:
        for value, label in (
            (m.full_utilization_scaling_factor, "scaling factor, link fully used"),
            (m.scaling_factor_at_measured_efficiency, "scaling factor at measured efficiency"),
            (m.measured_scaling_factor, "scaling factor measured"),
        ):
            factor = num(value)
            if factor is not None:
                facts.append((label, f"{factor:.3f}"))
    check = sc.replay
    if check is not None:
        facts.append(
            (
                "replay of the measured iteration",
                e(
                    f"{check.modelled_iteration_ns / 1e6:.4g} ms against {check.measured_iteration_ns / 1e6:.4g} ms "
                    f"measured (error {check.error:+.1%}"
                    f"{', flagged: the model does not reproduce the job' if check.flagged else ''})"
                ),
            )
        )
    w = sc.wire
    if w is not None:
        facts += [
            ("link idle per iteration (compute not overlapped)", e(duration(w.idle_ns))),
            ("communication window", e(f"{duration(w.window_ns)} at {w.efficiency:.0%} of line rate")),
            (
                "the window at an infinitely fast link" if chained else "backward ends in the window",
                e(
                    f"{duration(w.backward_end_ns)} ("
                    + (
                        f"the ranks' profiles, {w.backward_profiled_steps} rank-steps: "
                        if w.backward_profiled_steps
                        else "the wire allows "
                    )
                    + f"{duration(w.backward_end_ns_low)}-"
                    f"{duration(w.backward_end_ns_high)}{'; hidden by the busy link' if w.hidden else ''})"
                ),
            ),
        ]
    out = [
        f'<p class="verdict-text">{e(sc.verdict)}</p>',
        '<dl class="kv">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>",
    ]
    for fig_id, spec in F.whatif_figures(sc):
        out.append(figure_block(fig_id, spec))
    out.append(_predictions_html(sc))
    rows = sc.needed_compression or []
    if rows:
        targets = sorted({t for t in (num(r.target) for r in rows) if t is not None})
        keyed: dict[tuple[int | None, float | None], dict[float | None, float | None]] = {}
        for r in rows:
            keyed.setdefault((r.workers, num(r.bandwidth_bps)), {})[num(r.target)] = num(r.compression)
        body = "".join(
            f'<tr><td class="n">{e(n)}</td><td class="n">{e(rate(bw))}</td>'
            + "".join(f'<td class="n">{_compression(cells.get(t))}</td>' for t in targets)
            + "</tr>"
            for (n, bw), cells in sorted(keyed.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0))
        )
        out.append(
            '<h3>Compression needed</h3><table><thead><tr><th class="n">workers</th><th class="n">bandwidth</th>'
            + "".join(f'<th class="n">for scaling factor {t:g}</th>' for t in targets)
            + f'</tr></thead><tbody>{body}</tbody></table><p class="note">— : no compression ratio reaches it '
            "(latency, reduction and the last bucket remain).</p>"
        )
    out.append(_assumed_html(sc.assumptions))
    return "".join(out)


def _predictions_html(sc: WhatIf) -> str:
    """The iteration predicted at each point asked, with the interval the capture cannot narrow."""
    rows = [p for p in sc.points or [] if p.iteration_ns is not None]
    if not rows:
        return ""
    body = "".join(
        f'<tr><td class="n">{e(p.workers)}</td><td class="n">{e(rate(p.bandwidth_bps))}</td>'
        f'<td class="n">{e(f"{p.compression:g}")}</td><td class="n">{e(duration(p.iteration_ns))}</td>'
        f'<td class="n">{e(duration(p.iteration_ns_low))}-{e(duration(p.iteration_ns_high))}'
        f'</td><td class="n">{p.scaling_factor:.3f}</td></tr>'
        for p in rows
    )
    return (
        '<h3>Predicted iteration</h3><table><thead><tr><th class="n">workers</th><th class="n">bandwidth</th>'
        '<th class="n">compression</th><th class="n">iteration</th><th class="n">interval</th>'
        f'<th class="n">scaling factor</th></tr></thead><tbody>{body}</tbody></table>'
    )


def _assumed_html(assumptions: list[str] | None) -> str:
    if not assumptions:
        return ""
    return (
        '<h3>Assumed by the model</h3><ul class="assumptions">'
        + "".join(f"<li>{e(a)}</li>" for a in assumptions)
        + "</ul>"
    )


STRAGGLER_ROWS = 20  # stragglers and link fixes in the report's tables; all are in the JSON


def _fix_interval(fix: LinkFix) -> str:
    """A per-link row's saving interval where the wire model priced it, else a dash."""
    if fix.saving_ns_low is None or fix.saving_ns_high is None:
        return "-"
    return f"{duration(fix.saving_ns_low)} - {duration(fix.saving_ns_high)}"


def _stragglers_html(result: Result) -> str:
    """Who holds the ring back (analyze.wire.stragglers), each edge's rate and each late rank's wait per iteration,
    and the per-link what-if's rows, the largest saving first."""
    found, scaling = result.stragglers, result.scaling
    if found is None:
        return _placeholder(
            "No straggler analysis: it needs sure iterations and the transport of two hosts.", "stragglers"
        )
    if not found:
        out = ['<p class="verdict-text">No one holds the ring back: no host enters the collective late and no '
               "link runs well under the others' pace.</p>"]  # fmt: skip
    else:
        rows = "".join(
            f'<tr data-kind="{e(s.kind)}"><td>{e(s.host)}</td><td class="n">{_count(s.rank)}</td><td>{e(s.kind)}</td>'
            f'<td class="n">{e(duration(s.lost_ns_per_iteration))}</td><td class="n">{s.iterations_affected}</td>'
            f'<td class="n">{s.confidence:.2f}</td><td>{e(" ".join(s.evidence))}</td></tr>'
            for s in sorted(found, key=lambda s: -s.lost_ns_per_iteration)[:STRAGGLER_ROWS]
        )
        out = [
            '<table data-table="stragglers"><thead><tr><th>host</th><th class="n">rank</th><th>kind</th>'
            '<th class="n">lost per iteration</th><th class="n">iterations</th><th class="n">confidence</th>'
            f"<th>evidence</th></tr></thead><tbody>{rows}</tbody></table>"
        ]
    out += [figure_block(fig_id, spec) for fig_id, spec in F.straggler_figures(result.transport, found)]
    bound = result.link_bound
    fixes = (scaling.per_edge if scaling is not None else bound.per_edge if bound is not None else None) or []
    if fixes:
        rows = "".join(
            f'<tr><td>{e(f.host or f"{f.src} → {f.dst}")}</td><td class="n">{e(duration(f.saving_ns))}</td>'
            f'<td class="n">{f.saving_share:.1%}</td><td class="n">{e(duration(f.iteration_ns_if_fixed))}</td>'
            f'<td class="n">{e(duration(f.saving_ns_if_usual)) if f.saving_ns_if_usual is not None else "-"}</td>'
            f'<td class="n">{e(_fix_interval(f))}</td><td>{e(f.priced_by or "-")}</td></tr>'
            for f in fixes[:STRAGGLER_ROWS]
        )
        usual = next((f.usual_bps for f in fixes if f.usual_bps), None)
        pace = f"the others' {usual / 1e6:,.0f} Mbit/s" if usual else "the others' pace"
        out.append(
            "<h3>Per-link what-if: each host's link at line rate</h3>"
            '<table data-table="per-edge"><thead><tr><th>link</th><th class="n">saves per iteration</th>'
            '<th class="n">share</th><th class="n">iteration if fixed</th>'
            f'<th class="n">saves at {e(pace)}</th><th class="n">interval</th><th>priced by</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>"
        )
    return "".join(out)


BOUND_LINKS_SHOWN = 10  # links of a link-bound what-if in the report; all of them are in the JSON


def _bound_html(bound: LinkBound) -> str:
    """A sharded or pipeline job's what-if: the bounds (analyze.whatif.link_bound), its busiest links and the
    link speed each scaling factor needs, with full overlap and with none."""
    low, high = bound.scaling_factor
    t_lo, t_hi = bound.compute_ns
    facts = [
        ("model", "link bounds: " + e(bound.formula)),
        ("compute per iteration T", e(duration(t_lo) if t_lo == t_hi else f"{duration(t_lo)} – {duration(t_hi)}")),
        ("iteration period", e(duration(bound.period_ns))),
        ("scaling factor at line rate", f"{low:.3f} (no overlap) – {high:.3f} (full overlap)"),
    ]
    links = "".join(
        f'<tr><td>{e(x.host)}</td><td class="n">{x.bytes_per_iteration / 1e6:.3f}</td>'
        f'<td class="n">{e(rate(x.link_speed_bps))}</td><td class="n">{e(duration(x.line_rate_ns))}</td>'
        f"<td>{e(', '.join(x.groups))}</td></tr>"
        for x in bound.links[:BOUND_LINKS_SHOWN]
    )
    more = len(bound.links) - BOUND_LINKS_SHOWN
    buy = "".join(
        f'<tr><td class="n">{b.target:g}</td><td class="n">{e(rate(b.full_overlap_bps))}</td>'
        f'<td class="n">{e(rate(b.no_overlap_bps))}</td></tr>'
        for b in bound.buy
    )
    return (
        f'<p class="verdict-text">{e(bound.verdict)}</p>'
        + '<dl class="kv">'
        + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in facts)
        + '</dl><h3>Busiest links</h3><table data-table="link-bound"><thead><tr><th>host</th>'
        '<th class="n">MB sent per iteration</th><th class="n">link</th><th class="n">at line rate</th>'
        f"<th>groups</th></tr></thead><tbody>{links}</tbody></table>"
        + (f'<p class="note">… and {more} more links (all in the JSON: link_bound.links).</p>' if more > 0 else "")
        + '<h3>Link speed to buy</h3><table><thead><tr><th class="n">scaling factor</th>'
        '<th class="n">with full overlap</th><th class="n">with none</th></tr></thead>'
        f"<tbody>{buy}</tbody></table>" + _assumed_html(bound.assumptions)
    )


def _compression(ratio: float | None) -> str:
    """A needed compression ratio: '—' where none reaches the target, 'none' where the link needs none."""
    if ratio is None:
        return "—"
    return "none" if ratio <= 1 else f"{ratio:.3g}×"

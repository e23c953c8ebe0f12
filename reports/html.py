"""The self-contained HTML report: one file, plotly embedded, opens offline.

`render_html(result)` takes the analyzer's Result (with its tables: series are drawn) or the JSON form
(a dict from `ringscope analyze --json`: everything but the time series, which that form does not carry —
those sections then say so). It never reads captures. Sections, in order: Verdict, Run, Ring topology,
Link utilization, Flows, Iterations, What-if, Transport.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, Mapping, Optional

from reports import figures as F
from reports.page import e, figure_block, page
from reports.ring_diagram import mismatched_edges, ring_svg
from reports.verdict import CONFIDENT, duration, num, pct, rate, size, verdict

FLOW_TABLE_ROWS = 500
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
]


def _doc_and_tables(result: Any) -> tuple[dict[str, Any], Any]:
    if isinstance(result, Mapping):
        doc = dict(result)
        if isinstance(doc.get("result"), Mapping) and "hosts" not in doc:
            doc = dict(doc["result"])
        return doc, None
    return result.to_json(), getattr(result, "tables", None)


def render_html(result: Any, *, title: Optional[str] = None, max_points: int = F.MAX_POINTS) -> str:
    """The report as one HTML string."""
    doc, tables = _doc_and_tables(result)
    run = doc.get("run") if isinstance(doc.get("run"), Mapping) else {}
    hosts = [h for h in doc.get("hosts") or [] if isinstance(h, Mapping)]
    title = title or (f"ringscope report — {run.get('run_id')}" if run.get("run_id") else "ringscope report")
    body = [
        _section("verdict", "Verdict", _verdict_html(doc)),
        _section("run", "Run", _run_html(doc, run, hosts)),
        _section("topology", "Ring topology", _topology_html(doc)),
        _section("utilization", "Link utilization over time", _utilization_html(doc, tables, hosts, max_points)),
        _section("flows", "Per-flow throughput", _flows_html(doc, tables, max_points)),
        _section("iterations", "Iterations", _iterations_html(doc, hosts)),
        _section("whatif", "What-if: the network at full utilization", _whatif_html(doc)),
        _section("transport", "Transport: why the links are not full", _transport_html(doc, hosts)),
    ]
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sub = (
        f"{len(hosts)} host(s), {len(doc.get('captures') or [])} capture file(s); ringscope "
        f"{doc.get('ringscope_version', '?')}, result schema {doc.get('schema', '?')}; generated {now}"
    )
    return page(title, sub, SECTIONS, "".join(body))


def write_html(result: Any, path: Path, *, title: Optional[str] = None) -> int:
    """Write the report; returns its size in bytes."""
    text = render_html(result, title=title).encode("utf-8")
    Path(path).write_bytes(text)
    return len(text)


def _section(anchor: str, heading: str, inner: str) -> str:
    return f'<section id="{anchor}"><h2>{e(heading)}</h2>{inner}</section>'


def _placeholder(text: str, key: str) -> str:
    return f'<p class="placeholder" data-missing="{e(key)}">{e(text)}</p>'


# ---- verdict ----------------------------------------------------------------------------------------


def _verdict_html(doc: Mapping[str, Any]) -> str:
    v = verdict(doc)
    cards = "".join(
        f'<div class="number" data-key="{e(n.key)}"><div class="label">{e(n.label)}</div>'
        f'<div class="value{" long" if len(n.value) > 9 else ""}">{e(n.value)}</div><div class="detail">{e(n.detail)}</div></div>'
        for n in v.numbers
    )
    return (
        f'<p class="verdict-head answer-{e(v.answer)}" data-answer="{e(v.answer)}">{e(v.headline)}</p>'
        f'<div class="numbers">{cards}</div><p class="verdict-text">{e(v.text)}</p>'
    )


# ---- run --------------------------------------------------------------------------------------------


def _utc(ns: Any) -> str:
    value = num(ns)
    if value is None:
        return "—"
    return _dt.datetime.fromtimestamp(value / 1e9, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _run_html(doc: Mapping[str, Any], run: Mapping[str, Any], hosts: list[Mapping[str, Any]]) -> str:
    out = []
    command = run.get("command")
    if isinstance(command, list):
        command = " ".join(str(c) for c in command)
    launch = [str(h.get("name", h) if isinstance(h, Mapping) else h) for h in run.get("hosts") or []]
    firsts = [num(h.get("first_ns")) for h in hosts if num(h.get("last_ns"))]
    lasts = [num(h.get("last_ns")) for h in hosts if num(h.get("last_ns"))]
    span = (max(lasts) - min(firsts)) if firsts and lasts else None
    captures = [c for c in doc.get("captures") or [] if isinstance(c, Mapping)]
    packets = sum(int(num(c.get("packets")) or 0) for c in captures)
    kernel = sum(int(num((h.get("drops") or {}).get("dropped_by_kernel")) or 0) for h in hosts)
    iface = sum(int(num((h.get("drops") or {}).get("dropped_by_interface")) or 0) for h in hosts)
    unknown = sum(1 for h in hosts if (h.get("drops") or {}).get("dropped_by_kernel") is None)
    bad_files = [c for c in captures if c.get("warnings")]
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
    if run.get("training"):
        t = run["training"] if isinstance(run.get("training"), Mapping) else {}
        kv.append(
            (
                "training",
                f"{e(duration((num(t.get('end_ns')) or 0) - (num(t.get('start_ns')) or 0)))}, "
                f"exit code {e(t.get('exit_code'))}",
            )
        )
    elif run.get("exit_code") is not None:
        kv.append(("exit code", e(run.get("exit_code"))))
    if run.get("status"):
        kv.append(("capture status", e(run.get("status")) + (f" — {e(run.get('error'))}" if run.get("error") else "")))
    kv += [
        ("packets", f"{packets:,} in {len(captures)} file(s)"),
        (
            "dropped by tcpdump",
            f"{kernel:,} by the kernel, {iface:,} by the interface"
            + (f" ({unknown} host(s) without counters)" if unknown else ""),
        ),
        ("files with problems", f"{len(bad_files)} (truncated or damaged parts are skipped and counted)"),
        ("bytes counted as", f"{e(doc.get('byte_mode'))}; {e(float(num(doc.get('bin_ns')) or 0) / 1e6)} ms bins"),
    ]
    out.append('<dl class="kv">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in kv) + "</dl>")
    rows = []
    for h in hosts:
        tx, rx = h.get("tx_utilization") or {}, h.get("rx_utilization") or {}
        d = h.get("drops") or {}
        src = h.get("link_speed_source")
        rows.append(
            f'<tr data-host="{e(h.get("name"))}"><td>{e(h.get("name"))}</td><td class="mono">{e(", ".join(map(str, h.get("addresses") or [])))}</td>'
            f'<td class="n" data-v="{e(num(h.get("link_speed_bps")) or 0)}">{e(rate(num(h.get("link_speed_bps"))))}'
            f"{' (assumed)' if src == 'assumed' else ''}</td>"
            f'<td class="n" data-v="{e(h.get("tx_bytes"))}">{e(size(num(h.get("tx_bytes"))))}</td>'
            f'<td class="n" data-v="{e(h.get("rx_bytes"))}">{e(size(num(h.get("rx_bytes"))))}</td>'
            f'<td class="n">{e(pct(num(tx.get("mean"))))}</td><td class="n">{e(pct(num(tx.get("while_busy"))))}</td>'
            f'<td class="n">{e(pct(num(tx.get("peak"))))}</td><td class="n">{e(pct(num(rx.get("while_busy"))))}</td>'
            f'<td class="n">{e(_count(d.get("dropped_by_kernel")))} / {e(_count(d.get("dropped_by_interface")))}</td></tr>'
        )
    out.append(
        '<h3>Hosts</h3><table class="sortable hosts"><thead><tr><th>host</th><th>addresses</th><th class="n">link speed</th>'
        '<th class="n">tx</th><th class="n">rx</th><th class="n">tx util. mean</th><th class="n">tx util. while busy</th>'
        '<th class="n">tx peak</th><th class="n">rx util. while busy</th><th class="n">drops kernel / iface</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    if captures:
        crow = []
        for c in captures[:CAPTURE_TABLE_ROWS]:
            crow.append(
                f'<tr><td class="mono">{e(c.get("path"))}</td><td>{e(c.get("host"))}</td><td>{e(c.get("format"))}</td>'
                f'<td class="n" data-v="{e(c.get("packets"))}">{int(num(c.get("packets")) or 0):,}</td>'
                f'<td class="n" data-v="{e(c.get("bytes"))}">{e(size(num(c.get("bytes"))))}</td>'
                f"<td>{e('; '.join(map(str, c.get('warnings') or [])) or 'ok')}</td></tr>"
            )
        more = (
            f'<p class="note">… and {len(captures) - CAPTURE_TABLE_ROWS:,} more files.</p>'
            if len(captures) > CAPTURE_TABLE_ROWS
            else ""
        )
        out.append(
            '<details><summary>Capture files</summary><div class="scroll"><table class="sortable"><thead><tr>'
            '<th>file</th><th>host</th><th>format</th><th class="n">packets</th><th class="n">file size</th><th>health</th>'
            f"</tr></thead><tbody>{''.join(crow)}</tbody></table></div>{more}</details>"
        )
    warnings = [str(w) for w in doc.get("warnings") or []]
    assumptions = [str(a) for a in doc.get("assumptions") or []]
    out.append(
        f"<h3>Warnings ({len(warnings)})</h3>"
        + (
            '<ul class="warnings">' + "".join(f"<li>{e(w)}</li>" for w in warnings) + "</ul>"
            if warnings
            else '<p class="muted">None.</p>'
        )
    )
    out.append(
        f"<h3>Assumed ({len(assumptions)})</h3>"
        + (
            '<ul class="assumptions">' + "".join(f"<li>{e(a)}</li>" for a in assumptions) + "</ul>"
            if assumptions
            else '<p class="muted">Nothing: every value came from the capture or its metadata.</p>'
        )
    )
    return "".join(out)


def _count(value: Any) -> str:
    return "—" if value is None else f"{int(value):,}"


# ---- topology ---------------------------------------------------------------------------------------


def _topology_html(doc: Mapping[str, Any]) -> str:
    topo = doc.get("topology")
    if not isinstance(topo, Mapping):
        return _placeholder(
            "No topology in this result: the collective's topology analysis did not run "
            "(or this result predates it), so the ring cannot be drawn.",
            "topology",
        )
    order = [str(h) for h in topo.get("order") or []]
    launch = [str(h) for h in topo.get("launch_order") or []]
    bad = mismatched_edges(topo)
    conf = num(topo.get("confidence"))
    facts = [("kind", e(topo.get("kind", "unknown")) + (f" (confidence {conf:.0%})" if conf is not None else ""))]
    if order:
        facts.append(
            (
                "ring order",
                f'<span class="ring-order" data-order="{e(",".join(order))}">'
                + e(" → ".join(order + order[:1]))
                + "</span>",
            )
        )
    if launch:
        facts.append(("launch order", e(" → ".join(launch))))
        match = topo.get("matches_launch_order")
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
    edges = [x for x in topo.get("edges") or [] if isinstance(x, Mapping)]
    rows = "".join(
        f'<tr class="{"mismatch" if (str(x.get("src")), str(x.get("dst"))) in bad else ""}"><td>{e(x.get("src"))}</td>'
        f'<td>{e(x.get("dst"))}</td><td class="n" data-v="{e(x.get("bytes"))}">{e(size(num(x.get("bytes"))))}</td>'
        f'<td class="n">{e(x.get("flows", "—"))}</td><td class="n">{e(pct(num(x.get("share"))))}</td></tr>'
        for x in sorted(edges, key=lambda x: -(num(x.get("bytes")) or 0))
    )
    notes = "".join(f"<li>{e(n)}</li>" for n in topo.get("notes") or [])
    side = (
        '<dl class="kv">'
        + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in facts)
        + "</dl>"
        + (
            '<table class="sortable edges"><thead><tr><th>from</th><th>to</th><th class="n">bytes</th><th class="n">flows</th>'
            f'<th class="n">share</th></tr></thead><tbody>{rows}</tbody></table>'
            if rows
            else ""
        )
        + (f'<ul class="assumptions">{notes}</ul>' if notes else "")
    )
    return (
        f'<div class="ring-wrap"><div>{ring_svg(topo)}<p class="note">Arrows point the way the data flows; '
        f"width is proportional to bytes; numbers are ring positions.</p></div><div>{side}</div></div>"
    )


# ---- series -----------------------------------------------------------------------------------------


def _span(doc: Mapping[str, Any], hosts: list[Mapping[str, Any]]) -> Optional[tuple[int, int]]:
    bin_ns = int(num(doc.get("bin_ns")) or 1)
    firsts = [int(num(h.get("first_ns"))) for h in hosts if num(h.get("last_ns"))]
    lasts = [int(num(h.get("last_ns"))) for h in hosts if num(h.get("last_ns"))]
    if not firsts:
        return None
    return min(firsts) // bin_ns * bin_ns, (max(lasts) // bin_ns + 1) * bin_ns


def _no_series(key: str) -> str:
    return _placeholder(
        "This report was rendered from a result JSON, which holds summaries but not the time series. "
        "Run `ringscope report` on the capture directory (or `ringscope analyze --html`) to draw them.",
        key,
    )


def _utilization_html(doc: Mapping[str, Any], tables: Any, hosts: list[Mapping[str, Any]], max_points: int) -> str:
    if tables is None or getattr(tables, "host_series", None) is None:
        return _no_series("host_series")
    span = _span(doc, hosts)
    if span is None or len(tables.host_series) == 0:
        return _placeholder("No traffic from the hosts' own addresses was captured: nothing to draw.", "host_series")
    series, shifts = F.on_reference_clock(tables.host_series, doc.get("clock"), int(doc["bin_ns"]))
    if shifts:
        span = (span[0] - max(0, max(shifts.values())), span[1] - min(0, min(shifts.values())))
    spec, resolution = F.utilization_figure(
        series,
        hosts,
        int(doc["bin_ns"]),
        float(doc.get("busy_threshold") or 0),
        *span,
        max_points=max_points,
    )
    moved = "; ".join(f"{e(h)} {-s / 1e6:+g} ms" for h, s in shifts.items())
    clock_note = (
        f" Times are on {e(doc['clock']['reference'])}'s clock: the hosts' clocks, measured from the packets, "
        f"moved {moved}."
        if shifts
        else ""
    )
    return (
        f'<p class="note">Transmit (tx) and receive (rx) rate of each host\'s link as a share of its line rate; '
        f"the dashed line is the line rate; grey shading marks bins where the host was communicating "
        f"(tx or rx ≥ {float(doc.get('busy_threshold') or 0):.0%} of line rate). Drag to zoom, double-click to reset."
        f"{clock_note}</p>" + figure_block("fig-utilization", spec, resolution)
    )


def _flows_html(doc: Mapping[str, Any], tables: Any, max_points: int) -> str:
    out = []
    hosts = [h for h in doc.get("hosts") or [] if isinstance(h, Mapping)]
    if tables is None or getattr(tables, "flow_series", None) is None or getattr(tables, "flows", None) is None:
        out.append(_no_series("flow_series"))
    else:
        span = _span(doc, hosts)
        if span is not None and len(tables.flow_series):
            spec, resolution = F.flow_figure(
                tables.flow_series, tables.flows, int(doc["bin_ns"]), *span, max_points=max_points
            )
            out.append(
                f'<p class="note">The {F.TOP_FLOWS} largest flows by bytes; all others summed into one line.</p>'
                + figure_block("fig-flows", spec, resolution)
            )
        else:
            out.append(_placeholder("No flow traffic to draw.", "flow_series"))
    flows = [f for f in doc.get("flows") or [] if isinstance(f, Mapping)]
    flows.sort(key=lambda f: -(num(f.get("bytes")) or 0))
    rows = []
    for i, f in enumerate(flows[:FLOW_TABLE_ROWS]):
        dur = (num(f.get("end_ns")) or 0) - (num(f.get("start_ns")) or 0)
        rows.append(
            f'<tr><td class="n">{i + 1}</td><td class="mono">{e(f.get("src"))}</td><td class="n">{e(f.get("sport"))}</td>'
            f'<td class="mono">{e(f.get("dst"))}</td><td class="n">{e(f.get("dport"))}</td><td>{e(f.get("proto"))}</td>'
            f'<td class="n" data-v="{e(f.get("bytes"))}">{e(size(num(f.get("bytes"))))}</td>'
            f'<td class="n" data-v="{e(f.get("packets"))}">{int(num(f.get("packets")) or 0):,}</td>'
            f'<td class="n" data-v="{e(f.get("mean_bps"))}">{e(rate(num(f.get("mean_bps"))))}</td>'
            f'<td class="n" data-v="{dur:.0f}">{e(duration(dur))}</td>'
            f'<td class="n" data-v="{e(f.get("retransmitted_bytes"))}">{e(size(num(f.get("retransmitted_bytes"))))}</td>'
            f"<td>{e(f.get('view'))}</td></tr>"
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


def _transport_html(doc: Mapping[str, Any], hosts: list[Mapping[str, Any]]) -> str:
    t = doc.get("transport")
    if not isinstance(t, Mapping):
        return _placeholder("No transport diagnosis in this result.", "transport")
    if not t.get("limiter"):
        return _placeholder("Not judged: " + "; ".join(str(n) for n in t.get("notes") or []), "transport")
    sure = float(t.get("confidence") or 0) >= 0.5
    head = (
        f'<p class="verdict-head" data-limiter="{e(t["limiter"])}">'
        f"{'' if sure else 'UNSURE — '}Limiter: {e(t['limiter'])} (confidence {float(t['confidence']):.2f})</p>"
    )
    items = "".join(f"<li>{e(x)}</li>" for x in [*(t.get("evidence") or []), *(t.get("notes") or [])])
    rows = []
    for x in t.get("edges") or []:
        if not isinstance(x, Mapping):
            continue
        window = (
            f"{size(num(x.get('inflight_mean_bytes')))} / {size(num(x.get('window_mean_bytes')))}"
            if x.get("window_mean_bytes") is not None
            else f"{size(num(x.get('inflight_mean_bytes')))} / scale unknown"
        )
        rows.append(
            f'<tr data-limiter="{e(x.get("limiter"))}"><td class="mono">{e(x.get("src"))} → {e(x.get("dst"))}</td>'
            f'<td>{e(x.get("limiter") or "not judged")}</td><td class="n">{float(x.get("confidence") or 0):.2f}</td>'
            f'<td class="n">{e(pct(num(x.get("rate_while_busy"))))}</td>'
            f'<td class="n">{float(x.get("retransmitted_fraction") or 0):.2%}</td>'
            f'<td class="n">{int(num(x.get("dup_acks")) or 0):,}</td><td class="n">{int(num(x.get("sack_acks")) or 0):,}</td>'
            f'<td class="n">{int(num(x.get("zero_windows")) or 0):,}</td><td class="n">{e(window)}</td>'
            f'<td class="n">{e(pct(num(x.get("window_full_fraction"))))}</td>'
            f'<td class="n">{e(x.get("rtt_min_ms"))} / {e(x.get("rtt_median_ms"))} / {e(x.get("rtt_p99_ms"))}</td></tr>'
        )
    table = (
        '<div class="scroll"><table class="sortable transport"><thead><tr><th>edge</th><th>limiter</th>'
        '<th class="n">confidence</th><th class="n">rate while sending</th><th class="n">re-sent</th>'
        '<th class="n">dup ACKs</th><th class="n">SACK ACKs</th><th class="n">zero windows</th>'
        '<th class="n">in flight / window (mean)</th><th class="n">window full</th>'
        f'<th class="n">RTT min / median / p99 (ms)</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )
    span = _span(doc, hosts)
    figures = "".join(figure_block(i, spec) for i, spec in F.transport_figures(t, span[0] if span else 0))
    return (
        head
        + f"<ul>{items}</ul>"
        + "<p class=\"note\">Each ring edge from its sender's capture: TCP's re-sent bytes, duplicate ACKs, SACKs, "
        "zero windows, bytes in flight against the receiver's advertised window and round trips, and its rate over "
        "its busy bins (see docs/transport.md).</p>" + table + figures
    )


# ---- iterations and what-if -------------------------------------------------------------------------


def _iterations_html(doc: Mapping[str, Any], hosts: list[Mapping[str, Any]]) -> str:
    it = doc.get("iterations")
    if not isinstance(it, Mapping):
        return _placeholder(
            "No iterations in this result: the iteration analysis did not run or found none "
            "(markers.jsonl gives them exactly).",
            "iterations",
        )
    per = it.get("per_iteration") or []
    b = it.get("bytes_per_iteration_per_host") or {}
    conf = num(it.get("confidence"))
    sure = it.get("source") == "markers" or (conf is not None and conf >= CONFIDENT)
    found = e(it.get("source", "?")) + (f" (confidence {conf:.2f})" if conf is not None else "")
    if not sure:
        found += " — UNSURE: a guess, not a finding; markers, --iterations or --gradient-bytes make it sure"
    facts = [
        ("found by", found),
        ("iterations", e(it.get("count", len(per)))),
        ("period", e(duration(num(it.get("period_ns"))))),
        (
            "bytes sent per host per iteration",
            f"median {e(size(num(b.get('median'))))} "
            f"(p5 {e(size(num(b.get('p5'))))}, p95 {e(size(num(b.get('p95'))))})",
        ),
        ("gradient bytes S implied", e(size(num(it.get("implied_gradient_bytes"))))),
    ]
    if num(it.get("theory_ratio")) is not None:
        facts.append(("measured / 2(N−1)/N·S", f"{num(it.get('theory_ratio')):.3f}"))
    names = [str(h.get("name")) for h in hosts]
    out = ['<dl class="kv">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"]
    for fig_id, spec in F.iteration_figures(it, names, len(names)):
        out.append(figure_block(fig_id, spec))
    return "".join(out)


def _whatif_html(doc: Mapping[str, Any]) -> str:
    sc = doc.get("scaling")
    if not isinstance(sc, Mapping):
        return _placeholder(
            "No what-if in this result. `ringscope whatif RESULT.json --profile PROFILE "
            "--single-iteration-time T` computes the full-utilization scaling factor and the "
            "compression each bandwidth needs.",
            "scaling",
        )
    m = sc.get("measured") or {}
    facts = [
        ("model", e(sc.get("model"))),
        ("single-GPU iteration time T", e(duration((num(sc.get("single_iteration_time_s")) or 0) * 1e9))),
        ("communication hides behind backward from", e(rate(num(sc.get("hide_bandwidth_bps"))))),
    ]
    for key, label in (
        ("full_utilization_scaling_factor", "scaling factor, link fully used"),
        ("scaling_factor_at_measured_efficiency", "scaling factor at measured efficiency"),
        ("measured_scaling_factor", "scaling factor measured"),
    ):
        if num(m.get(key)) is not None:
            facts.append((label, f"{num(m.get(key)):.3f}"))
    out = [
        f'<p class="verdict-text">{e(sc.get("verdict", ""))}</p>',
        '<dl class="kv">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>",
    ]
    for fig_id, spec in F.whatif_figures(sc):
        out.append(figure_block(fig_id, spec))
    rows = [r for r in sc.get("needed_compression") or [] if isinstance(r, Mapping)]
    if rows:
        targets = sorted({num(r.get("target")) for r in rows if num(r.get("target")) is not None})
        keyed: dict[tuple, dict] = {}
        for r in rows:
            keyed.setdefault((r.get("workers"), num(r.get("bandwidth_bps"))), {})[num(r.get("target"))] = num(
                r.get("compression")
            )
        body = "".join(
            f'<tr><td class="n">{e(n)}</td><td class="n">{e(rate(bw))}</td>'
            + "".join(
                f'<td class="n">{"—" if cells.get(t) is None else ("none" if cells[t] <= 1 else f"{cells[t]:.3g}×")}</td>'
                for t in targets
            )
            + "</tr>"
            for (n, bw), cells in sorted(keyed.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0))
        )
        out.append(
            '<h3>Compression needed</h3><table><thead><tr><th class="n">workers</th><th class="n">bandwidth</th>'
            + "".join(f'<th class="n">for scaling factor {t:g}</th>' for t in targets)
            + f'</tr></thead><tbody>{body}</tbody></table><p class="note">— : no compression ratio reaches it '
            "(latency, reduction and the last bucket remain).</p>"
        )
    assumptions = sc.get("assumptions") or []
    if assumptions:
        out.append(
            '<h3>Assumed by the model</h3><ul class="assumptions">'
            + "".join(f"<li>{e(a)}</li>" for a in assumptions)
            + "</ul>"
        )
    return "".join(out)

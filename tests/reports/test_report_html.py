"""The HTML report without a browser: downsampling, escaping, sections, the JSON path, the CLI and the size bound."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from analyze.model.findings import (
    IterationRecord,
    Iterations,
    Measured,
    NeededCompression,
    Percentiles,
    Sweep,
    SweepCurve,
    Topology,
    TopologyEdge,
    WhatIf,
)
from analyze.model.result import CaptureSummary, FlowRecord, HostSummary, Result, Tables, Utilization
from reports.downsample import bucket_share, sparse_line
from reports.html import SECTIONS, render_html
from reports.page import script_json

FIXTURE_EXAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "example"

XSS = "<script>alert(1)</script>"
MS = 1_000_000


# ---- downsampling -------------------------------------------------------------------------------------


def test_exact_line_drops_to_zero_in_gaps():
    t = np.array([0, 10, 20, 50, 60]) * MS
    ln = sparse_line(t, np.array([1.0, 2, 3, 4, 5]), 10 * MS, 0, 100 * MS, max_points=100)
    pts = dict(zip(ln.t_ns.tolist(), ln.y.tolist()))
    assert ln.exact
    assert [pts[x * MS] for x in (0, 10, 20, 50, 60)] == [1, 2, 3, 4, 5]
    assert pts[30 * MS] == 0 and pts[40 * MS] == 0 and pts[70 * MS] == 0  # the gap and the tail go to zero
    assert np.all(np.diff(ln.t_ns) > 0)


def test_minmax_keeps_peaks_and_zero_gaps_within_budget():
    bin_ns = MS
    n_bins = 1_000_000
    b = np.arange(n_bins)
    busy = b[(b // 500) % 2 == 0]  # 500 ms on, 500 ms off
    rng = np.random.default_rng(1)
    y = rng.uniform(0.3, 0.6, busy.size)
    y[123_457 % busy.size] = 0.99  # one spike
    ln = sparse_line(busy * bin_ns, y, bin_ns, 0, n_bins * bin_ns, max_points=2000)
    assert len(ln) <= 2002
    assert ln.y.max() == pytest.approx(0.99)
    assert not ln.exact and ln.bucket_ns >= bin_ns
    # each 500 ms idle stretch is wider than a bucket, so the drawn line touches 0 between bursts
    zeros = ln.t_ns[ln.y == 0]
    assert len(zeros) >= 900
    assert np.all(np.diff(ln.t_ns) >= 0)


def test_minmax_bucket_with_an_empty_bin_has_minimum_zero():
    t = np.arange(0, 10_000) * MS
    y = np.full(t.size, 0.5)
    keep = t != 5_000 * MS  # one empty bin
    ln = sparse_line(t[keep], y[keep], MS, 0, 10_000 * MS, max_points=100)
    assert (ln.y == 0).sum() >= 1 and ln.y.max() == 0.5


def test_bucket_share_is_the_busy_fraction():
    t = np.arange(0, 100_000, 2) * MS  # every other bin
    s = bucket_share(t, MS, 0, 100_000 * MS, max_points=100)
    assert s.y[:-1].max() == pytest.approx(0.5) and s.y[-1] == 0


# ---- escaping -----------------------------------------------------------------------------------------


def test_script_json_cannot_close_the_script_element():
    text = script_json({"name": "</script><script>alert(1)</script>", "a&b": float("nan")})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": "</script><script>alert(1)</script>", "a&b": None}


# ---- a small synthetic result ---------------------------------------------------------------------------


def _util(mean: float, busy: float, while_busy: float, peak: float) -> Utilization:
    return Utilization(mean=mean, busy_fraction=busy, while_busy=while_busy, peak=peak, p50=0.0, p99=peak)


def synthetic_result(
    names: list[str],
    seconds: float,
    bin_ns: int = MS,
    busy_share: float = 0.5,
    link_bps: float = 25e9,
    period_bins: int = 200,
    **findings: Any,
) -> Result:
    """N hosts in a ring; each sends to the next in bursts (busy_share of each period) at ~90 % of line rate."""
    n_bins = int(seconds * 1e9 // bin_ns)
    t0 = 1_700_000_000 * 10**9
    b = np.arange(n_bins, dtype=np.int64)
    on = b[(b % period_bins) < busy_share * period_bins]
    rng = np.random.default_rng(7)
    per_bin = 0.9 * link_bps * bin_ns / 8e9
    series, flow_series, hosts, flows = [], [], [], []
    addr = {h: f"10.0.0.{i + 1}" for i, h in enumerate(names)}
    for i, h in enumerate(names):
        nxt = names[(i + 1) % len(names)]
        by = (per_bin * rng.uniform(0.85, 1.1, on.size)).astype(np.int64)
        t = t0 + on * bin_ns
        for direction in ("tx", "rx"):
            series.append(
                pd.DataFrame(
                    {
                        "host": h,
                        "direction": direction,
                        "t_ns": t,
                        "bytes": by,
                        "bps": by * 8e9 / bin_ns,
                        "utilization": by * 8e9 / bin_ns / link_bps,
                    }
                )
            )
        flow_series.append(pd.DataFrame({"flow_id": i, "t_ns": t, "bytes": by, "bps": by * 8e9 / bin_ns}))
        total = int(by.sum())
        u = _util(total * 8 / (seconds * link_bps), busy_share, 0.9, float(by.max() * 8e9 / bin_ns / link_bps))
        hosts.append(
            HostSummary(
                name=h,
                addresses=[addr[h]],
                link_speed_bps=link_bps,
                link_speed_source="meta",
                tx_bytes=total,
                rx_bytes=total,
                tx_packets=total // 9000,
                rx_packets=total // 9000,
                first_ns=t0,
                last_ns=t0 + n_bins * bin_ns - 1,
                tx_utilization=u,
                rx_utilization=u,
                drops={"dropped_by_kernel": 0, "dropped_by_interface": 0},
            )
        )
        flows.append(
            FlowRecord(
                src=addr[h],
                dst=addr[nxt],
                sport=40000 + i,
                dport=29500,
                proto="tcp",
                packets=total // 9000,
                bytes=total,
                payload_bytes=total,
                start_ns=t0,
                end_ns=t0 + n_bins * bin_ns,
                mean_bps=total * 8 / seconds,
                retransmitted_bytes=0,
                seen_by=[h, nxt],
                view=h,
            )
        )
    flows_df = pd.DataFrame([{**f.__dict__, "flow_id": i} for i, f in enumerate(flows)])
    captures = [
        CaptureSummary(
            path=f"/captures/{h}/eth0.pcap",
            host=h,
            format="pcap",
            linktypes=["EN10MB"],
            packets=hs.tx_packets * 2,
            bytes=hs.tx_packets * 200,
            first_ns=t0,
            last_ns=hs.last_ns,
            frame_kinds={},
            warnings=[],
        )
        for h, hs in zip(names, hosts)
    ]
    run = {
        "schema": 1,
        "run_id": "synthetic",
        "command": ["torchrun", "train.py"],
        "hosts": names,
        "start_ns": t0,
        "end_ns": t0 + n_bins * bin_ns,
        "exit_code": 0,
    }
    return Result(
        byte_mode="ip",
        bin_ns=bin_ns,
        busy_threshold=0.01,
        hosts=hosts,
        flows=flows,
        captures=captures,
        warnings=[],
        assumptions=[],
        run=run,
        tables=Tables(
            flows=flows_df,
            flow_views=pd.DataFrame(),
            flow_series=pd.concat(flow_series, ignore_index=True),
            host_series=pd.concat(series, ignore_index=True),
            markers=pd.DataFrame(),
        ),
        **findings,
    )


def _edge(src: str, dst: str, nbytes: int, flows: int, share: float) -> TopologyEdge:
    return TopologyEdge(src=src, dst=dst, bytes=nbytes, payload_bytes=nbytes, flows=flows, share=share, inferred=False)


def test_sections_in_order_and_series_drawn():
    html = render_html(synthetic_result(["a", "b", "c", "d"], 5), title="T")
    positions = [html.index(f'<section id="{anchor}">') for anchor, _ in SECTIONS]
    assert positions == sorted(positions)
    assert html.count("<script>/**\n* plotly.js") + html.count("* plotly.js v") >= 1
    assert html.count("Plotly.newPlot") == 1 and len(re.findall(r"plotly\.js v\d", html)) == 1  # embedded once
    assert 'id="fig-utilization"' in html and 'id="fig-flows"' in html
    assert (
        'data-missing="topology"' in html and 'data-missing="iterations"' in html and 'data-missing="scaling"' in html
    )
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", html)  # nothing loaded from outside


def test_host_name_with_html_is_escaped_everywhere():
    res = synthetic_result(
        [XSS, "b", "c"],
        2,
        topology=Topology(
            kind="ring",
            order=[XSS, "b", "c"],
            launch_order=[XSS, "c", "b"],
            matches_launch_order=False,
            edges=[_edge(XSS, "b", 10, 1, 0.34)],
            confidence=0.9,
            notes=[XSS],
        ),
    )
    res.run["command"] = ["python", "</script><img src=x onerror=alert(2)>"]
    html = render_html(res, title="<b>t</b>")
    assert XSS not in html and "<img src=x" not in html and "<b>t</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # every <script> element is ours: plotly.js, the boot script, or a JSON spec
    for m in re.finditer(r"<script([^>]*)>", html):
        assert m.group(1) in (
            "",
            ' type="application/json" class="rs-fig" data-target="fig-utilization"',
            ' type="application/json" class="rs-fig" data-target="fig-flows"',
        )


def test_launch_order_mismatch_is_highlighted():
    topo = Topology(
        kind="ring",
        order=["a", "b", "c", "d"],
        launch_order=["a", "c", "b", "d"],
        matches_launch_order=False,
        confidence=0.95,
        notes=[],
        edges=[_edge(s, d, 100, 2, 0.25) for s, d in (("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"))],
    )
    html = render_html(synthetic_result(["a", "b", "c", "d"], 1, topology=topo))
    # a→b and c→d join hosts that are not launch-order neighbours (a–c–b–d–a)
    assert html.count('class="edge mismatch"') == 2
    assert 'data-src="a" data-dst="b"' in html and "does not follow the launch order" in html


def test_renders_from_result_json_without_series():
    res = synthetic_result(
        ["a", "b"],
        1,
        iterations=Iterations(
            source="markers",
            count=3,
            period_ns=2e8,
            per_iteration=[
                IterationRecord(
                    index=k,
                    start_ns=k * 200_000_000,
                    end_ns=k * 200_000_000 + 190_000_000,
                    bytes_by_host={"a": 1_000_000, "b": 1_000_000},
                    rx_bytes_by_host={"a": 1_000_000, "b": 1_000_000},
                    bytes_by_edge={"a->b": 1_000_000, "b->a": 1_000_000},
                    comm_start_ns=k * 200_000_000,
                    comm_ns=50_000_000,
                    rate_bps=1.6e8,
                )
                for k in range(3)
            ],
            bytes_per_iteration_per_host=Percentiles(median=1e6, p5=1e6, p95=1e6),
            implied_gradient_bytes=1e6,
            theory_ratio=1.0,
        ),
    )
    doc = json.loads(json.dumps(res.to_json()))
    back = Result.from_json(doc)
    assert back.tables is None and back.iterations == res.iterations
    html = render_html(back)
    assert 'data-missing="host_series"' in html and 'data-missing="flow_series"' in html
    assert 'id="fig-iter-bytes"' in html and 'id="fig-iter-time"' in html
    assert 'data-key="bytes_per_iteration"' in html and "1 MB" in html and "200 ms" in html


def test_whatif_section_from_scaling_key():
    scaling = WhatIf(
        model="ringscope",
        model_options={},
        single_iteration_time_ns=100_000_000,
        profile={},
        points=[],
        hide_bandwidth_bps=25e9,
        hide_bandwidth=[],
        verdict="The network is the bottleneck.",
        assumptions=["a"],
        measured=Measured(
            workers=4,
            link_speed_bps=10e9,
            transport_efficiency=0.6,
            full_utilization_scaling_factor=0.8,
            scaling_factor_at_measured_efficiency=0.7,
            measured_scaling_factor=0.65,
        ),
        sweep=Sweep(bandwidths_bps=[1e9, 10e9, 100e9], curves=[SweepCurve(4, 1.0, [0.3, 0.8, 0.99])]),
        needed_compression=[
            NeededCompression(workers=4, bandwidth_bps=b, target=t, compression=c)
            for b, c in ((1e9, 9.0), (10e9, 2.0), (100e9, 1.0))
            for t in (0.9, 0.99)
        ],
    )
    html = render_html(synthetic_result(["a", "b", "c", "d"], 1, scaling=scaling))
    assert 'id="fig-whatif-scaling"' in html and 'id="fig-whatif-compression"' in html
    assert 'data-answer="yes"' in html and "0.650 → 0.800" in html
    assert '<td class="n">9×</td>' in html


def test_cli_report_from_json_and_title(tmp_path):
    from cli import app

    res = synthetic_result(["a", "b"], 1)
    (tmp_path / "r.json").write_text(json.dumps(res.to_json()))
    out = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["report", str(tmp_path / "r.json"), "-o", str(out), "--title", "My <run>"])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "<title>My &lt;run&gt;</title>" in text and 'data-missing="host_series"' in text
    r = CliRunner().invoke(app, ["report", str(tmp_path / "missing.pcap"), "-o", str(out)])
    assert r.exit_code != 0 and "Traceback" not in r.output


def test_cli_report_refuses_a_zero_bin_before_reading(tmp_path):
    """report shares analyze's --bin rule: a zero-width bin is one error line, exit 2, and no report file."""
    from cli import app

    out = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["report", str(FIXTURE_EXAMPLE), "--bin", "0", "-o", str(out)])
    assert r.exit_code == 2 and "bad --bin '0': must be longer than 0" in r.output
    assert not out.exists()


def test_hour_long_four_host_report_stays_small():
    """4 hosts × 1 h at 1 ms bins, ~50 % busy: 14.4 M series rows in, a report under 10 MB out."""
    res = synthetic_result(["node-a", "node-b", "node-c", "node-d"], 3600, bin_ns=MS, busy_share=0.5)
    assert len(res.tables.host_series) == 4 * 2 * 1_800_000
    start = time.perf_counter()
    html = render_html(res)
    took = time.perf_counter() - start
    size = len(html.encode())
    print(f"hour-long 4-host report: {size / 1e6:.2f} MB in {took:.1f} s")
    assert size < 10e6
    assert took < 60


def test_cli_analyze_html_and_report_with_whatif_json(tmp_path):
    """`analyze --html` on the bundled example; `report CAPTURES WHATIF.json` fills the what-if section."""
    from cli import app

    example = Path(__file__).resolve().parents[2] / "fixtures" / "example"
    assert (example / "run.json").is_file(), example
    out = tmp_path / "a.html"
    r = CliRunner().invoke(app, ["analyze", str(example), "--html", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert 'id="fig-utilization"' in text and 'id="fig-flows"' in text and 'id="fig-whatif-scaling"' in text
    whatif = tmp_path / "whatif.json"
    whatif.write_text(
        json.dumps(
            {
                "scaling": {
                    "model": "paper",
                    "single_iteration_time_s": 0.1,
                    "verdict": "V<erdict>",
                    "measured": {"workers": 4, "link_speed_bps": 1e9, "full_utilization_scaling_factor": 0.5},
                    "sweep": {
                        "bandwidths_bps": [1e9, 1e10],
                        "curves": [{"workers": 4, "compression": 1, "scaling_factor": [0.5, 0.9]}],
                    },
                }
            }
        )
    )
    r = CliRunner().invoke(app, ["report", str(example), str(whatif), "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert 'id="fig-whatif-scaling"' in text and "V&lt;erdict&gt;" in text and 'data-answer="yes"' in text
    r = CliRunner().invoke(app, ["report", str(whatif), "-o", str(out)])
    assert r.exit_code == 2 and "no result JSON and no captures" in r.output

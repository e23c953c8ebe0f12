"""The HTML report in a real browser: Debian's headless Chromium, network shut off, over the DevTools pipe.

The capture is real: four "hosts" on loopback addresses, one tcpdump each, a TCP ring among them (see
tests/support/loopback_ring.py); the ground truth (bytes each host sent per iteration, the ring order) is fixed
before the capture. Needs root + tcpdump (capture) and chromium: skipped on a laptop without them, failed
under CI=true. Screenshots go to tests/artifacts/ (gitignored).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.support.browser import Page, find_chromium
from tests.support.loopback_ring import make_ring_capture
from tests.support.requirements import require, require_capture

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
EXAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "example"
XSS = "<script>alert(1)</script>"
LAUNCH = ["alpha", "gamma", "beta", "delta"]  # not alphabetical: the ring must follow this, not name order
CHUNK = 1_000_000
ITERATIONS = 8


def require_chromium() -> str:
    path = find_chromium()
    require(path is not None, "needs chromium (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    require_capture()
    root = tmp_path_factory.mktemp("ring")
    truth = make_ring_capture(root / "cap", LAUNCH, iterations=ITERATIONS, chunk_bytes=CHUNK)
    return root / "cap", truth


@pytest.fixture(scope="module")
def rendered(capture, tmp_path_factory):
    """The report of the loopback capture, written by the CLI as a user would."""
    from typer.testing import CliRunner

    from cli import app

    cap, truth = capture
    out = tmp_path_factory.mktemp("report") / "report.html"
    r = CliRunner().invoke(app, ["report", str(cap), "-o", str(out), "--title", "loopback ring"])
    assert r.exit_code == 0, r.output
    from analyze.api import analyze

    return out, analyze([cap]), truth


FIGURES_JS = """Array.from(document.querySelectorAll('.js-plotly-plot')).map(function (d) {
  return {id: d.id, traces: d._fullData.length,
          points: d._fullData.map(function (t) { return t.x ? t.x.length : 0; })}; })"""


def _open(page: Page, path: Path) -> None:
    page.goto(path.resolve().as_uri())
    assert page.wait_for("window.ringscopeReady") is True


def test_report_in_chromium(rendered):
    path, result, truth = rendered
    require_chromium()
    with Page() as page:
        _open(page, path)
        figures = page.evaluate(FIGURES_JS)
        verdict = page.evaluate("document.getElementById('verdict').innerText")
        cards = page.evaluate(
            "Object.fromEntries(Array.from(document.querySelectorAll('#verdict .number'))"
            ".map(function (c) { return [c.dataset.key, c.querySelector('.value').innerText]; }))"
        )
        page.screenshot(ARTIFACTS / "report.png")
        page.screenshot(ARTIFACTS / "report-top.png", clip=(0, 0, 1280, 1000))
        # the flow table sorts by a column when its header is clicked (twice: descending)
        order = page.evaluate("""(function () {
            var th = Array.from(document.querySelectorAll('table.flows th')).filter(function (t) {
                return t.innerText.trim().indexOf('packets') === 0; })[0];
            th.click();
            var asc = Array.from(document.querySelectorAll('table.flows tbody tr')).map(function (r) {
                return parseFloat(r.cells[7].getAttribute('data-v')); });
            th.click();
            return asc; })()""")
        page.color_scheme("dark")  # the same page with prefers-color-scheme: dark
        _open(page, path)
        dark_bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
        page.screenshot(ARTIFACTS / "report-dark.png", clip=(0, 0, 1280, 1600))
        errors, requests, dialogs = page.errors(), page.requests, page.dialogs
    assert dark_bg == "rgb(21, 23, 26)"
    assert errors == [], errors
    # the page itself (twice), and the images plotly draws its heat maps into (data: URLs made in the page), nothing
    # fetched from elsewhere
    assert {r for r in requests if not r.startswith("data:")} == {path.resolve().as_uri()}, requests
    assert dialogs == []
    ids = {f["id"] for f in figures}
    assert {"fig-utilization", "fig-flows", "fig-iter-bytes", "fig-iter-time"} <= ids, figures
    for f in figures:
        assert f["traces"] > 0 and all(p > 0 for p in f["points"]), f
    util = next(f for f in figures if f["id"] == "fig-utilization")
    assert util["traces"] == 3 * len(LAUNCH)  # tx, rx and busy shading per host
    assert order == sorted(order)

    # the verdict's numbers: ground truth for bytes, the analyzer's summary for utilization
    hosts = result.hosts
    assert len(hosts) == len(LAUNCH)
    while_busy = sum(h.tx_utilization.while_busy for h in hosts) / len(hosts)
    assert cards["while_busy"] == f"{while_busy * 100:.1f} %"
    assert "10 Gbit/s" in verdict
    if "bytes_per_iteration" in cards:  # iterations found: median bytes sent per host per iteration
        value, unit = cards["bytes_per_iteration"].split()
        assert unit == "MB" and float(value) * 1e6 == pytest.approx(CHUNK, rel=0.03)
    else:  # total data sent per host
        value, unit = cards["tx_bytes"].split()
        assert unit == "MB" and float(value) * 1e6 == pytest.approx(ITERATIONS * CHUNK, rel=0.03)


def test_ring_order_in_chromium(rendered):
    """The diagram visits the hosts in the launch order, the way the data flowed (i sends to i+1)."""
    path, _, _ = rendered
    require_chromium()
    with Page() as page:
        _open(page, path)
        nodes = page.evaluate(
            "Array.from(document.querySelectorAll('#topology svg.ring g.node'))"
            ".map(function (g) { return g.getAttribute('data-host'); })"
        )
        edges = page.evaluate(
            "Array.from(document.querySelectorAll('#topology svg.ring path.edge'))"
            ".map(function (p) { return [p.getAttribute('data-src'), p.getAttribute('data-dst')]; })"
        )
        placeholder = page.evaluate("!!document.querySelector('#topology [data-missing=topology]')")
        y = int(page.evaluate("document.getElementById('topology').getBoundingClientRect().top + window.scrollY"))
        page.screenshot(ARTIFACTS / "report-topology.png", clip=(0, y, 1280, 700))
    assert not placeholder, "the topology placeholder is shown instead of the ring"
    start = nodes.index(LAUNCH[0])
    assert nodes[start:] + nodes[:start] == LAUNCH
    assert sorted(map(tuple, edges)) == sorted((LAUNCH[i], LAUNCH[(i + 1) % 4]) for i in range(4))


def test_host_name_with_html_stays_text(capture, tmp_path):
    """A meta.json host named <script>alert(1)</script> is shown as text; no script runs, no dialog opens."""
    require_chromium()
    cap, _ = capture
    evil = tmp_path / "cap"
    shutil.copytree(cap, evil)
    meta = json.loads((evil / "host0" / "meta.json").read_text())
    meta["host"] = XSS
    (evil / "host0" / "meta.json").write_text(json.dumps(meta))
    run = json.loads((evil / "run.json").read_text())
    run["hosts"][0] = XSS
    run["command"] = ["python", "</script><img src=x onerror=alert(2)>"]
    (evil / "run.json").write_text(json.dumps(run))
    from analyze.api import analyze
    from reports.html import write_html

    out = tmp_path / "xss.html"
    write_html(analyze([evil]), out, title="<img src=x onerror=alert(3)>")
    with Page() as page:
        _open(page, out)
        text = page.evaluate("document.body.innerText")
        title = page.evaluate("document.querySelector('header h1').innerText")
        injected = page.evaluate(
            "Array.from(document.querySelectorAll('script:not([type]), img'))"
            ".filter(function (s) { return s.textContent.indexOf('alert(') >= 0 "
            "|| s.tagName === 'IMG'; }).length"
        )
        in_figure = page.evaluate(
            f"document.getElementById('fig-utilization').textContent.indexOf({json.dumps(XSS)}) >= 0"
        )
        page.screenshot(ARTIFACTS / "report-xss.png", clip=(0, 0, 1280, 1000))
        dialogs, errors = page.dialogs, page.errors()
    assert dialogs == [], dialogs
    assert errors == [], errors
    assert injected == 0
    assert text.count(XSS) >= 3  # launch order, hosts table, ring order ...
    assert "</script><img src=x onerror=alert(2)>" in text
    assert title == "<img src=x onerror=alert(3)>"
    assert in_figure  # plotly labels show it as text too


def test_bundled_example_in_chromium(tmp_path):
    """fixtures/example (4 hosts, ring all-reduce, expected.json = ground truth): figures drawn, ring and
    numbers right."""
    assert (EXAMPLE / "expected.json").is_file(), EXAMPLE
    require_chromium()
    from analyze.api import analyze
    from reports.html import write_html

    expected = json.loads((EXAMPLE / "expected.json").read_text())
    result = analyze([EXAMPLE])
    out = tmp_path / "example.html"
    write_html(result, out, title="ringscope report — example")
    with Page() as page:
        _open(page, out)
        figures = page.evaluate(FIGURES_JS)
        nodes = page.evaluate(
            "Array.from(document.querySelectorAll('#topology svg.ring g.node'))"
            ".map(function (g) { return g.getAttribute('data-host'); })"
        )
        edges = page.evaluate(
            "Array.from(document.querySelectorAll('#topology svg.ring path.edge'))"
            ".map(function (p) { return [p.getAttribute('data-src'), p.getAttribute('data-dst')]; })"
        )
        cards = page.evaluate(
            "Object.fromEntries(Array.from(document.querySelectorAll('#verdict .number'))"
            ".map(function (c) { return [c.dataset.key, c.querySelector('.value').innerText]; }))"
        )
        verdict = page.evaluate("document.getElementById('verdict').innerText")
        page.screenshot(ARTIFACTS / "report-example.png")
        errors, requests = page.errors(), page.requests
    assert errors == [] and [r for r in requests if not r.startswith("data:")] == [out.resolve().as_uri()], requests
    assert {"fig-utilization", "fig-flows", "fig-iter-bytes", "fig-iter-time"} <= {f["id"] for f in figures}
    assert all(f["traces"] > 0 and all(p > 0 for p in f["points"]) for f in figures)
    assert f"{expected['link_speed_bps'] / 1e9:g} Gbit/s" in verdict
    value, unit = cards["bytes_per_iteration"].split()
    assert unit == "MB" and float(value) * 1e6 == pytest.approx(expected["tx_payload_bytes_per_iteration"], rel=0.03)
    assert nodes, "no ring drawn: the topology placeholder is shown instead"
    ring = expected["ring_data_order"]
    start = nodes.index(ring[0])
    assert nodes[start:] + nodes[:start] == ring
    assert sorted(map(tuple, edges)) == sorted((e["src"], e["dst"]) for e in expected["ring_edges"])


def test_unsure_case_says_so_in_chromium(tmp_path):
    """A real capture the analyzer cannot be sure of (fixtures/real-training/ddp-lossy-rto: DDP over a lossy
    link whose retransmission timeouts are as long as the forward pass, read at 10 ms bins, where they split every
    step): the report's verdict must say it is unsure and why before any number, and mark the bytes per iteration
    as a guess."""
    require_chromium()
    from analyze.api import analyze
    from reports.html import write_html

    result = analyze([EXAMPLE.parent / "real-training" / "ddp-lossy-rto" / "run"], workers=1, bin_ns=10_000_000)
    assert result.iterations is not None and result.iterations.confident is False
    out = tmp_path / "unsure.html"
    write_html(result, out, title="ringscope report — unsure")
    with Page() as page:
        _open(page, out)
        verdict = page.evaluate("document.getElementById('verdict').innerText")
        cards = page.evaluate(
            "Object.fromEntries(Array.from(document.querySelectorAll('#verdict .number'))"
            ".map(function (c) { return [c.dataset.key, c.innerText]; }))"
        )
        iterations = page.evaluate("document.getElementById('iterations').innerText")
        page.screenshot(ARTIFACTS / "report-unsure.png")
        errors = page.errors()
    assert errors == []
    assert verdict.split("\n", 1)[1].lstrip().startswith("Unsure"), verdict[:300]  # first, under the heading
    assert "UNSURE" in verdict and "--iterations N" in verdict and "--gradient-bytes S" in verdict
    assert "network is the bottleneck:" not in verdict.split("if those inferences are right")[0]
    assert "a guess" in cards["bytes_per_iteration"] and "a guess" in cards["scaling_factor"]
    assert "UNSURE" in iterations


def test_transport_section_in_chromium(tmp_path):
    """The committed lossy DDP capture (a tbf queue that overflows): the report's transport section names loss,
    lists the ring's edges with their re-sent share, and draws each edge's rate, bytes in flight against its
    window, round trips and re-sent bytes; from the saved JSON too (its series travel in the JSON)."""
    from typer.testing import CliRunner

    from cli import app

    require_chromium()
    run = Path(__file__).resolve().parents[2] / "fixtures" / "real-training" / "ddp-lossy-rto" / "run"
    html, saved = tmp_path / "lossy.html", tmp_path / "lossy.json"
    r = CliRunner().invoke(app, ["analyze", str(run), "--html", str(html), "--json", str(saved)])
    assert r.exit_code == 0, r.output
    from_json = tmp_path / "from-json.html"
    r = CliRunner().invoke(app, ["report", str(saved), "-o", str(from_json)])
    assert r.exit_code == 0, r.output
    from analyze.model.result import Result

    transport = Result.from_json(json.loads(saved.read_text())).transport
    assert transport is not None
    ring = [x for x in transport.edges if x.limiter]
    for path in (html, from_json):
        with Page() as page:
            _open(page, path)
            limiter = page.evaluate("document.querySelector('#transport .verdict-head').dataset.limiter")
            rows = page.evaluate(
                "Array.from(document.querySelectorAll('table.transport tbody tr')).map(function (r) {"
                " return [r.cells[0].innerText, r.cells[1].innerText, r.cells[4].innerText]; })"
            )
            figures = {f["id"]: f for f in page.evaluate(FIGURES_JS)}
            page.evaluate("document.getElementById('transport').scrollIntoView()")
            page.screenshot(ARTIFACTS / f"report-transport-{path.stem}.png")
            errors = page.errors()
        assert errors == [], errors
        assert limiter == "loss"
        assert [(row[0], row[1]) for row in rows[: len(ring)]] == [(f"{x.src} → {x.dst}", "loss") for x in ring]
        assert [row[2] for row in rows[: len(ring)]] == [f"{x.retransmitted_fraction:.2%}" for x in ring]
        for fig in ("fig-transport-rate", "fig-transport-rtt", "fig-transport-resent"):
            assert figures[fig]["traces"] == len(ring) and all(p > 0 for p in figures[fig]["points"]), figures
        # bytes in flight, and each edge's mean advertised window beside them
        assert figures["fig-transport-inflight"]["traces"] == 2 * len(ring), figures


def test_rdma_section_in_chromium(tmp_path):
    """A RoCEv2 ring with congestion on one edge (tests/support/rocegen.py): the transport section names
    congestion, its RDMA table lists each ring edge with its QPs and CNPs, and chromium draws one rate line per
    queue pair, the CNPs and the NAK on the events chart, and the ACK round trips; from the saved JSON too."""
    from typer.testing import CliRunner

    from analyze.model.result import Result
    from cli import app
    from tests.support import rocegen as R

    require_chromium()
    spec = R.RoceRing(hosts=3, iterations=3, losses=(R.Loss(0, 1, 0, 12),), congestion=(R.Congestion(1, -1, -1),))
    run = R.write_run(tmp_path / "run", R.generate(spec))
    html, saved = tmp_path / "rdma.html", tmp_path / "rdma.json"
    r = CliRunner().invoke(app, ["analyze", str(run), "--bin", "1ms", "--html", str(html), "--json", str(saved)])
    assert r.exit_code == 0, r.output
    from_json = tmp_path / "from-json.html"
    assert CliRunner().invoke(app, ["report", str(saved), "-o", str(from_json)]).exit_code == 0
    rdma = Result.from_json(json.loads(saved.read_text())).rdma
    assert rdma is not None and rdma.limiter == "congestion"
    ring = [x for x in rdma.edges if x.limiter]
    assert len(ring) == spec.hosts
    for path in (html, from_json):
        with Page() as page:
            _open(page, path)
            limiter = page.evaluate("document.querySelector('#transport .verdict-head').dataset.limiter")
            rows = page.evaluate(
                "Array.from(document.querySelectorAll('table.rdma tbody tr')).map(function (r) {"
                " return [r.cells[0].innerText, r.cells[1].innerText, r.cells[3].innerText, r.cells[8].innerText]; })"
            )
            figures = {f["id"]: f for f in page.evaluate(FIGURES_JS)}
            page.evaluate("document.getElementById('transport').scrollIntoView()")
            page.screenshot(ARTIFACTS / f"report-rdma-{path.stem}.png")
            errors = page.errors()
        assert errors == [], errors
        assert limiter == "congestion"
        assert [tuple(row) for row in rows[: len(ring)]] == [
            (f"{x.src} → {x.dst}", x.limiter, str(len(x.qps)), f"{x.cnps:,}") for x in ring
        ]
        assert figures["fig-rdma-qp-rate"]["traces"] == spec.hosts * spec.qps_per_edge, figures
        # CNPs on the congested edge's sender, the NAK and the go-back on node0's: three rows of instants
        assert figures["fig-rdma-events"]["traces"] == 3 and sum(figures["fig-rdma-events"]["points"]) >= 4
        assert figures["fig-rdma-ack-rtt"]["traces"] == spec.hosts


def test_many_hosts_report_draws_the_spread_and_a_few_hosts(tmp_path, monkeypatch):
    """A 64-host ring (synthetic, one capture per host): the report draws the hosts' spread and six hosts in full,
    the two that sent least and most (by the generator's own counts) among them, or the host asked for with --host;
    the page opens without errors and every band is ordered (p5 <= median <= p95 <= busiest). The ring is drawn
    as dots, its order named at both ends; a per-host table longer than its limit (16 here, to keep the test
    small) shows the hosts that sent most and least."""
    require_chromium()
    import reports.html

    monkeypatch.setattr(reports.html, "TABLE_ROWS", 16)
    from typer.testing import CliRunner

    from cli import app
    from reports.host_spread import SHOWN_HOSTS
    from tests.benchmarks.synth import host_ip, ring_capture

    hosts = 64
    sent = {}
    for me in range(1, hosts + 1):
        truth = ring_capture(tmp_path / f"host{me}.pcap", packets=2_000, hosts=hosts, me=me, seed=me)
        sent[f"host{me}"] = int(truth.ip_bytes[[s == host_ip(me) for s in truth.src]].sum())
    by_sent = sorted(sent, key=lambda h: (sent[h], h))
    out, asked = tmp_path / "many.html", tmp_path / "asked.html"
    for path, extra in ((out, []), (asked, ["--host", "host7"])):
        r = CliRunner().invoke(app, ["report", str(tmp_path), "-o", str(path), *extra])
        assert r.exit_code == 0, r.output
    drawn_js = """Object.fromEntries(Array.from(document.querySelectorAll('.js-plotly-plot')).map(function (d) {
      return [d.id, d._fullData.map(function (t) { return [t.name, Array.from(t.y || [])]; })]; }))"""
    with Page() as page:
        _open(page, out)
        figures = page.evaluate(drawn_js)
        table = page.evaluate(
            "Array.from(document.querySelectorAll('table.hosts tbody tr')).map(function (r) { return r.dataset.host; })"
        )
        nodes = page.evaluate("document.querySelectorAll('#topology svg.ring g.node').length")
        ring_text = page.evaluate("document.querySelector('#topology .ring-order').innerText")
        page.screenshot(ARTIFACTS / "report-many-hosts.png")
        errors = page.errors()
        _open(page, asked)
        asked_figures = page.evaluate(drawn_js)
    assert errors == []
    assert table == by_sent[::-1][:8] + by_sent[::-1][-8:], table
    assert nodes == hosts and f"… {hosts - 16} more …" in ring_text and ring_text.startswith("host1 → host64"), (
        ring_text
    )

    def rows(traces: list) -> list[str]:  # the hosts drawn in full: one "NAME tx" line each
        return [name[: -len(" tx")] for name, _ in traces if name.endswith(" tx")]

    detail = rows(figures["fig-utilization"])
    assert len(detail) == SHOWN_HOSTS and {by_sent[0], by_sent[-1]} <= set(detail), (detail, by_sent[:2])
    assert rows(asked_figures["fig-utilization"]) == ["host7"]
    assert [n for n, _ in asked_figures["fig-iter-bytes"]][-1] == "host7"
    for fig in ("fig-utilization-spread", "fig-iter-bytes"):
        lines = {}
        for name, y in figures[fig]:
            lines.setdefault(name, []).append(np.array(y, dtype=np.float64))
        p95, p5 = lines["p95"], lines["5th-95th percentile of the hosts"]
        for low, mid, high, top in zip(p5, lines["median host"], p95, lines["busiest host"]):
            assert np.all(low <= mid + 1e-6) and np.all(mid <= high + 1e-6) and np.all(high <= top + 1e-6), fig

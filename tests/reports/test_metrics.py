"""Prometheus metrics from a finished analysis (`analyze --metrics FILE.prom`) and from the live view's endpoint
(`capture top --metrics`), checked by Prometheus's own linter (promtool) and read back by an independent parser
(prometheus_client's, strict OpenMetrics too); the numbers against the synthetic example's ground truth and bytes
dpkt counts in its pcaps."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from reports.metrics import Family, render
from tests.support.pcap_bytes import ip_bytes
from tests.support.requirements import require, require_module

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example"


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def _promtool(text: str) -> None:
    require(shutil.which("promtool") is not None, "needs promtool (apt-get install prometheus)")
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _samples(text: str, openmetrics: bool = False) -> dict[tuple[str, tuple], float]:
    """Every sample of an exposition, parsed by prometheus_client (strict for OpenMetrics), by name and labels."""
    require_module("prometheus_client")
    if openmetrics:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    else:
        from prometheus_client.parser import text_string_to_metric_families
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= set(ls)]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_an_analysis_as_a_textfile(tmp_path):
    """`analyze --metrics` on the example (10 iterations of a 4-host ring at 1 Gbit/s): promtool accepts it, and
    each host's bytes are dpkt's count, the iterations and their length the generator's."""
    out = tmp_path / "ringscope.prom"
    done = _cli("analyze", str(EXAMPLE), "--metrics", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stderr
    text = out.read_text()
    _promtool(text)
    samples = _samples(text)
    truth = json.loads((EXAMPLE / "expected.json").read_text())
    for name, host in truth["hosts"].items():
        sent = ip_bytes(EXAMPLE / name / "eth0.pcap", host["address"])
        assert sent == host["tx_ip_bytes"]
        assert _value(samples, "ringscope_host_transmit_bytes_total", node=name) == sent
        assert _value(samples, "ringscope_host_link_speed_bytes_per_second", node=name) == truth["link_speed_bps"] / 8
        assert 0 < _value(samples, "ringscope_host_utilization_ratio", node=name, direction="tx") < 1
    assert _value(samples, "ringscope_iterations", comm_name="job 1") == truth["iterations"]
    assert _value(samples, "ringscope_iterations", comm_name="job 1", nranks="4", n_nodes="4") == truth["iterations"]
    windows = truth["iteration_windows"]
    mean_s = (windows[-1]["end_ns"] - windows[0]["start_ns"]) / len(windows) / 1e9
    assert _value(samples, "ringscope_iteration_duration_seconds", comm_name="job 1") == pytest.approx(mean_s, rel=0.01)
    edges = {(dict(ls)["node"], dict(ls)["peer"]) for (n, ls) in samples if n == "ringscope_edge_transmit_bytes_total"}
    assert edges == {(e["src"], e["dst"]) for e in truth["ring_edges"]}  # the ring's edges, no control pairs
    assert 0 < _value(samples, "ringscope_whatif_scaling_factor_ratio", comm_name="job 1") < 1
    assert _value(samples, "ringscope_limiter_info", comm_name="job 1") == 1
    start = _value(samples, "ringscope_capture_start_timestamp_seconds")
    assert start == pytest.approx(json.loads((EXAMPLE / "run.json").read_text())["start_ns"] / 1e9)
    # OpenMetrics: the same samples through the strict parser
    from analyze.api import analyze
    from reports.metrics import analysis_families

    families = analysis_families(analyze([EXAMPLE]))
    assert _samples(render(families, openmetrics=True), openmetrics=True) == samples


def test_labels_are_escaped_and_empty_families_left_out():
    f = Family("host_transmit_bytes", "counter", 'bytes "sent"\nby a host \\ here')
    f.add(5, node='h"1\\\n')
    f.add(None, node="h2")  # not known: no sample
    text = render([f, Family("nothing", "gauge", "no samples")])
    assert "ringscope_nothing" not in text
    assert _samples(text) == {("ringscope_host_transmit_bytes_total", (("node", 'h"1\\\n'),)): 5.0}
    _promtool(text)


def test_the_live_endpoint_serves_both_formats(tmp_path):
    """`capture top --metrics` on the example's folders: /metrics in the text format (promtool accepts it) and in
    OpenMetrics when the scraper asks, the iterations from the markers, other paths 404."""
    port = 19000 + int(time.time() * 1000) % 900
    top = subprocess.Popen(
        [sys.executable, "-m", "cli", "capture", "top", str(EXAMPLE), "--metrics", f"127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        text = ""
        for _ in range(200):  # the endpoint is up and has a poll
            time.sleep(0.1)
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
            if "ringscope_iterations" in text:
                break
        _promtool(text)
        samples = _samples(text)
        truth = json.loads((EXAMPLE / "expected.json").read_text())
        assert _value(samples, "ringscope_iterations", source="markers") == truth["iterations"]
        last = truth["iteration_windows"][-1]
        assert _value(samples, "ringscope_last_iteration_duration_seconds") == pytest.approx(
            (last["end_ns"] - last["start_ns"]) / 1e9, rel=1e-6
        )
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        with urllib.request.urlopen(request, timeout=2) as answer:
            assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
            assert _samples(answer.read().decode(), openmetrics=True) == samples
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
        assert missing.value.code == 404
    finally:
        top.terminate()
        top.wait(timeout=30)


@pytest.mark.parametrize(
    "args",
    [
        ["capture", "top", str(EXAMPLE), "--metrics", "localhost"],
        ["capture", "top", str(EXAMPLE), "--metrics", "127.0.0.1:99999"],
        ["capture", "run", "--out", "/tmp/rs-never", "--metrics", ":9464", "--", "true"],
    ],
)
def test_a_bad_metrics_option_is_one_line(args):
    done = _cli(*args, timeout=60)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ringscope: error:") and "--metrics" in lines[0], done.stderr


def test_the_live_limiter_is_the_analysis_limiter(monkeypatch):
    """The live view's limiter comes from the whole analysis run in a child process: on the example's folders, the
    same limiter as `analyze`, held unsure after the first analysis and as sure as `analyze` once a second agrees;
    closing ends a child still at work."""
    from analyze.live import limiter as live_limiter
    from analyze.api import analyze

    monkeypatch.setattr(live_limiter, "FIRST_S", 0.0)
    folders = sorted(p for p in EXAMPLE.iterdir() if (p / "meta.json").is_file())
    transport = analyze([EXAMPLE]).transport
    assert transport.confidence > live_limiter.CHANGED_CONFIDENCE  # else the two readings below cannot differ
    limiter = live_limiter.LiveLimiter(folders)
    try:
        deadline = time.monotonic() + 120
        while limiter.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        first = (transport.limiter, pytest.approx(live_limiter.CHANGED_CONFIDENCE))
        assert limiter.latest == first, limiter.latest
        monkeypatch.setattr(live_limiter, "SHARE", 0.0)
        limiter._next = 0.0  # the second analysis now
        while limiter.poll() == first and time.monotonic() < deadline:
            time.sleep(0.1)
        assert limiter.latest == (transport.limiter, pytest.approx(transport.confidence)), limiter.latest
    finally:
        limiter.close()
    dying = live_limiter.LiveLimiter(folders)  # a child killed mid-analysis: no answer, no error
    dying._next = 0.0
    dying.poll()
    assert dying._child is not None
    dying._child[0].kill()
    dying._child[0].join()
    assert dying.poll() is None and dying._child is None
    busy = live_limiter.LiveLimiter(folders)
    monkeypatch.setattr(live_limiter, "EVERY_S", 0.0)
    busy._next = 0.0
    busy.poll()  # a child starts
    started = time.monotonic()
    busy.close()
    assert time.monotonic() - started < 10 and busy._child is None


def test_the_live_view_states_a_limiter_only_as_surely_as_two_analyses_agree():
    from analyze.live.limiter import CHANGED_CONFIDENCE, agreed

    assert agreed(None, ("link", 0.9)) == ("link", CHANGED_CONFIDENCE)  # the first reading
    assert agreed(("link", 0.8), ("link", 0.95)) == ("link", 0.8)
    assert agreed(("link", 0.95), ("link", 0.85)) == ("link", 0.85)
    assert agreed(("sender", 1.0), ("link", 0.9)) == ("link", CHANGED_CONFIDENCE)  # a changed reading
    assert agreed(("sender", 1.0), ("link", 0.3)) == ("link", 0.3)


def test_each_job_of_a_capture_gets_its_own_series():
    """A capture of several jobs: per job (comm_name job 1, job 2) its iterations, nodes, ranks and limiter, from
    each job's part of the document; the hosts' families once for the capture."""
    from analyze.api import analyze
    from analyze.model.result import Result
    from reports.metrics import analysis_families

    doc = analyze([EXAMPLE]).to_json()
    part = {k: doc[k] for k in ("iterations", "transport", "scaling", "stragglers")}
    second = json.loads(json.dumps(part))
    second["iterations"]["count"], second["transport"]["limiter"] = 7, "loss"
    doc["jobs"] = [
        {"name": "job 1", "hosts": ["h1", "h2", "h3", "h4"], "world_size": 4, **part},
        {"name": "job 2", "hosts": ["h1", "h2"], "world_size": 2, **second},
    ]
    samples = _samples(render(analysis_families(Result.from_json(doc))))
    assert _value(samples, "ringscope_iterations", comm_name="job 1", n_nodes="4", nranks="4") == 10
    assert _value(samples, "ringscope_iterations", comm_name="job 2", n_nodes="2", nranks="2") == 7
    assert _value(samples, "ringscope_limiter_info", comm_name="job 2", limiter="loss") == 1
    # below CONFIDENT the limiter is "unsure" (an alert on limiter="loss" must not fire on a guess), its reading kept
    second["transport"]["confidence"] = 0.5
    unsure = _samples(render(analysis_families(Result.from_json(doc))))
    assert _value(unsure, "ringscope_limiter_info", comm_name="job 2", limiter="unsure", reading="loss") == 1
    assert len([1 for (n, _) in samples if n == "ringscope_host_transmit_bytes_total"]) == 4

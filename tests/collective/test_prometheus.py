"""The monitoring stack, for real: a Prometheus server (Debian's package, its configuration written here) scrapes
`capture run --live --metrics` while a DDP ring trains in network namespaces (4 hosts at 1 Gbit/s, the capture
agents started by `ip netns exec`), and node_exporter's textfile collector serves `analyze --metrics` of the
gathered run. The truth is the analysis of the same run: per-host bytes and the iterations through PromQL within
5 %; every expression of the Grafana dashboard is accepted by this Prometheus and returns data, from the live
view while the job trained or from the analysis after it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from analyze.api import analyze
from analyze.confidence.thresholds import CONFIDENT
from tests.support.netns import launch_argv, netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.prometheus import (
    SCRAPE_S,
    free_port,
    prometheus_scraping,
    require_prometheus,
    textfile_collector,
)
from tests.support.requirements import require_module

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "reports" / "dashboards" / "ringscope-grafana.json"
DDP = ["env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "capture.workloads.ddp_train"]
HOSTS, ITERS = 4, 80  # about 14 s of training: the live view's first analysis (at 5 s) lands inside it


class _Linted:
    """Fetches the live endpoint's text once it serves iterations, while the run goes on, and runs promtool on it."""

    def __init__(self, port: int) -> None:
        self.result: subprocess.CompletedProcess | None = None
        self._port = port
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for _ in range(600):
            time.sleep(0.1)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self._port}/metrics", timeout=2) as answer:
                    text = answer.read().decode()
            except OSError:
                continue
            if "ringscope_host_transmit_bytes_total" in text:
                lint = ["promtool", "check", "metrics"]
                self.result = subprocess.run(lint, input=text, capture_output=True, text=True)
                return

    def wait(self) -> subprocess.CompletedProcess | None:
        self._thread.join(timeout=5)
        return self.result


def test_prometheus_scrapes_the_live_view_and_the_analysis(tmp_path, netns_cluster):  # noqa: F811
    require_prometheus()
    require_module("torch")
    cluster = netns_cluster(HOSTS, rate="1gbit")
    hosts = cluster.names
    top_port, files_port = free_port(), free_port()
    targets = {"ringscope-live": f"127.0.0.1:{top_port}", "ringscope-analysis": f"127.0.0.1:{files_port}"}
    with prometheus_scraping(tmp_path / "prometheus", targets) as prom:
        run = tmp_path / "run"
        linted = _Linted(top_port)
        training = [*DDP, "--params", "2500000", "--batch-size", "64", "--iters", str(ITERS)]
        done = subprocess.run(
            [sys.executable, "-m", "cli", "capture", "run", "--out", str(run), "--hosts", ",".join(hosts)]
            + ["--remote-shell", "ip netns exec {host}", "--live", "--metrics", f"127.0.0.1:{top_port}", "--"]
            + launch_argv(hosts, training),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        checked = linted.wait()  # the live endpoint's text, mid-run, passes Prometheus's own linter
        assert checked is not None and checked.returncode == 0, checked
        trained = json.loads((run / "run.json").read_text())["training"]
        during = (trained["start_ns"] + trained["end_ns"]) / 2e9
        result = analyze([run], workers=1)
        its = result.iterations
        assert its.count == ITERS and its.confident, (its.count, its.confidence)  # the markers' count
        # scraped while training ran: every host's byte counter had samples inside the training's window
        window = prom.api(
            "query_range",
            query='ringscope_host_transmit_bytes_total{job="ringscope-live"}',
            start=trained["start_ns"] / 1e9,
            end=trained["end_ns"] / 1e9,
            step=1,
        )
        assert window["status"] == "success" and len(window["data"]["result"]) == HOSTS, window
        # the last values scraped (the view stays until a scrape has fetched its last poll): PromQL against the
        # analysis of the gathered run; last_over_time reads past the staleness marked when the view stopped
        live = prom.last_values('ringscope_iterations{job="ringscope-live"}', "comm_name")
        source = prom.values('last_over_time(ringscope_iterations{job="ringscope-live"}[5m])', "source")
        sure = prom.last_values('ringscope_iterations_confidence_ratio{job="ringscope-live"}', "comm_name")
        print("live iterations", live, source, sure, "offline", its.count)
        # within 5 %, or stated unsure: never confidently wrong. Each from the series scraped last: the count's source
        # label changes from traffic to markers as the markers arrive, and the earlier series stays in the window
        # (two runs read 6 of 80, the traffic's early count, where a dict by job kept that series)
        right = abs(live["job 1"] / its.count - 1) <= 0.05
        assert right or sure.get("job 1", 1.0) < CONFIDENT, (live, source, sure, its.count)
        sent = prom.values('last_over_time(ringscope_host_transmit_bytes_total{job="ringscope-live"}[5m])', "node")
        for host in result.hosts:
            assert abs(sent[host.name] / host.tx_bytes - 1) <= 0.05, (host.name, sent[host.name], host.tx_bytes)
        # the live limiter, from analyses of the capture so far: what it stated as fact is what the whole run's
        # analysis reads, and where it could not tell it said unsure (issue 45: a fresh 2-core machine read
        # "sender" live against "link" at 0.73-0.74 offline); where the whole run is sure of its reading, that
        # reading is among the live ones. Not where it is unsure: three runs on 2026-11-29 read "link" at
        # 0.749-0.763 offline, and one of them "sender" in each of its (unsure) live readings
        limiters = prom.values('last_over_time(ringscope_limiter_info{job="ringscope-live"}[5m])', "limiter")
        readings = prom.values('last_over_time(ringscope_limiter_info{job="ringscope-live"}[5m])', "reading")
        print("live", limiters, readings, "offline", result.transport.limiter, result.transport.confidence)
        assert set(limiters) - {"unsure"} <= {result.transport.limiter}, (limiters, result.transport)
        if result.transport.confidence >= CONFIDENT:
            assert result.transport.limiter in readings, (readings, result.transport.limiter)
        # the finished analysis through node_exporter's textfile collector
        with textfile_collector(tmp_path / "textfile", files_port) as folder:
            analyzed = subprocess.run(
                [sys.executable, "-m", "cli", "analyze", str(run), "--metrics", str(folder / "ringscope.prom")],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert analyzed.returncode == 0, analyzed.stderr
            found = {}
            for _ in range(40):
                found = prom.values('ringscope_iterations{job="ringscope-analysis"}', "comm_name")
                if found:
                    break
                time.sleep(0.5)
            assert found == {"job 1": float(its.count)}, found
            time.sleep(3 * SCRAPE_S)  # a rate() over the textfile's counters needs two scrapes of it
            for panel in json.loads(DASHBOARD.read_text())["panels"]:
                for target in panel["targets"]:
                    expr = target["expr"]
                    answers = [prom.api("query", query=expr, time=t) for t in (during, time.time())]
                    assert all(a["status"] == "success" for a in answers), (expr, answers)
                    assert any(a["data"]["result"] for a in answers), (panel["title"], expr)

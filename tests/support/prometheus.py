"""A real Prometheus server (Debian's `prometheus` package) and node_exporter's textfile collector for tests: each
started on a free loopback port with its configuration written by the test, queried over Prometheus's HTTP API,
stopped (and its data removed with the test's folder) whatever happens."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from tests.support.requirements import require

NODE_EXPORTER = "prometheus-node-exporter"  # Debian's name for node_exporter
SCRAPE_S = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_prometheus() -> None:
    for program in ("prometheus", "promtool", NODE_EXPORTER):
        require(shutil.which(program) is not None, f"needs {program} (apt-get install prometheus {NODE_EXPORTER})")


def _wait_http(url: str, name: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout_s} s: {log.read_text()[-2000:]}")


@contextmanager
def _started(argv: list[str], ready_url: str, log: Path) -> Iterator[None]:
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_http(ready_url, argv[0], proc, log)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Prometheus:
    """A running server: its port and queries through its HTTP API."""

    def __init__(self, port: int) -> None:
        self.port = port

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/PATH; the parsed answer (status and data, or errorType and error for a bad query)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:  # a bad query: 400 with the error in the body
            return json.loads(error.read())

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector EXPR gives now; AssertionError where Prometheus refuses the query."""
        answer = self.api("query", query=expr)
        assert answer.get("status") == "success", (expr, answer)
        return list(answer["data"]["result"])

    def values(self, expr: str, label: str) -> dict[str, float]:
        """EXPR's samples now, by the value of LABEL."""
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(expr)}

    def last_values(self, selector: str, label: str, window: str = "5m") -> dict[str, float]:
        """SELECTOR's last value in WINDOW by the value of LABEL, each from the series scraped last. A label that
        changed during the run leaves its earlier series in the window (the live view's count came from the
        traffic, then from the markers: last_over_time gave 6 and 80 for one job, and a dict by LABEL kept either)."""

        def key(metric: dict[str, str]) -> tuple[tuple[str, str], ...]:
            return tuple(sorted((k, v) for k, v in metric.items() if k != "__name__"))

        when = {
            key(r["metric"]): float(r["value"][1])
            for r in self.query(f"last_over_time(timestamp({selector})[{window}:1s])")
        }
        out: dict[str, float] = {}
        latest: dict[str, float] = {}
        for r in self.query(f"last_over_time({selector}[{window}])"):
            name, at = r["metric"].get(label, ""), when.get(key(r["metric"]), 0.0)
            if name not in latest or at > latest[name]:
                out[name], latest[name] = float(r["value"][1]), at
        return out


@contextmanager
def prometheus_scraping(folder: Path, targets: dict[str, str]) -> Iterator[Prometheus]:
    """A Prometheus server scraping TARGETS ({job name: host:port}) every SCRAPE_S seconds, its data in FOLDER."""
    require_prometheus()
    folder.mkdir(parents=True, exist_ok=True)
    jobs = [{"job_name": name, "static_configs": [{"targets": [target]}]} for name, target in targets.items()]
    config = folder / "prometheus.yml"  # JSON is YAML
    interval = f"{SCRAPE_S}s"
    scraping = {"scrape_interval": interval, "scrape_timeout": interval}
    config.write_text(json.dumps({"global": scraping, "scrape_configs": jobs}))
    port = free_port()
    argv = [
        "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with _started(argv, f"http://127.0.0.1:{port}/-/ready", folder / "prometheus.log"):
        yield Prometheus(port)


@contextmanager
def textfile_collector(folder: Path, port: int) -> Iterator[Path]:
    """node_exporter on PORT with only its textfile collector, reading *.prom files in FOLDER (yielded)."""
    require_prometheus()
    folder.mkdir(parents=True, exist_ok=True)
    argv = [
        NODE_EXPORTER,
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={folder}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with _started(argv, f"http://127.0.0.1:{port}/metrics", folder.parent / "node_exporter.log"):
        yield folder

"""`/metrics` over HTTP while a capture runs: the live view's latest poll, rendered when Prometheus scrapes.

Why rendered per scrape and not per poll: a poll comes every second, a scrape every 15 s or so; the families are
kept as the poll left them and written out only when asked (a 16-host poll renders in well under a millisecond).
Why a thread of the live view's own process: the view already reads the capture folders, so serving costs the
training hosts nothing, and the endpoint lives exactly as long as the view.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from analyze.live.now import Now
from capture.units import parse_listen_address
from reports.metrics import OPENMETRICS_TYPE, TEXT_TYPE, live_families, render, wants_openmetrics

PATH = "/metrics"
# After the last poll the endpoint stays until a scrape has fetched it, at most this long: Prometheus's default
# interval is 15 s, so a run's last seconds still reach it (`capture run` waits for the view that long too)
LINGER_S = 20.0


class MetricsEndpoint:
    """An HTTP server on ADDRESS serving the last published poll at /metrics, in the text format or, when the
    scraper's Accept asks for it, in OpenMetrics. OSError (one line) when the address cannot be bound."""

    def __init__(self, address: str) -> None:
        host, port = parse_listen_address(address)
        self._now: Optional[Now] = None
        self._lock = threading.Lock()
        self._last = False  # the published poll is the last one
        self._last_fetched = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802  (the http.server hook's name)
                if self.path.split("?")[0] != PATH:
                    self.send_error(404, f"only {PATH} is served here")
                    return
                openmetrics = wants_openmetrics(self.headers.get("Accept"))
                body, last = endpoint.text(openmetrics)
                self.send_response(200)
                self.send_header("Content-Type", OPENMETRICS_TYPE if openmetrics else TEXT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                if last:
                    endpoint._last_fetched.set()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the hook's signature)
                pass  # a scrape every few seconds is not news; the view's output stays the view's

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise OSError(f"--metrics {address}: cannot listen there ({exc.strerror or exc})") from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def publish(self, now: Now, last: bool = False) -> None:
        """Keep NOW as what the next scrape gets (LAST: the view's last poll, which close() waits to be fetched)."""
        with self._lock:
            self._now, self._last = now, last

    def text(self, openmetrics: bool = False) -> tuple[bytes, bool]:
        """The exposition of the last published poll (empty before the first), and whether that is the last."""
        with self._lock:
            now, last = self._now, self._last
        return render(live_families(now) if now is not None else [], openmetrics).encode(), last

    def close(self, linger_s: float = 0.0) -> None:
        """Stop serving: where the last poll was published, once a scrape fetched it or LINGER_S passed."""
        if self._last:
            self._last_fetched.wait(linger_s)
        self._server.shutdown()
        self._server.server_close()

"""Drive Debian's headless Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe).

No Python package beyond the standard library and no downloaded browser: the only requirement is the
`chromium` binary (apt-get install chromium). The browser is launched with networking shut off
(--disable-background-networking etc., a proxy that goes nowhere, and the Network domain's offline mode),
and every request the page makes is recorded, as are console messages, exceptions and JavaScript dialogs
(which are dismissed so a stray alert() cannot hang the page).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> Optional[str]:
    env = os.environ.get("RINGSCOPE_CHROMIUM")
    if env:
        return env
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Page:
    """One headless Chromium with one tab; use as a context manager."""

    def __init__(self, chromium: Optional[str] = None, width: int = 1280, height: int = 900, timeout_s: float = 60):
        self.chromium = chromium or find_chromium()
        if not self.chromium:
            raise BrowserError("no chromium binary found")
        self.width, self.height, self.timeout_s = width, height, timeout_s
        self.console: list[dict[str, Any]] = []
        self.exceptions: list[str] = []
        self.requests: list[str] = []
        self.failed_requests: list[str] = []
        self.dialogs: list[str] = []
        self.log_entries: list[dict[str, Any]] = []
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []
        self.session: Optional[str] = None

    # ---- process and pipe ----

    def __enter__(self) -> "Page":
        self._profile = tempfile.mkdtemp(prefix="ringscope-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def child_fds() -> None:  # the protocol pipe is fds 3 (browser reads) and 4 (browser writes)
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [
            self.chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--no-default-browser-check",
            "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication",
            "--proxy-server=http://127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            "--allow-file-access-from-files",
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile}",
            f"--window-size={self.width},{self.height}",
            "about:blank",
        ]
        self._log = open(Path(self._profile) / "stderr.log", "wb")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, preexec_fn=child_fds, close_fds=False
        )  # our fds are non-inheritable (PEP 446)
        os.close(to_child_r)
        os.close(from_child_w)
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)[
            "sessionId"
        ]
        for method in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.call(method)
        self.call(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        )
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
        )
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call("Browser.close", session=False, timeout_s=5)
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def stderr(self) -> str:
        try:
            return (Path(self._profile) / "stderr.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def _send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\0"
        while data:
            n = os.write(self._to_child, data)
            data = data[n:]

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.time()
            if left <= 0:
                raise BrowserError("timed out waiting for the browser")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise BrowserError(f"the browser closed the protocol pipe; stderr: {self.stderr()}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        method, p = msg.get("method"), msg.get("params") or {}
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            self.console.append({"type": p.get("type"), "text": text})
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails") or {}
            self.exceptions.append(str((d.get("exception") or {}).get("description") or d.get("text")))
        elif method == "Log.entryAdded":
            self.log_entries.append(p.get("entry") or {})
        elif method == "Network.requestWillBeSent":
            self.requests.append((p.get("request") or {}).get("url", ""))
        elif method == "Network.loadingFailed":
            self.failed_requests.append(str(p.get("errorText")))
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(f"{p.get('type')}: {p.get('message')}")
            self._send(
                {
                    "id": self._new_id(),
                    "method": "Page.handleJavaScriptDialog",
                    "params": {"accept": False},
                    "sessionId": self.session,
                }
            )
        self._events.append(msg)

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def call(
        self,
        method: str,
        params: Optional[dict[str, Any]] = None,
        *,
        session: bool = True,
        timeout_s: Optional[float] = None,
    ) -> dict[str, Any]:
        """Send a command and wait for its answer, recording events that arrive meanwhile."""
        mid = self._new_id()
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        self._send(msg)
        deadline = time.time() + (timeout_s or self.timeout_s)
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == mid:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result") or {}
            if "method" in reply:
                self._dispatch(reply)

    # ---- page helpers ----

    def goto(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self._events.clear()
        self.call("Page.navigate", {"url": url})
        self.wait_for_event("Page.loadEventFired")

    def wait_for_event(self, method: str) -> dict[str, Any]:
        deadline = time.time() + self.timeout_s
        seen = next((m for m in self._events if m.get("method") == method), None)
        while seen is None:
            msg = self._read_message(deadline)
            if "method" in msg:
                self._dispatch(msg)
                if msg["method"] == method:
                    seen = msg
        return seen

    def color_scheme(self, scheme: str) -> None:
        """Emulate prefers-color-scheme: 'light' or 'dark' (reload the page to re-run its scripts)."""
        self.call("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})

    def evaluate(self, expression: str) -> Any:
        """Run JavaScript in the page; returns the value (JSON-serializable results only)."""
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if r.get("exceptionDetails"):
            raise BrowserError(f"evaluate failed: {r['exceptionDetails']}")
        return (r.get("result") or {}).get("value")

    def wait_for(self, expression: str, timeout_s: Optional[float] = None) -> Any:
        """Poll a JavaScript expression until it is truthy."""
        deadline = time.time() + (timeout_s or self.timeout_s)
        while time.time() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise BrowserError(f"timed out waiting for {expression!r}")

    def screenshot(self, path: Path, full_page: bool = True, clip: Optional[tuple[int, int, int, int]] = None) -> Path:
        """PNG of the page (the whole document when full_page; only x, y, width, height of it with clip)."""
        if full_page:
            height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)") or self.height)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": self.width, "height": min(height, 16000), "deviceScaleFactor": 1, "mobile": False},
            )
            time.sleep(0.3)
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": False}
        if clip:
            params["clip"] = dict(zip(("x", "y", "width", "height"), clip), scale=1)
        data = self.call("Page.captureScreenshot", params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        if full_page:
            self.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
            )
        return path

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors seen so far."""
        out = [f"console.{c['type']}: {c['text']}" for c in self.console if c.get("type") in ("error", "assert")]
        out += [f"exception: {x}" for x in self.exceptions]
        out += [
            f"log {e.get('source')}: {e.get('text')} {e.get('url', '')}"
            for e in self.log_entries
            if e.get("level") == "error"
        ]
        return out

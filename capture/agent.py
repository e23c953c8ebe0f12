"""The capture agent: one tcpdump sidecar per server, leaving a self-describing capture folder.

Lifecycle: check tcpdump and the interface, start tcpdump, wait until it prints "listening on",
write meta.json (status "capturing") and OUT/.ready, print READY_LINE, wait for a stop condition
(SIGINT/SIGTERM, --duration, --until-pid exiting, or stdin closing when run by `capture run`),
stop tcpdump, and rewrite meta.json with its counters (status "complete").
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from capture import clock, layout, netinfo, tcpdump
from capture.errors import CaptureError

READY_LINE = "ringscope-agent: ready"
DRAIN_S = 0.2  # let the last packets of the job reach tcpdump before it is stopped


@dataclass
class AgentOptions:
    """What `ringscope capture agent` was asked to do."""

    out: Path
    iface: str = "auto"
    snaplen: int = tcpdump.DEFAULT_SNAPLEN
    bpf: str | None = None
    rotate_bytes: int | None = None
    keep: int | None = None
    rotate_seconds: int | None = None
    duration_s: float | None = None
    until_pid: int | None = None
    link_speed_bps: int | None = None
    peers: list[str] = field(default_factory=list)
    host: str | None = None
    stop_on_stdin_eof: bool = False
    ready_timeout_s: float = 15.0


def _check(options: AgentOptions) -> None:
    if options.keep and not options.rotate_bytes:
        raise CaptureError("--keep N only applies with --rotate-size SIZE")
    if options.rotate_bytes and options.rotate_seconds:
        raise CaptureError("choose one of --rotate-size and --rotate-seconds")
    if options.duration_s is not None and options.until_pid is not None:
        raise CaptureError("choose one of --duration and --until-pid")
    if options.until_pid is not None and not _alive(options.until_pid):
        raise CaptureError(f"--until-pid {options.until_pid}: no such process")
    if options.snaplen < 0:
        raise CaptureError("--snaplen must be >= 0")


def _alive(pid: int) -> bool:
    """Whether PID still runs (a zombie waiting for its parent to reap it has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _wait_listening(proc, log_path: Path, iface: str, timeout_s: float) -> None:
    """Block until tcpdump says it is capturing; CaptureError with its own words if it exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if "listening on" in text:
            return
        if proc.poll() is not None:
            raise CaptureError(tcpdump.explain_failure(text, iface))
        time.sleep(0.01)
    proc.terminate()
    raise CaptureError(f"tcpdump did not start capturing on {iface} within {timeout_s:g} s")


class _StopWhen:
    """Collects the stop conditions; wait() returns the reason."""

    def __init__(self, options: AgentOptions, proc) -> None:
        self.options = options
        self.proc = proc
        self.reason: str | None = None
        self.event = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        if options.stop_on_stdin_eof:
            threading.Thread(target=self._watch_stdin, daemon=True).start()

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stop(signal.Signals(signum).name)

    def _watch_stdin(self) -> None:
        while sys.stdin.buffer.read1(4096):  # type: ignore[union-attr]  # stdin's buffer is a BufferedReader
            pass
        self.stop("stdin closed")

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.event.set()

    def wait(self, started: float) -> str:
        options = self.options
        while not self.event.wait(0.05):
            if options.duration_s is not None and time.monotonic() - started >= options.duration_s:
                self.stop("duration")
            elif options.until_pid is not None and not _alive(options.until_pid):
                self.stop(f"pid {options.until_pid} exited")
            elif self.proc.poll() is not None:
                self.stop("tcpdump exited")
        assert self.reason is not None  # stop() sets it before it sets the event
        return self.reason


def run_agent(options: AgentOptions, say=print) -> int:
    """Capture until told to stop; returns the exit code (0 when tcpdump stopped cleanly)."""
    _check(options)
    binary = tcpdump.find_tcpdump()
    iface = netinfo.choose_interface(options.iface, options.peers)
    out = options.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CaptureError(f"cannot create the capture folder {out}: {error.strerror}") from None
    (out / layout.READY_FILE).unlink(missing_ok=True)
    argv = tcpdump.command(
        binary, iface, out, options.snaplen, options.bpf, options.rotate_bytes, options.keep, options.rotate_seconds
    )
    meta = {
        "schema": layout.SCHEMA,
        "status": "starting",
        "host": options.host or socket.gethostname(),
        **netinfo.interface_info(iface, options.link_speed_bps),
        "snaplen": options.snaplen,
        "filter": options.bpf,
        **tcpdump.version(binary),
        "tcpdump_command": argv,
        "start_ns": None,
        "end_ns": None,
        "stop_reason": None,
        "counters": None,
        "tcpdump_exit_code": None,
        "files": [],
        "clock": clock.clock_info(),
    }
    log_path = out / "tcpdump.log"
    proc = tcpdump.start(argv, log_path)
    stop = _StopWhen(options, proc)
    try:
        _wait_listening(proc, log_path, iface, options.ready_timeout_s)
    except CaptureError:
        meta.update(status="failed", end_ns=time.time_ns(), tcpdump_exit_code=proc.poll())
        layout.write_json(out / layout.META_FILE, meta)
        raise
    meta.update(status="capturing", start_ns=time.time_ns())
    layout.write_json(out / layout.META_FILE, meta)
    (out / layout.READY_FILE).write_text(f"{proc.pid}\n")
    say(f"{READY_LINE} host={meta['host']} iface={iface} tcpdump_pid={proc.pid} out={out}", flush=True)

    reason = stop.wait(time.monotonic())
    if proc.poll() is None:
        time.sleep(DRAIN_S)
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    (out / layout.READY_FILE).unlink(missing_ok=True)
    counters = tcpdump.parse_counters(log_path.read_text(errors="replace"))
    clean = code == 0 and counters is not None
    meta.update(
        status="complete" if clean else "failed",
        end_ns=time.time_ns(),
        stop_reason=reason,
        counters=counters,
        tcpdump_exit_code=code,
        files=tcpdump.pcap_files(out, iface),
    )
    layout.write_json(out / layout.META_FILE, meta)
    say(f"ringscope-agent: stopped ({reason}) host={meta['host']} counters={json.dumps(counters)}", flush=True)
    if not clean:
        raise CaptureError(tcpdump.explain_failure(log_path.read_text(errors="replace"), iface))
    return 0

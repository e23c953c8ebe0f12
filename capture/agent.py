"""The capture agent: one tcpdump sidecar per server, leaving a self-describing capture folder.

Lifecycle: check tcpdump and the interface, start tcpdump, wait until it prints "listening on",
write meta.json (status "capturing") and OUT/.ready, print READY_LINE, wait for a stop condition
(SIGINT/SIGTERM, --duration, --until-pid exiting, or stdin closing when run by `capture run`),
stop tcpdump, and rewrite meta.json with its counters (status "complete").
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from capture import clock, headers_only, hints, layout, netinfo, tcpdump, written
from capture.errors import CaptureError

READY_LINE = "ringscope-agent: ready"
DRAIN_S = 0.2  # let the last packets of the job reach tcpdump before it is stopped
POLL_S = 0.05  # how often the agent looks at its stop conditions
SPACE_CHECK_S = 0.25  # how often the capture folder's free space is looked at (one statvfs)


@dataclass
class AgentOptions:
    """What `ringscope capture agent` was asked to do."""

    out: Path
    iface: str = "auto"
    snaplen: int | None = None  # None: each packet cut at the end of its headers (capture.headers_only)
    payload_bytes: int = 0  # payload bytes kept after the headers, on purpose
    bpf: str | None = None
    rotate_bytes: int | None = None
    keep: int | None = None
    rotate_seconds: int | None = None
    duration_s: float | None = None
    until_pid: int | None = None
    link_speed_bps: int | None = None
    peers: list[str] = field(default_factory=list)
    hints: hints.Hints = field(default_factory=hints.Hints)  # the training's interface/address settings
    host: str | None = None
    stop_on_stdin_eof: bool = False
    markers_template: str | None = None  # capture run's RINGSCOPE_MARKERS_DIR, with {host}
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
    if options.snaplen is not None and options.snaplen < 0:
        raise CaptureError("--snaplen must be >= 0")
    if options.payload_bytes < 0:
        raise CaptureError("--payload-bytes must be >= 0")


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
    """Collects the stop conditions; wait() returns the reason.

    No threading.Event: its set() takes a plain lock that the main thread may be holding inside wait() when
    the signal handler runs on that same thread, and the agent then hangs for ever on SIGTERM. A reason set
    once (one attribute store, atomic) and a polling loop cannot deadlock."""

    def __init__(self, options: AgentOptions, proc) -> None:
        self.options = options
        self.proc = proc
        self.reason: str | None = None
        self.low_space_bytes: int | None = None  # the least free space seen, once it fell below LOW_SPACE_BYTES
        self._space_checked = 0.0
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        if options.stop_on_stdin_eof:
            threading.Thread(target=self._watch_stdin, daemon=True).start()

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stop(signal.Signals(signum).name)

    def _watch_stdin(self) -> None:
        """Stop when `capture run` closes our stdin. os.read, not sys.stdin: a daemon thread blocked inside
        a buffered reader holds its lock when the interpreter exits, and Python then aborts
        (`Fatal Python error: _enter_buffered_busy`) instead of printing the agent's own error."""
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        self.stop("stdin closed")

    def _watch_space(self) -> None:
        """Note when the capture folder's filesystem is (nearly) full: tcpdump will not say so."""
        now = time.monotonic()
        if now - self._space_checked < SPACE_CHECK_S:
            return
        self._space_checked = now
        free = written.free_bytes(self.options.out)
        if free is not None and free < written.LOW_SPACE_BYTES:
            self.low_space_bytes = free if self.low_space_bytes is None else min(free, self.low_space_bytes)

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def wait(self, started: float) -> str:
        options = self.options
        while self.reason is None:
            time.sleep(POLL_S)
            self._watch_space()
            if options.duration_s is not None and time.monotonic() - started >= options.duration_s:
                self.stop("duration")
            elif options.until_pid is not None and not _alive(options.until_pid):
                self.stop(f"pid {options.until_pid} exited")
            elif self.proc.poll() is not None:
                self.stop("tcpdump exited")
        return str(self.reason)


def run_agent(options: AgentOptions, say=print) -> int:
    """Capture until told to stop; returns the exit code (0 when tcpdump stopped cleanly)."""
    _check(options)
    binary = tcpdump.find_tcpdump()
    iface, reason = netinfo.choose_interface(
        options.iface, options.peers, options.hints.add(hints.from_environment(dict(os.environ))), options.host
    )
    out = options.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CaptureError(f"cannot create the capture folder {out}: {error.strerror}") from None
    (out / layout.READY_FILE).unlink(missing_ok=True)
    program, cut_note = _header_cut(binary, iface, options)
    snaplen = options.snaplen or headers_only.LONGEST_HEADERS + options.payload_bytes
    user = tcpdump.drop_user(out, rotating=bool(options.rotate_bytes or options.rotate_seconds))

    def command(bpf: str | None) -> list[str]:
        return tcpdump.command(
            binary, iface, out, snaplen, bpf, options.rotate_bytes, options.keep, options.rotate_seconds, user
        )

    argv = command(headers_only.NOTHING if program else options.bpf)
    meta = {
        "schema": layout.SCHEMA,
        "status": "starting",
        "host": options.host or socket.gethostname(),
        **netinfo.interface_info(iface, options.link_speed_bps),
        "interface_reason": reason,
        layout.META_HOST_ADDRESSES: sorted(netinfo.local_addresses()),  # every interface's: whom the host is
        "snaplen": snaplen,
        "payload_bytes": options.payload_bytes,
        "payload_cut": None,
        "filter": options.bpf,
        **tcpdump.version(binary),
        "tcpdump_command": argv,
        "tcpdump_user": user,
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
    watchers = [tcpdump.guard(proc.pid)] if user not in (None, "root") else []
    stop = _StopWhen(options, proc)
    try:
        _wait_listening(proc, log_path, iface, options.ready_timeout_s)
        if program is not None:
            try:
                headers_only.attach(proc.pid, program)
                meta["payload_cut"] = f"kernel filter: headers + {options.payload_bytes} payload bytes"
            except OSError as error:  # not allowed here: tcpdump again, with the user's filter and a snaplen
                _end(proc)
                cut_note = f"the header cut could not be attached ({error}): payload bytes may be kept"
                argv = meta["tcpdump_command"] = command(options.bpf)
                proc = stop.proc = tcpdump.start(argv, log_path)
                watchers += [tcpdump.guard(proc.pid)] if watchers else []
                _wait_listening(proc, log_path, iface, options.ready_timeout_s)
        if meta["payload_cut"] is None:
            meta["payload_cut"] = f"snaplen {snaplen}" + (f" ({cut_note})" if cut_note else "")
    except CaptureError:
        for watcher in watchers:
            tcpdump.stop_guard(watcher)
        meta.update(status="failed", end_ns=time.time_ns(), tcpdump_exit_code=proc.poll())
        layout.write_json(out / layout.META_FILE, meta)
        raise
    meta.update(status="capturing", start_ns=time.time_ns())
    layout.write_json(out / layout.META_FILE, meta)
    alias = _markers_alias(options)
    (out / layout.READY_FILE).write_text(f"{proc.pid}\n")
    say(f"{READY_LINE} host={meta['host']} iface={iface} tcpdump_pid={proc.pid} out={out}", flush=True)

    reason = stop.wait(time.monotonic())
    return _stopped(stop, watchers, alias, meta, iface, reason, say)


def _stopped(
    stop: _StopWhen, watchers: list, alias: Path | None, meta: dict, iface: str, reason: str, say: Callable[..., object]
) -> int:
    """After the stop: tcpdump drained and ended, its counters and files in meta.json, and the capture's outcome:
    0 when clean, CaptureError naming what was lost or why tcpdump failed."""
    proc, options = stop.proc, stop.options
    out = options.out
    log_path = out / "tcpdump.log"
    if proc.poll() is None:
        time.sleep(DRAIN_S)
    code = _end(proc)
    for watcher in watchers:
        tcpdump.stop_guard(watcher)
    if alias is not None and alias.is_symlink():
        alias.unlink()
    (out / layout.READY_FILE).unlink(missing_ok=True)
    stop._watch_space()
    counters = tcpdump.parse_counters(log_path.read_text(errors="replace"))
    files = tcpdump.pcap_files(out, iface)
    lost = _lost(out, files, counters, options, stop.low_space_bytes)
    clean = code == 0 and counters is not None and lost is None
    meta.update(
        status="complete" if clean else "failed",
        end_ns=time.time_ns(),
        stop_reason=reason,
        counters=counters,
        tcpdump_exit_code=code,
        files=files,
        **(lost or {}),
    )
    try:
        layout.write_json(out / layout.META_FILE, meta)
    except OSError as error:  # the full disk that lost packets may have no room for meta.json either
        why = lost[layout.META_ERROR] + "; " if lost else ""
        raise CaptureError(f"{why}cannot write {out / layout.META_FILE}: {error.strerror or error}") from None
    say(f"ringscope-agent: stopped ({reason}) host={meta['host']} counters={json.dumps(counters)}", flush=True)
    if lost is not None:
        raise CaptureError(lost[layout.META_ERROR])
    if not clean:
        raise CaptureError(tcpdump.explain_failure(log_path.read_text(errors="replace"), iface))
    return 0


def _markers_alias(options: AgentOptions) -> Path | None:
    """Under `capture run`: a link from the markers folder named after this machine's own host name to ours.

    Why: ranks write markers to RINGSCOPE_MARKERS_DIR with {host} = RINGSCOPE_HOST or their host name, and
    the launcher rarely sets RINGSCOPE_HOST, so where the --hosts name (node7) is not the host name
    (node7.cluster, or an ssh alias) the markers would land in a folder nobody gathers. The first agent
    on a machine takes the name; the link is removed when the agent stops."""
    node = os.uname().nodename
    if not options.markers_template or not options.host or node == options.host:
        return None
    alias = Path(options.markers_template.replace("{host}", node))
    try:
        alias.symlink_to(options.out.resolve(), target_is_directory=True)
    except OSError:  # another agent on this machine has it, or the folder cannot hold it
        return None
    return alias


def _end(proc: subprocess.Popen) -> int:
    """Stop tcpdump (SIGTERM: it writes its counters and closes the file) and return its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _header_cut(binary: str, iface: str, options: AgentOptions) -> tuple[list | None, str | None]:
    """(the kernel program cutting each packet after its headers, or None; why not). A --snaplen given by
    hand is taken as asked."""
    if options.snaplen is not None:
        return None, "--snaplen given"
    if netinfo.rdma_device(iface):
        return None, "the RDMA sniffer has no socket to attach a filter to: payload bytes may be kept"
    try:
        linktype, user = headers_only.user_program(binary, iface, options.bpf)
        return headers_only.combined(user, headers_only.header_program(linktype, options.payload_bytes)), None
    except ValueError as error:  # a link type without a program, or a filter tcpdump refuses (it says so next)
        return None, f"{error}: payload bytes may be kept"


def _lost(
    out: Path, files: list[str], counters: dict | None, options: AgentOptions, low_space: int | None
) -> dict | None:
    """meta.json's account of packets tcpdump counted but did not write (None when every one was written).

    A --keep ring deletes its oldest files on purpose, so it is checked against free space only."""
    if counters is None:
        return None
    captured = int(counters["captured"])
    if options.keep:
        stored = captured
    else:
        stored = written.written_records(out, files)
    missing = captured - stored
    if missing <= 0:
        return None
    cause = f"disk full ({low_space} bytes free in {out})" if low_space is not None else "not written to disk"
    return {
        layout.META_WRITTEN_PACKETS: stored,
        layout.META_LOST_PACKETS: max(missing, 0),
        layout.META_ERROR: f"lost {max(missing, 0)} of {captured} packets: {cause}",
    }

"""`capture run`: an agent on every host, the training command in between, one capture directory after.

Each agent writes into a staging folder on its host (STAGE_NAME under --stage, e.g. /tmp/ringscope-ID-h1)
and stops when its stdin closes, which works through ssh as well as locally. Afterwards every host is
stopped and its folder streamed back as a tar through the same remote shell into RUN/<host>/, all hosts at
once, and the staging folder removed: also when a host failed, the training failed or the run was
interrupted, so nothing is left on any host and every capture that could be kept is.

Interrupts: SIGINT, SIGTERM and SIGHUP (the terminal or the ssh session to the launch node went away) go to
the training's whole process group (a shell script and every child it started), a second one or GRACE_S
without an exit kills that group, and the run still stops the agents, gathers the captures and records
"interrupted" in run.json; the exit code is 128 + the signal's number, as a shell reports it.

Markers: the training command gets RINGSCOPE_MARKERS_DIR=<staging template with {host}>; a rank
writes to that folder with {host} = RINGSCOPE_HOST or its hostname (capture.markers), i.e. into its
own host's agent folder. With a single host RINGSCOPE_HOST and RINGSCOPE_MARKERS are set directly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable
from pathlib import Path

from capture import layout
from capture.agent import READY_LINE
from capture.errors import CaptureError
from capture.health import health_check
from capture.remote import remote_argv

DEFAULT_STAGE = "/tmp"
STAGE_NAME = "ringscope-{run_id}-{host}"
GRACE_S = 10.0  # after an interrupt, how long the training may take to exit before its group is killed
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def default_agent_command() -> list[str]:
    """This Python and this checkout, which the hosts are assumed to share (as horovodrun does)."""
    return ["env", f"PYTHONPATH={PROJECT_ROOT}", sys.executable, "-m", "capture", "agent"]


@dataclass
class RunOptions:
    """What `ringscope capture run` was asked to do."""

    out: Path
    hosts: list[str]
    template: str  # resolved remote-shell template, or remote.LOCAL
    command: list[str]
    agent_args: list[str] = field(default_factory=list)  # passed through to every agent
    agent_command: list[str] = field(default_factory=default_agent_command)
    ready_timeout_s: float = 60.0
    stop_timeout_s: float = 60.0
    stage: str = DEFAULT_STAGE  # folder on every host under which the agents write while capturing
    live_command: list[str] | None = None  # run beside the training with the staging folders as arguments


LIVE_STOP_S = 10
METRICS_LINGER_S = 20  # a view serving metrics stays until a scrape fetched its last poll (reports.metrics_endpoint)


class _Agent:
    """One agent process (behind its remote shell) and what it printed."""

    def __init__(self, host: str, argv: list[str]) -> None:
        self.host = host
        self.ready = threading.Event()
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )  # its own session: a Ctrl-C at the terminal reaches `capture run`, which stops the agents in order
        self.readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read(self, stream, is_stdout: bool) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            if is_stdout and line.startswith(READY_LINE):
                self.ready.set()
            elif not is_stdout and line:
                self.stderr.append(line)

    def error(self) -> str:
        return (
            self.stderr[-1].removeprefix("ringscope: error: ")
            if self.stderr
            else f"agent exited with {self.proc.returncode}"
        )

    def stop(self, timeout_s: float) -> int:
        """Close stdin (the agent stops, through ssh too); terminate if it does not."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for reader in self.readers:
            reader.join(timeout=5)
        return self.proc.returncode


class _Signals:
    """SIGINT, SIGTERM and SIGHUP while a run is on: remembered, and passed to the training's process group."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.first: int | None = None
        self.count = 0
        self.training_group: int | None = None
        self._previous: dict[int, Any] = {}
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "_Signals":
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in self.HANDLED}
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self._timer is not None:
            self._timer.cancel()

    @property
    def name(self) -> str | None:
        return signal.Signals(self.first).name if self.first is not None else None

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.count += 1
        if self.first is None:
            self.first = signum
        self.forward()

    def forward(self) -> None:
        """The first interrupt asks the training to stop (SIGINT stays SIGINT, the others become SIGTERM:
        a training that lost its terminal should still save and exit); a second one, or GRACE_S, kills it."""
        group = self.training_group
        if group is None or self.first is None:
            return
        if self.count > 1:
            _signal_group(group, signal.SIGKILL)
            return
        _signal_group(group, signal.SIGINT if self.first == signal.SIGINT else signal.SIGTERM)
        if self._timer is None:
            self._timer = threading.Timer(GRACE_S, _signal_group, (group, signal.SIGKILL))
            self._timer.daemon = True
            self._timer.start()


def _signal_group(group: int, sig: int) -> bool:
    """Send SIG to process group GROUP; False when no process is left in it."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed user (setuid); the others got it
        pass
    return True


def _end_group(group: int, wait_s: float = 3.0) -> None:
    """After an interrupted training's first process exited: end what it left running in its group."""
    if not _signal_group(group, signal.SIGTERM):
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if not _signal_group(group, 0):
            return
    _signal_group(group, signal.SIGKILL)


def _wait_ready(agents: list[_Agent], timeout_s: float, signals: _Signals) -> dict[str, str]:
    """{host: why its agent is not capturing} (empty when all are); stops early on an interrupt."""
    deadline = time.monotonic() + timeout_s
    failed: dict[str, str] = {}
    for agent in agents:
        while not agent.ready.wait(0.05) and signals.first is None:
            if agent.proc.poll() is not None:
                for reader in agent.readers:
                    reader.join(timeout=5)
                failed[agent.host] = agent.error()
                break
            if time.monotonic() > deadline:
                failed[agent.host] = f"the agent did not start capturing within {timeout_s:g} s"
                break
    return failed


def _run_training(command: list[str], env: dict, signals: _Signals) -> int:
    """Run the training command in a process group of its own, which interrupts are passed to whole."""
    try:
        new_group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
        proc = subprocess.Popen(command, env=env, **new_group)
    except OSError as error:
        raise CaptureError(f"cannot start the training command {command[0]!r}: {error.strerror}") from None
    signals.training_group = proc.pid
    signals.forward()  # an interrupt that came while it started
    try:
        code = proc.wait()
        return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it
    finally:
        signals.training_group = None
        if signals.first is not None:
            _end_group(proc.pid)


_CLEAN_STAGE = 'rm -rf -- "$1"; find "$2" -maxdepth 1 -type l -lname "$1" -delete'


def _gather(template: str, host: str, stage: str, dest: Path) -> None:
    """Stream the host's staging folder back as a tar, then remove it there (also when the copy failed)."""
    dest.mkdir(parents=True, exist_ok=True)
    tar = subprocess.Popen(
        remote_argv(template, host, ["tar", "-C", stage, "-c", "."]),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        with tarfile.open(fileobj=tar.stdout, mode="r|") as archive:
            archive.extractall(dest, filter="data")
    except tarfile.TarError as error:
        tar.kill()
        if not any(dest.iterdir()):
            dest.rmdir()  # no empty host folder for the analyzer to puzzle over
        why = tar.stderr.read().decode(errors="replace").strip() if tar.stderr else ""
        raise CaptureError(f"host {host}: could not copy {stage} back ({why or error})") from None
    finally:
        tar.wait()
        subprocess.run(  # the folder, and a markers link to it a killed agent left (agent._markers_alias)
            remote_argv(template, host, ["sh", "-c", _CLEAN_STAGE, "sh", stage, os.path.dirname(stage)]),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            start_new_session=True,
        )


def _finish_host(
    agent: _Agent, options: RunOptions, stage: str, out: Path, start_error: str | None
) -> tuple[dict[str, Any], list[str]]:
    """Stop one host's agent and gather its folder: (its run.json entry, its failure lines). A host whose
    agent never started (START_ERROR) is still gathered: its folder may hold tcpdump's own log."""
    info: dict[str, Any] = {"dir": agent.host}
    failures: list[str] = []
    agent_code = agent.stop(options.stop_timeout_s)
    info.update(status=layout.STATUS_COMPLETE if agent_code == 0 else "failed", exit_code=agent_code)
    if start_error is not None:
        info.update(status="failed", error=start_error)
    elif agent_code != 0:
        info["error"] = agent.error()
        failures.append(f"host {agent.host}: {info['error']}")
    try:
        _gather(options.template, agent.host, stage, out / agent.host)
    except CaptureError as error:
        info.setdefault("error", str(error))
        info["status"] = "failed"
        return info, failures if start_error is not None else [*failures, str(error)]
    meta_path = out / agent.host / layout.META_FILE
    meta = layout.read_meta(meta_path) if meta_path.exists() else layout.HostMeta({})
    info["interface"] = meta.interface
    info["counters"] = counters = meta.counters
    if meta.lost_packets:
        info[layout.META_LOST_PACKETS] = meta.lost_packets
    dropped = (counters or {}).get("dropped_by_kernel", 0) + (counters or {}).get("dropped_by_interface", 0)
    if dropped:
        info.setdefault("warnings", []).append(f"tcpdump dropped {dropped} packets (see {meta_path})")
    cut = meta.payload_cut or ""
    if "payload bytes may be kept" in cut:
        info.setdefault("warnings", []).append(f"headers were not cut in the kernel: {cut}")
    return info, failures


def _finish_hosts(
    agents: list[_Agent], options: RunOptions, stages: dict[str, str], out: Path, start_errors: dict[str, str]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every host stopped and gathered at once (a remote shell round trip each would add up over 100 hosts)."""
    if not agents:
        return {}, []
    with ThreadPoolExecutor(max_workers=min(32, len(agents))) as pool:
        done = list(pool.map(lambda a: _finish_host(a, options, stages[a.host], out, start_errors.get(a.host)), agents))
    return {a.host: info for a, (info, _) in zip(agents, done)}, [f for _, fails in done for f in fails]


def _write_run_json(out: Path, manifest: dict) -> None:
    layout.write_json(out / layout.RUN_FILE, manifest)


def _quiet(say: Callable[[str], None]) -> Callable[[str], None]:
    """SAY that outlives its terminal: after a SIGHUP the run must still finish and write run.json."""

    def said(line: str) -> None:
        try:
            say(line)
        except (OSError, ValueError):
            pass

    return said


def run_capture(options: RunOptions, say=lambda line: print(line, file=sys.stderr, flush=True)) -> int:
    """Capture every host while the training command runs; returns the exit code for the CLI."""
    say = _quiet(say)
    out = options.out.resolve()
    if layout.is_run(out):
        raise CaptureError(f"{out} already holds a capture (run.json): choose a new --out")
    if not options.stage.startswith("/"):
        raise CaptureError(f"--stage {options.stage!r} must be an absolute path (it names a folder on every host)")
    out.mkdir(parents=True, exist_ok=True)
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    stage_template = os.path.join(options.stage, STAGE_NAME.replace("{run_id}", run_id))
    stages = {host: stage_template.replace("{host}", host) for host in options.hosts}
    manifest: dict[str, Any] = {
        "schema": layout.SCHEMA,
        "run_id": run_id,
        "status": "starting",
        "command": options.command,
        "hosts": options.hosts,
        "remote_shell": options.template,
        "start_ns": time.time_ns(),
        "end_ns": None,
        "exit_code": None,
        "training": None,
        "markers_dir": stage_template,
        "agents": {host: {"dir": host, "status": "starting"} for host in options.hosts},
    }
    _write_run_json(out, manifest)

    with _Signals() as signals:
        say(f"ringscope: starting agents on {len(options.hosts)} host(s): {', '.join(options.hosts)}")
        agents: list[_Agent] = []
        not_started: dict[str, str] = {}
        for host in options.hosts:
            argv = [
                *options.agent_command,
                "--out",
                stages[host],
                "--host",
                host,
                "--peers",
                ",".join(options.hosts),
                "--stop-on-stdin-eof",
                "--markers-template",
                stage_template,
                *options.agent_args,
            ]
            try:
                agents.append(_Agent(host, remote_argv(options.template, host, argv)))
            except OSError as error:
                not_started[host] = f"cannot start the remote shell {options.template!r}: {error.strerror}"
        not_started.update(_wait_ready(agents, options.ready_timeout_s, signals))
        failures = [f"host {host}: {why}" for host, why in not_started.items()]

        code: int | None = None
        if not failures and signals.first is None:
            code = _train(options, out, run_id, stage_template, stages, manifest, signals, say)
            if "error" in manifest["training"]:
                failures.append(manifest["training"]["error"])
        say(f"ringscope: stopping the agents and gathering {len(agents)} capture(s)")
        infos, gathered_failures = _finish_hosts(agents, options, stages, out, not_started)
        failures += gathered_failures
        for host, why in not_started.items():
            infos.setdefault(host, {"dir": host, "status": "failed", "error": why})
        manifest["agents"].update(infos)
        if code is not None and signals.first is None:
            failures += health_check(
                out, options.hosts, manifest["agents"], lambda line: say(f"ringscope: warning: {line}")
            )
        for host, info in manifest["agents"].items():
            for warning in info.get("warnings", []):
                say(f"ringscope: warning: host {host}: {warning}")

    if signals.first is not None:
        manifest.update(status=layout.STATUS_INTERRUPTED, interrupted_by=signals.name)
    else:
        manifest["status"] = layout.STATUS_COMPLETE if not failures else "failed"
    manifest["end_ns"] = time.time_ns()
    if failures:
        manifest["error"] = "; ".join(failures)
    _write_run_json(out, manifest)
    if signals.first is not None:
        say(f"ringscope: interrupted by {signals.name}: captures so far written to {out}")
        for line in failures:
            say(f"ringscope: error: {line}")
        return 128 + signals.first
    if code is None:
        raise CaptureError("; ".join(failures))
    say(f"ringscope: capture written to {out} (training exit code {code})")
    if code == 0 and failures:
        raise CaptureError("; ".join(failures))
    for line in failures:
        say(f"ringscope: error: {line}")
    return code


def _start_live(command: list[str], stages: dict[str, str], say: Callable[[str], None]) -> subprocess.Popen | None:
    """The live view over the agents' staging folders, when they are on this machine (local hosts, network
    namespaces, a shared filesystem); None, said once, when they are not."""
    away = [host for host, folder in stages.items() if not os.path.isdir(folder)]
    if away:
        say(f"ringscope: no live view: the capture folders of {', '.join(away)} are not on this machine")
        return None
    return subprocess.Popen([*command, *stages.values()], start_new_session=True)


def _stop_live(live: subprocess.Popen) -> None:
    """SIGTERM: the view polls once more and exits (serving metrics, once that poll was scraped); killed if it
    does not within LIVE_STOP_S (and METRICS_LINGER_S more when it serves metrics)."""
    live.terminate()
    serving = "--metrics" in (live.args if isinstance(live.args, list) else [])
    try:
        live.wait(timeout=LIVE_STOP_S + (METRICS_LINGER_S if serving else 0))
    except subprocess.TimeoutExpired:
        live.kill()
        live.wait()


def _train(
    options: RunOptions,
    out: Path,
    run_id: str,
    stage_template: str,
    stages: dict[str, str],
    manifest: dict[str, Any],
    signals: _Signals,
    say: Callable[[str], None],
) -> int:
    """Run the training between the agents' start and stop; its times and exit code go into the manifest."""
    env = dict(
        os.environ,
        RINGSCOPE_RUN=str(out),
        RINGSCOPE_RUN_ID=run_id,
        RINGSCOPE_HOSTS=",".join(options.hosts),
        RINGSCOPE_MARKERS_DIR=stage_template,
    )
    if len(options.hosts) == 1:
        env.update(
            RINGSCOPE_HOST=options.hosts[0], RINGSCOPE_MARKERS=f"{stages[options.hosts[0]]}/{layout.MARKERS_FILE}"
        )
    say(f"ringscope: all agents capturing; running: {' '.join(options.command)}")
    training: dict[str, Any] = {"start_ns": time.time_ns()}
    manifest["training"] = training
    live = _start_live(options.live_command, stages, say) if options.live_command else None
    try:
        code = _run_training(options.command, env, signals)
    except CaptureError as error:
        code, training["error"] = 127, str(error)
    finally:
        if live is not None:
            _stop_live(live)
    training.update(end_ns=time.time_ns(), exit_code=code)
    manifest["exit_code"] = code
    return code

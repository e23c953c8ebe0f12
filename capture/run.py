"""`capture run`: an agent on every host, the training command in between, one capture directory after.

Each agent writes into a staging folder on its host (STAGE_TEMPLATE, e.g. /tmp/ringscope-ID-h1) and
stops when its stdin closes, which works through ssh as well as locally. Afterwards every folder is
streamed back as a tar through the same remote shell into RUN/<host>/ and the staging folder removed.

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
from typing import Any
from dataclasses import dataclass, field
from pathlib import Path

from capture import layout
from capture.agent import READY_LINE
from capture.errors import CaptureError
from capture.remote import remote_argv

STAGE_TEMPLATE = "/tmp/ringscope-{run_id}-{host}"
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


class _Agent:
    """One agent process (behind its remote shell) and what it printed."""

    def __init__(self, host: str, argv: list[str]) -> None:
        self.host = host
        self.ready = threading.Event()
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
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


def _wait_ready(agents: list[_Agent], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for agent in agents:
        while not agent.ready.wait(0.05):
            if agent.proc.poll() is not None:
                for reader in agent.readers:
                    reader.join(timeout=5)
                raise CaptureError(f"host {agent.host}: {agent.error()}")
            if time.monotonic() > deadline:
                raise CaptureError(f"host {agent.host}: the agent did not start capturing within {timeout_s:g} s")


def _run_training(command: list[str], env: dict) -> int:
    """Run the training command in its own process group; SIGINT/SIGTERM are passed on to it once."""
    try:
        new_group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
        proc = subprocess.Popen(command, env=env, **new_group)
    except OSError as error:
        raise CaptureError(f"cannot start the training command {command[0]!r}: {error.strerror}") from None

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _gather(template: str, host: str, stage: str, dest: Path) -> None:
    """Stream the host's staging folder back as a tar, then remove it there."""
    dest.mkdir(parents=True, exist_ok=True)
    tar = subprocess.Popen(
        remote_argv(template, host, ["tar", "-C", stage, "-c", "."]),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        with tarfile.open(fileobj=tar.stdout, mode="r|") as archive:
            archive.extractall(dest, filter="data")
    except tarfile.TarError as error:
        tar.kill()
        raise CaptureError(
            f"host {host}: could not copy {stage} back ({error}): "
            f"{tar.stderr.read().decode(errors='replace').strip() if tar.stderr else ''}"
        ) from None
    finally:
        tar.wait()
    subprocess.run(
        remote_argv(template, host, ["rm", "-rf", "--", stage]),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )


def _write_run_json(out: Path, manifest: dict) -> None:
    layout.write_json(out / layout.RUN_FILE, manifest)


def run_capture(options: RunOptions, say=lambda line: print(line, file=sys.stderr, flush=True)) -> int:
    """Capture every host while the training command runs; returns the exit code for the CLI."""
    out = options.out.resolve()
    if layout.is_run(out):
        raise CaptureError(f"{out} already holds a capture (run.json): choose a new --out")
    out.mkdir(parents=True, exist_ok=True)
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    stage_template = STAGE_TEMPLATE.replace("{run_id}", run_id)
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

    say(f"ringscope: starting agents on {len(options.hosts)} host(s): {', '.join(options.hosts)}")
    agents: list[_Agent] = []
    try:
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
                *options.agent_args,
            ]
            agents.append(_Agent(host, remote_argv(options.template, host, argv)))
        _wait_ready(agents, options.ready_timeout_s)
    except (CaptureError, OSError) as error:
        for agent in agents:
            agent.stop(10)
        manifest.update(status="failed", end_ns=time.time_ns(), error=str(error))
        _write_run_json(out, manifest)
        if isinstance(error, OSError):
            raise CaptureError(f"cannot start the remote shell {options.template!r}: {error.strerror}") from None
        raise

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
    try:
        code = _run_training(options.command, env)
    except CaptureError as error:
        code, training["error"] = 127, str(error)
    training.update(end_ns=time.time_ns(), exit_code=code)
    manifest.update(training=training, exit_code=code)

    failures: list[str] = [training["error"]] if "error" in training else []
    for agent in agents:
        info = manifest["agents"][agent.host]
        agent_code = agent.stop(options.stop_timeout_s)
        info.update(status="complete" if agent_code == 0 else "failed", exit_code=agent_code)
        if agent_code != 0:
            info["error"] = agent.error()
            failures.append(f"host {agent.host}: {info['error']}")
        try:
            _gather(options.template, agent.host, stages[agent.host], out / agent.host)
        except CaptureError as error:
            info.update(status="failed", error=str(error))
            failures.append(str(error))
            continue
        meta_path = out / agent.host / layout.META_FILE
        counters = layout.read_json(meta_path).get(layout.META_COUNTERS) if meta_path.exists() else None
        info["counters"] = counters
        dropped = (counters or {}).get("dropped_by_kernel", 0) + (counters or {}).get("dropped_by_interface", 0)
        if dropped:
            say(f"ringscope: warning: host {agent.host}: tcpdump dropped {dropped} packets (see {meta_path})")

    manifest.update(status="complete" if not failures else "failed", end_ns=time.time_ns())
    if failures:
        manifest["error"] = "; ".join(failures)
    _write_run_json(out, manifest)
    say(f"ringscope: capture written to {out} (training exit code {code})")
    if code == 0 and failures:
        raise CaptureError("; ".join(failures))
    return code

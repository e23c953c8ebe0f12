"""A real Dask cluster for tests and the benchmark: a scheduler and one-thread workers as subprocesses on
127.0.0.1 (the `dask` command beside this Python), each in its own process group, killed on the way out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Iterator

DASK = Path(sys.executable).with_name("dask")
START_TIMEOUT_S = 30


def have_dask() -> bool:
    """Whether Dask's distributed scheduler is installed (the `dask` extra)."""
    return find_spec("distributed") is not None


@dataclass
class Cluster:
    address: str
    client: Any  # distributed.Client, imported only when Dask is installed


@contextmanager
def dask_cluster(
    folder: Path, workers: int, worker_args: tuple[str, ...] = (), scheduler_env: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """A scheduler and `workers` one-thread workers, each in its own process group, killed on the way out."""
    from distributed import Client

    sched_file = folder / "scheduler.json"
    groups: list[subprocess.Popen] = []

    def start(name: str, *args: str, env: dict[str, str] | None = None) -> None:
        with open(folder / f"{name}.log", "wb") as log:  # the child keeps its own descriptor
            groups.append(
                subprocess.Popen(
                    [str(DASK), *args, "--no-dashboard", "--scheduler-file", str(sched_file)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, **(env or {})},
                )
            )

    try:
        start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0", env=scheduler_env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not sched_file.is_file():
            assert groups[0].poll() is None and time.monotonic() < deadline, (folder / "scheduler.log").read_text()
            time.sleep(0.1)
        for i in range(workers):
            start(f"worker{i}", "worker", "--nworkers", "1", "--nthreads", "1", *worker_args)
        with Client(scheduler_file=str(sched_file), timeout=START_TIMEOUT_S, set_as_default=False) as client:
            client.wait_for_workers(workers, timeout=START_TIMEOUT_S)
            yield Cluster(address=client.scheduler.address, client=client)
    finally:
        for proc in groups:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group we started (a worker's nanny and its worker), SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue

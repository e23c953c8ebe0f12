"""Scale-out: run the per-host stream scans on a Dask distributed cluster (`--scheduler tcp://HOST:PORT`).

`fold.scan_host` is pure (paths and options in, a small picklable StreamScan out), so each host's stream
becomes one Dask task. Workers open the files themselves: the paths sent are absolute and must name the
same files on every worker (a shared filesystem). Dask is imported here only, and only when a scheduler
is given, so `ringscope --help` and local runs never pay for it. Whatever goes wrong with the cluster
ends in one ClusterError line; a FileError raised on a worker reaches the caller unchanged.
"""

from __future__ import annotations

import logging
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from analyze.read.work import Progress, biggest_first
from analyze.read.fold import scan_host
from analyze.read.scan import StreamScan

TIMEOUT_ENV = "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"  # Dask's own name for the connect timeout
DEFAULT_TIMEOUT = "10s"  # a mistyped address should fail fast, not after Dask's 30 s
KEY_PREFIX = "ringscope-scan"  # task keys (and the dashboard's task names) start with this


class ClusterError(Exception):
    """The cluster cannot do the work (Dask missing, scheduler unreachable, no workers, a worker died)."""


def scan_hosts_on_cluster(
    address: str,
    streams: list[list[Path]],
    sizes: list[int],
    kwargs: dict[str, Any],
    progress: Optional[Progress] = None,
    task: Callable[..., StreamScan] = scan_host,
) -> list[StreamScan]:
    """Scan every stream as one task on the cluster at `address`, `task(files, **kwargs)` (by default
    fold.scan_host; `ringscope convert` also writes the packets there); results in the order of `streams`."""
    distributed = _import_distributed()
    with _dask_logs_silenced():
        client = _connect(distributed, address)
        try:
            return _run(distributed, client, address, streams, sizes, kwargs, progress, task)
        finally:
            client.close()


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise ClusterError(f"--scheduler needs Dask ({exc}): pip install 'ringscope[dask]'") from None
    return distributed


@contextmanager
def _dask_logs_silenced() -> Iterator[None]:
    """Dask's client logs reconnect attempts with tracebacks on stderr; the one ClusterError line says it all."""
    loggers = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name == "distributed" or name.startswith("distributed.")
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _connect(distributed: Any, address: str) -> Any:
    """A client connected to `address` with at least one worker, within the connect timeout."""
    from dask.utils import parse_timedelta
    from distributed.comm import parse_address
    from distributed.comm.registry import get_backend

    try:
        get_backend(parse_address(address)[0])  # a bad scheme, before a Client that would complain at exit
    except ValueError as exc:
        raise ClusterError(f"bad Dask scheduler address {address!r}: {exc}") from None
    timeout = parse_timedelta(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    try:
        client = distributed.Client(address, timeout=timeout, set_as_default=False)
    except OSError as exc:
        raise ClusterError(f"cannot reach Dask scheduler at {address}: {exc}") from None
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        client.close()
        raise ClusterError(
            f"the Dask scheduler at {address} has no workers after {timeout:g} s "
            f"(start some with `dask worker {address}`)"
        ) from None
    return client


def _run(
    distributed: Any,
    client: Any,
    address: str,
    streams: list[list[Path]],
    sizes: list[int],
    kwargs: dict[str, Any],
    progress: Optional[Progress],
    task: Callable[..., StreamScan],
) -> list[StreamScan]:
    """Submit biggest first (the scheduler also runs the biggest first), collect as they finish."""
    run = uuid.uuid4().hex  # keys unique to this run: a rewritten file must never get an earlier run's result
    futures = {}
    order = biggest_first(sizes)
    for rank, i in enumerate(order):
        files = [Path(f).absolute() for f in streams[i]]
        key = f"{KEY_PREFIX}-{i}-{run}"
        futures[client.submit(task, files, key=key, priority=len(order) - rank, **kwargs)] = i
    out: list[Optional[StreamScan]] = [None] * len(streams)
    for fut in distributed.as_completed(futures, loop=client.loop):
        i = futures[fut]
        out[i] = _result(distributed, fut, address, streams[i][0])
        if progress:
            progress(streams[i][0], sizes[i])
    return out  # type: ignore[return-value]


def _result(distributed: Any, fut: Any, address: str, first_file: Path) -> StreamScan:
    """The task's StreamScan; the task's own FileError as is; cluster failures as one ClusterError line."""
    try:
        return fut.result()
    except distributed.KilledWorker:
        raise ClusterError(
            f"Dask workers kept dying while reading {first_file} (out of memory? see the worker logs)"
        ) from None
    except ModuleNotFoundError as exc:
        raise ClusterError(f"a Dask worker cannot import ringscope ({exc}): install it on every worker") from None
    except distributed.client.FutureCancelledError:
        raise ClusterError(f"lost the Dask scheduler at {address} while reading {first_file}") from None

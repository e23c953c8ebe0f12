"""The first half of an analysis: find a run's inputs and set its scans going, without importing pandas.

Why a half of its own: with a local pool the workers read the captures while the caller imports
pandas and the table code (~0.3 s), instead of one after the other. `analyze.api.finish` is the other half.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from analyze.read import layouts as L
from analyze.read.bin_choice import read_width
from analyze.read.engine import ScanOptions, start_host_scans
from analyze.read.work import Progress
from analyze.read.inputs import RunInput, discover
from analyze.read.scan import StreamScan


@dataclass
class Reading:
    """A run whose scans are under way: collect() returns one StreamScan per host of run_input."""

    run_input: RunInput
    collect: Callable[[], list[StreamScan]]
    bin_ns: int  # the width the scans were read at
    byte_mode: str
    given_ns: Optional[int] = None  # --bin: the analyses' width; None: chosen from the traffic (bin_choice)


@dataclass(frozen=True)
class ReadOptions:
    """How captures are read, checked once when made: ValueError (one line, naming the command-line option) for
    options no scan can run with, from the CLI (`analyze`, `convert`) and the Python API alike. None is the
    default and always good: the bin chosen from the traffic (read at BASE_BIN_NS), IP bytes, a local pool."""

    bin_ns: Optional[int] = None
    byte_mode: Optional[str] = None  # ip | wire | payload
    workers: Optional[int] = None  # local processes
    scheduler: Optional[str] = None  # tcp://HOST:PORT: a Dask cluster reads instead

    def __post_init__(self) -> None:
        if self.byte_mode is not None and self.byte_mode not in L.BYTE_MODES:
            raise ValueError(f"bad --bytes {self.byte_mode!r}: choose ip, wire or payload")
        if self.bin_ns is not None and self.bin_ns <= 0:
            raise ValueError(f"bad --bin {self.bin_ns} ns: must be longer than 0")
        if self.workers is not None and self.workers < 1:
            raise ValueError("--workers must be at least 1")
        if self.scheduler is not None and self.workers is not None:
            raise ValueError("--workers sets local processes and --scheduler reads on a Dask cluster: give one of them")


def start_reading(
    paths: Sequence[str | Path],
    options: ReadOptions = ReadOptions(),
    *,
    progress: Optional[Progress] = None,
    busy_bytes: int = 0,
) -> Reading:
    """Find the captures under `paths` and start scanning them as OPTIONS say (see analyze.api.analyze).

    The captures are read at BASE_BIN_NS (bin_choice.read_width) and the analysis picks its width from the traffic
    unless one is given (analyze.read.bin_choice); the byte mode defaults to "ip". A Parquet dataset (`ringscope
    convert`) is read back instead, one layer up (analyze.source).
    busy_bytes: how much a worker reads while the caller does its own work meanwhile (engine.start_host_scans).

    Raises analyze.read.formats.FileError when the input cannot be found.
    """
    bin_ns = read_width(options.bin_ns)
    byte_mode = options.byte_mode or "ip"
    run_input = discover([Path(p) for p in paths])
    opts = ScanOptions(bin_ns=bin_ns, byte_mode=L.BYTE_MODES[byte_mode], mtu=common_mtu(run_input))
    collect = start_host_scans(
        [h.files for h in run_input.hosts], opts, options.workers, progress, options.scheduler, busy_bytes
    )
    return Reading(run_input, collect, bin_ns, byte_mode, given_ns=options.bin_ns)


def common_mtu(run_input: RunInput) -> int:
    """The MTU every host's frames are counted with in wire mode: the smallest meta.json gives, else 1500."""
    mtus = {h.meta.mtu for h in run_input.hosts if h.meta and h.meta.mtu}
    return min(mtus) if mtus else 1500

"""The first half of an analysis: find a run's inputs and set its scans going, without importing pandas.

Why a half of its own: with a local pool the workers read the captures while the caller imports
pandas and the table code (~0.3 s), instead of one after the other. `analyze.api.finish` is the other half.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from analyze.read import layouts as L
from analyze.read.bin_choice import BASE_BIN_NS
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
    bin_given: bool = True  # False: the analysis chooses its width from the traffic (analyze.read.bin_choice)


def start_reading(
    paths: Sequence[str | Path],
    *,
    bin_ns: Optional[int] = None,
    byte_mode: Optional[str] = None,
    workers: Optional[int] = None,
    progress: Optional[Progress] = None,
    scheduler: Optional[str] = None,
    busy_bytes: int = 0,
) -> Reading:
    """Check the options, find the captures under `paths` and start scanning them (see analyze.api.analyze).

    Without bin_ns the captures are read at BASE_BIN_NS and the analysis picks its width from the traffic
    (analyze.read.bin_choice); byte_mode defaults to "ip". A Parquet dataset (`ringscope convert`) is read back
    instead, one layer up (analyze.source).
    busy_bytes: how much a worker reads while the caller does its own work meanwhile (engine.start_host_scans).

    Raises ValueError for bad options and analyze.read.formats.FileError when the input cannot be found.
    """
    bin_given = bin_ns is not None
    bin_ns = BASE_BIN_NS if bin_ns is None else bin_ns
    byte_mode = byte_mode or "ip"
    check_options(bin_ns, byte_mode, workers, scheduler)
    run_input = discover([Path(p) for p in paths])
    opts = ScanOptions(bin_ns=bin_ns, byte_mode=L.BYTE_MODES[byte_mode], mtu=common_mtu(run_input))
    collect = start_host_scans([h.files for h in run_input.hosts], opts, workers, progress, scheduler, busy_bytes)
    return Reading(run_input=run_input, collect=collect, bin_ns=bin_ns, byte_mode=byte_mode, bin_given=bin_given)


def check_options(
    bin_ns: Optional[int], byte_mode: Optional[str], workers: Optional[int], scheduler: Optional[str]
) -> None:
    """ValueError (one line, naming the command-line option) for options no scan can run with; None is the
    default and always good. The one check of these options: the CLI, `convert` and every read call it."""
    if byte_mode is not None and byte_mode not in L.BYTE_MODES:
        raise ValueError(f"bad --bytes {byte_mode!r}: choose ip, wire or payload")
    if bin_ns is not None and bin_ns <= 0:
        raise ValueError(f"bad --bin {bin_ns} ns: must be longer than 0")
    if workers is not None and workers < 1:
        raise ValueError("--workers must be at least 1")
    if scheduler is not None and workers is not None:
        raise ValueError("--workers sets local processes and --scheduler reads on a Dask cluster: give one of them")


def common_mtu(run_input: RunInput) -> int:
    """The MTU every host's frames are counted with in wire mode: the smallest meta.json gives, else 1500."""
    mtus = {int(h.meta["mtu"]) for h in run_input.hosts if h.meta and h.meta.get("mtu")}
    return min(mtus) if mtus else 1500

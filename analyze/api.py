"""The analyzer's Python API: `analyze(paths)` returns one Result with its pandas tables; `run_whatif(source)` the
what-if of a run directory or a saved result.

Notebook users call this directly; the CLI is a few lines over it. A facade: the tables are built in
analyze.tables.build, each job analyzed in analyze.each_job, the verdict judged in analyze.verdict.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence


from analyze.read.work import Progress
from analyze.model.result import Given, Result
from analyze.read.reading import ReadOptions, Reading
from analyze.source import open_source
from analyze.read.bin_choice import choose as choose_width, coarsen_each, given as given_width
from analyze.read.heap import give_back
from analyze.model.findings import WhatIf
from analyze.model.saved import read_result
from analyze.read.formats import FileError
from analyze.tables.utilization import DEFAULT_BUSY_THRESHOLD
from analyze.whatif.inputs import inputs_from_result
from analyze.whatif.request import WhatIfOptions, what_if_options


def analyze(
    paths: Sequence[str | Path],
    *,
    link_speed_bps: Optional[float] = None,
    bin_ns: Optional[int] = None,
    byte_mode: Optional[str] = None,
    busy_threshold: float = DEFAULT_BUSY_THRESHOLD,
    workers: Optional[int] = None,
    progress: Optional[Progress] = None,
    launch_order: Optional[Sequence[str]] = None,
    gradient_bytes: Optional[float] = None,
    nccl_log: Optional[str | Path] = None,
    single_iteration_time_s: Optional[float] = None,
    scheduler: Optional[str] = None,
    iterations: Optional[int] = None,
    world_size: Optional[int] = None,
    ranks_per_host: Optional[int] = None,
    profiles: Sequence[Path] = (),
) -> Result:
    """Read the captures under `paths` (or a Parquet dataset `ringscope convert` wrote) and compute flows, series
    (bin_ns wide, else chosen from the traffic: analyze.read.bin_choice; bytes counted as byte_mode: ip, wire
    or payload), link utilization and the collective
    (topology, iterations; launch_order / gradient_bytes / nccl_log refine it, and without markers
    gradient_bytes and iterations, the step count the user knows, anchor the iterations), and the what-if (`scaling`)
    when the run allows it; single_iteration_time_s (T of one worker) adds the measured scaling factor;
    world_size or ranks_per_host give the job's ranks where the connections cannot count them; profiles (the ranks'
    torch.profiler traces) check who the packets say was late (analyze.wire.rank_profiles). A capture of
    several jobs, or with other traffic, is analyzed per job (analyze.each_job).
    scheduler ("tcp://HOST:PORT") scans the hosts on that Dask cluster instead of local processes (`workers`);
    its workers must see the files at the same absolute paths.

    Raises analyze.read.formats.FileError (one line: file, offset, cause) when input cannot be read, and
    analyze.read.cluster.ClusterError when the Dask cluster cannot do the scans.
    """
    given = Given(  # checked before anything is read: ValueError in the command's words
        launch_order=launch_order,
        gradient_bytes=gradient_bytes,
        nccl_log=nccl_log,
        single_iteration_time_s=single_iteration_time_s,
        iterations=iterations,
        world_size=world_size,
        ranks_per_host=ranks_per_host,
        profiles=profiles,
    )
    options = ReadOptions(bin_ns=bin_ns, byte_mode=byte_mode, workers=workers, scheduler=scheduler)
    reading = open_source(paths, options, progress=progress)
    return finish(reading, link_speed_bps=link_speed_bps, busy_threshold=busy_threshold, given=given)


def finish(
    reading: Reading,
    *,
    link_speed_bps: Optional[float] = None,
    busy_threshold: float = DEFAULT_BUSY_THRESHOLD,
    given: Given = Given(),
) -> Result:
    """The second half of analyze(): collect the scans `reading` set going and compute everything else, the job
    as GIVEN (checked when it was made)."""
    # pandas and the table code load here, while a local pool reads, and never for `whatif` on a saved result
    from analyze.each_job import analyze_jobs
    from analyze.tables.build import build_result
    from analyze.verdict import judge

    scans = reading.collect()
    judged = choose_width(scans, reading.bin_ns)  # the links' fill is judged at it whatever --bin says
    width = judged if reading.given_ns is None else given_width(reading.given_ns)
    coarsen_each(scans, math.gcd(width.bin_ns, judged.bin_ns) // reading.bin_ns)
    result = build_result(  # empties `scans`: the analyses below need memory of their own
        reading.run_input,
        scans,
        link_speed_bps=link_speed_bps,
        bin_ns=width.bin_ns,
        judged_bin_ns=judged.bin_ns,
        byte_mode=reading.byte_mode,
        busy_threshold=busy_threshold,
    )
    give_back()
    result.bin_choice = width.why
    analyze_jobs(result, {h.name: h.meta for h in reading.run_input.hosts}, given)
    result.verdict = judge(result)
    return result


def load_result(path: Path) -> Result:
    """The analyzer's result: a run directory analyzed now (with its tables), or a result JSON read back
    (without them). User errors are ValueError with one line."""
    if path.is_dir():
        try:
            return analyze([path])
        except FileError as exc:
            raise ValueError(str(exc)) from None
    return read_result(path)


def run_whatif(source: Optional[Path], options: WhatIfOptions = WhatIfOptions()) -> WhatIf:
    """The what-if `ringscope whatif [SOURCE]` prints: the run's measurements (SOURCE, when given: a run directory
    analyzed now or a result JSON read back) and the OPTIONS, parsed from their strings as the command line takes
    them (analyze.whatif.request.what_if_options). The command line only prints what this returns."""
    return what_if_options(inputs_from_result(load_result(source)) if source is not None else None, options)

"""ringscope's one face: the analyze, report, whatif and profile commands (and capture's, mounted).

Each command parses its options into typed values, calls the library (analyze, reports), and prints or
writes; every user error ends in fail()'s one line. Heavy libraries (numba, pandas, plotly, torch) are
imported inside the commands so that `ringscope --help` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Union

import typer

from capture.cli_capture import capture_app, fail

if TYPE_CHECKING:  # the library loads inside the commands, so that `ringscope --help` stays fast
    import click.exceptions
    import typer._click.exceptions

    from analyze.live.now import Now
    from analyze.model.findings import WhatIf
    from analyze.model.result import Result

    UsageError = Union[typer._click.exceptions.UsageError, click.exceptions.UsageError]

app = typer.Typer(
    name="ringscope",
    help="Is the network the bottleneck of your distributed training job? Capture, analyze, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from analyze import __version__

        typer.echo(f"ringscope {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Is the network the bottleneck of your distributed training job? Capture, analyze, report."""


_fast_exit = False  # set by the commands that only compute and write files: see script()


def _analysis_command() -> None:
    """What the commands that read captures do first (never `capture`, whose training job inherits the
    environment and whose tcpdump must be stopped by a normal exit).

    Before numpy loads: OpenBLAS starts a thread per core that spins for a while, at import and again in
    every forked worker (0.08 s + 0.12 s per worker of CPU here). ringscope does no large linear algebra, and
    on a 2-core machine those spins ran beside the readers: an 8-host analyze with 2 workers used 0.3 s more
    CPU. A value the user set wins. The command may also skip the interpreter's teardown (script())."""
    global _fast_exit
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _fast_exit = True


# ---- analyze ---------------------------------------------------------------------------------


@app.command()
def analyze(
    paths: List[Path] = typer.Argument(
        ...,
        help="Capture directory (run.json + one folder per host), folders of pcaps (searched recursively) or pcap/pcapng files, optionally gzip- or zstd-compressed; or a Parquet dataset from `ringscope convert`.",
    ),
    json_out: Optional[Path] = typer.Option(
        None, "--json", help="Write the result object (JSON, schema 2) to FILE; '-' for stdout."
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Write the tables (flows, hosts, series) as CSV and Parquet into DIR."
    ),
    link_speed: Optional[str] = typer.Option(
        None, "--link-speed", help="Link speed for hosts whose meta.json gives none, e.g. 25Gbit, 100G, 1e9."
    ),
    bin_: Optional[str] = typer.Option(
        None,
        "--bin",
        help="Bin width of the throughput series and the iterations, e.g. 1ms, 10ms, 0.5s. Default: a tenth of the traffic's short bursts, 1-10 ms (the summary says which and why); a dataset's bins are never finer than it was converted with. The limiters, stragglers and what-if are judged at the width chosen from the traffic whatever this says.",
    ),
    byte_mode: Optional[str] = typer.Option(
        None,
        "--bytes",
        help="Byte accounting: ip (IP header length, default), wire (ip + Ethernet framing per MTU frame), payload (TCP/UDP payload); a dataset keeps its own.",
    ),
    workers: Optional[int] = typer.Option(
        None,
        "--workers",
        help="Most local worker processes reading files (default: one per core); one is started per GiB of input (and 8 MiB per host), and with fewer hosts than workers big files are read in pieces. Not with --scheduler.",
    ),
    scheduler: Optional[str] = typer.Option(
        None,
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="Read the hosts' captures on this Dask cluster instead of local processes (needs pip install 'ringscope\\[dask]'). Workers open the files themselves: they must see them at the same absolute paths (a shared filesystem).",
    ),
    launch_order: Optional[str] = typer.Option(
        None,
        "--launch-order",
        help="Hosts in launch (rank) order, h1,h2,...; default: run.json's host list. Checked against the ring.",
    ),
    gradient_bytes: Optional[str] = typer.Option(
        None,
        "--gradient-bytes",
        help="Gradient size S per iteration (97.5MB, 25MiB or bytes) for the 2(N-1)/N x S check; default: markers' gradient_bytes. Without markers it also anchors the iterations found in the traffic (checked, and a disagreement reported).",
    ),
    iterations: Optional[int] = typer.Option(
        None,
        "--iterations",
        help="Training steps the job ran while captured. Without markers it anchors the iterations found in the traffic: checked against it, a disagreement reported, an agreement makes the count sure.",
    ),
    world_size: Optional[int] = typer.Option(
        None,
        "--world-size",
        help="The job's ranks W, where neither markers nor the connections (torch/gloo: a store connection per rank, one per rank pair) count them. Checked against the connections; a disagreement is reported and the traffic's W kept, unsure.",
    ),
    ranks_per_host: Optional[int] = typer.Option(
        None,
        "--ranks-per-host",
        help="Ranks (GPUs) on every host, placed host by host: W = this x hosts. Checked like --world-size.",
    ),
    nccl_log: Optional[Path] = typer.Option(
        None, "--nccl-log", help="NCCL_DEBUG=INFO log: compare the ring NCCL built with the ring in the packets."
    ),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Also write the self-contained HTML report to FILE."),
    metrics_out: Optional[Path] = typer.Option(
        None,
        "--metrics",
        help="Write Prometheus metrics (text format) to FILE.prom for node_exporter's textfile collector: per host bytes, link speed, utilization, re-sent bytes and drops; per job iterations, bytes per iteration, limiter, what-if scaling factor, stragglers. See docs/metrics.md.",
    ),
    trace_out: Optional[Path] = typer.Option(
        None,
        "--trace",
        help="Write a Chrome/Perfetto trace-event JSON to FILE (.gz: compressed): per host its iterations, communication windows, ring steps, tx/rx utilization and re-sent bytes, on the wall clock PyTorch's profiler uses. Opens in ui.perfetto.dev.",
    ),
    trace_beside: List[Path] = typer.Option(
        [],
        "--trace-beside",
        help="A PyTorch profiler (Kineto) trace of the same job (repeat for several ranks): each rank's first collective call per step checks who the packets say was late, and its calls per step time the backward the what-if needs where the busy link hid it; with --trace it is also merged into that file on a common time base.",
    ),
    single_iteration_time: Optional[str] = typer.Option(
        None,
        "--single-iteration-time",
        help="Single-worker iteration time T (0.3 or 300ms): the what-if then reports the measured scaling factor; default: period minus communication.",
    ),
) -> None:
    """Read captures and print a flow and link-utilization summary."""
    _analysis_command()
    from analyze.model.result import Given
    from analyze.read.reading import ReadOptions
    from capture.units import parse_bin, parse_duration, parse_link_speed, parse_size

    try:
        order = [h.strip() for h in launch_order.split(",") if h.strip()] if launch_order else None
        link_bps = parse_link_speed(link_speed) if link_speed else None
        bin_ns = parse_bin(bin_) if bin_ is not None else None
        options = ReadOptions(bin_ns=bin_ns, byte_mode=byte_mode, workers=workers, scheduler=scheduler)
        given = Given(  # every job option checked once, as analyze.api.analyze checks it
            launch_order=order,
            gradient_bytes=parse_size(gradient_bytes) if gradient_bytes else None,
            nccl_log=nccl_log,
            single_iteration_time_s=parse_duration(single_iteration_time) / 1e9 if single_iteration_time else None,
            iterations=iterations,
            world_size=world_size,
            ranks_per_host=ranks_per_host,
            profiles=trace_beside,
        )
        from analyze.read.trace_file import read_trace

        for kineto in trace_beside:
            if not kineto.is_file():
                raise ValueError(f"{kineto}: no such trace file")
            read_trace(kineto)  # no trace at all: one line now, not after the scan
    except ValueError as exc:
        raise fail(str(exc)) from None

    from analyze.read.cluster import ClusterError
    from analyze.read.engine import TABLE_IMPORT_BYTES
    from analyze.read.formats import FileError
    from analyze.source import open_source

    quiet = str(json_out) == "-" or not sys.stderr.isatty()
    try:
        with _Progress(quiet) as progress:
            reading = open_source(paths, options, progress=progress, busy_bytes=TABLE_IMPORT_BYTES)
            from analyze.api import finish  # pandas and the table code load while a local pool reads

            result = finish(reading, link_speed_bps=link_bps, given=given)
    except (FileError, ClusterError) as exc:
        raise fail(str(exc)) from None
    if json_out is not None:
        try:
            result.write_json(json_out)
        except OSError as exc:
            raise fail(f"{json_out}: cannot write ({exc.strerror})") from None
    if out is not None:
        from reports.tables import write_tables

        try:
            written = write_tables(result, out)
        except OSError as exc:
            raise fail(f"{out}: cannot write tables ({exc.strerror})") from None
        typer.echo(f"wrote {len(written)} table files to {out}", err=True)
    if html_out is not None:
        _write_report(result, html_out, None)
    if trace_out is not None:
        _write_trace(result, trace_out, trace_beside)
    if metrics_out is not None:
        _write_metrics(result, metrics_out)
    if str(json_out) != "-":
        from reports.text import summary_text

        typer.echo(summary_text(result))


@app.command()
def convert(
    paths: List[Path] = typer.Argument(
        ...,
        help="Capture directory (run.json + one folder per host), folders of pcaps or pcap/pcapng files, as analyze takes them.",
    ),
    parquet: Path = typer.Option(
        ...,
        "--parquet",
        metavar="OUT",
        help="New (or empty) folder for the dataset: packets, flows, flow_bins, samples and files tables partitioned by host (host=NAME), plus ringscope-dataset.json with the run's metadata. See docs/dataset.md.",
    ),
    bin_: str = typer.Option(
        "1ms",
        "--bin",
        help="Bin width of the flow_bins table, e.g. 1ms (default: analyze then chooses its bins from the traffic), 10ms, 0.5s.",
    ),
    byte_mode: str = typer.Option(
        "ip", "--bytes", help="Byte accounting of flow_bins: ip (default), wire or payload (as analyze --bytes)."
    ),
    workers: Optional[int] = typer.Option(
        None,
        "--workers",
        help="Most local worker processes, one host each (default: one per core). Not with --scheduler.",
    ),
    scheduler: Optional[str] = typer.Option(
        None,
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="Convert the hosts on this Dask cluster (pip install 'ringscope\\[dask]'); its workers must see the captures and OUT at the same absolute paths.",
    ),
) -> None:
    """Write a run's captures once as a Parquet dataset that DuckDB, Polars and pandas read, and `ringscope
    analyze OUT` analyzes without the pcaps (with the same result)."""
    _analysis_command()
    from analyze.read.reading import ReadOptions
    from capture.units import parse_bin

    try:
        options = ReadOptions(bin_ns=parse_bin(bin_), byte_mode=byte_mode, workers=workers, scheduler=scheduler)
    except ValueError as exc:
        raise fail(str(exc)) from None
    from analyze.dataset.convert import convert as convert_run
    from analyze.read.cluster import ClusterError
    from analyze.read.formats import FileError

    try:
        with _Progress(not sys.stderr.isatty()) as progress:
            done = convert_run(paths, parquet, options, progress=progress)
    except (FileError, ClusterError) as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"{exc.filename or parquet}: offset 0: cannot write the dataset ({exc.strerror or exc})") from None
    typer.echo(
        f"wrote {done.out}: {done.packets:,} packets of {done.records:,} records from {done.hosts} "
        f"host{'s' if done.hosts != 1 else ''} "
        f"({done.bytes_written / 1e6:.1f} MB); analyze it with `ringscope analyze {done.out}`"
    )


class _Progress:
    """A rich progress bar over bytes read, on stderr, only on a terminal."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bar: Any = None

    def __enter__(self) -> Optional[Callable[[Path, int], None]]:
        if self.quiet:
            return None
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("reading"), BarColumn(), DownloadColumn(), TimeRemainingColumn(), transient=True)
        self.bar.__enter__()
        task = self.bar.add_task("read", total=None)

        def advance(_path: Path, size: int) -> None:
            self.bar.update(task, advance=size)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


def _write_trace(result: "Result", out: Path, beside: List[Path]) -> None:
    """Write the trace-event JSON (with the profiler traces BESIDE merged in); where and how big on stderr."""
    from reports.trace import write_trace

    try:
        size = write_trace(result, out, beside)
    except ValueError as exc:  # a --trace-beside file that is not a trace: the message names it
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"{exc.filename or out}: cannot read or write the trace ({exc.strerror or exc})") from None
    typer.echo(f"wrote {out} ({size / 1e6:.1f} MB of trace events)", err=True)


def _write_metrics(result: "Result", out: Path) -> None:
    """Write the Prometheus textfile; where and how big on stderr."""
    from reports.metrics import write_metrics

    try:
        size = write_metrics(result, out)
    except OSError as exc:
        raise fail(f"{out}: cannot write the metrics ({exc.strerror or exc})") from None
    typer.echo(f"wrote {out} ({size / 1e3:.1f} kB of metrics)", err=True)


def _write_report(result: "Result", out: Path, title: Optional[str], detail: Sequence[str] = ()) -> None:
    """Render and write the HTML report; where and how big on stderr. DETAIL: hosts the user asked to see in
    full (--host), each checked against the result's hosts first."""
    from reports.html import write_html

    known = {h.name for h in result.hosts}
    unknown = [h for h in detail if h not in known]
    if unknown:
        names = sorted(known)
        shown = ", ".join(names[:5]) + (f" ... ({len(names)} in all)" if len(names) > 5 else "")
        raise fail(f"--host {unknown[0]}: no such host in this result (hosts: {shown})")
    try:
        size = write_html(result, out, title=title, detail=detail)
    except OSError as exc:
        raise fail(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    typer.echo(f"wrote {out} ({size / 1e6:.1f} MB)", err=True)


# ---- capture (issue 4) ------------------------------------------------------------------------

app.add_typer(capture_app, name="capture")


@capture_app.command()
def top(
    folders: List[Path] = typer.Argument(
        ...,
        help="A running capture: a run folder (RUN), or host folders (an agent's --out, with meta.json and its pcaps).",
    ),
    interval: float = typer.Option(1.0, "--interval", help="Seconds between polls."),
    seconds: Optional[float] = typer.Option(
        None, "--seconds", help="Stop after S seconds (default: at Ctrl-C or SIGTERM)."
    ),
    metrics: Optional[str] = typer.Option(
        None,
        "--metrics",
        metavar="ADDRESS:PORT",
        help="Also serve the latest poll at http://ADDRESS:PORT/metrics for Prometheus (text format, or "
        "OpenMetrics when asked): per host bytes, link speed, re-sent bytes and capture health, per heavy edge "
        "bytes, the iterations so far and the last one's length and bytes. See docs/metrics.md.",
    ),
) -> None:
    """Show a running capture every second: each host's tx/rx rate against its link, the heaviest edges, and the
    iterations finished (from markers; without them found in the ring edges' bytes every 5 s, with a confidence, and
    marked ~ and unsure below 0.8). Reads only what was written since the last poll. A table on a terminal, else
    one line per poll; on Ctrl-C or SIGTERM it polls once more and stops (with --metrics, once a scrape has
    fetched that last poll, or after 20 s)."""
    _analysis_command()
    from analyze.live.view import follow, open_live
    from reports.live import View
    from reports.metrics_endpoint import LINGER_S, MetricsEndpoint

    try:
        live = open_live(folders, interval)
        endpoint = MetricsEndpoint(metrics) if metrics else None
    except (ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    view = View(sys.stdout, sys.stdout.isatty())
    limiter = None
    if endpoint is not None:
        from analyze.live.limiter import LiveLimiter

        limiter = LiveLimiter(live.folders)

    def show(now: "Now", last: bool) -> None:
        view.show(now)
        if endpoint is not None and limiter is not None:
            now.limiter = limiter.poll()
            endpoint.publish(now, last)

    try:
        follow(live, interval, seconds, show)
    finally:
        view.close()
        if limiter is not None:
            limiter.close()
        if endpoint is not None:
            endpoint.close(LINGER_S)


# ---- whatif / profile (issue 5) ---------------------------------------------------------------

_LISTS = "Several values: repeat the option or give a comma list."


@app.command()
def whatif(
    source: Optional[Path] = typer.Argument(
        None,
        help="Optional run directory or result JSON (from `ringscope analyze --json`): gives N, link speed, iteration time, gradient bytes and measured transport efficiency.",
    ),
    model: str = typer.Option(
        "ringscope", "--model", help="paper (the paper's model, exactly) or ringscope (with the refinements below)."
    ),
    profile: Optional[Path] = typer.Option(
        None, "--profile", help="Backward profile: .bk.log (the paper's), JSON or CSV (from `ringscope profile`)."
    ),
    single_iteration_time: Optional[str] = typer.Option(
        None, "--single-iteration-time", help="Single-GPU iteration time T: seconds (0.128) or with unit (128ms)."
    ),
    reduce_cost: Optional[Path] = typer.Option(
        None,
        "--reduce-cost",
        help="Reduction-cost table, 'bytes,seconds' lines (the paper's cuda_vec_add.log); without it the reduction is free.",
    ),
    workers: Optional[List[str]] = typer.Option(
        None, "--workers", help=f"Worker counts N. {_LISTS} (--workers 8 --workers 64 is --workers 8,64)"
    ),
    bandwidth: Optional[List[str]] = typer.Option(
        None, "--bandwidth", help=f"Link rates, e.g. 10G, 25Gbit, 100Gbps, 1e9. {_LISTS}"
    ),
    compression: Optional[List[str]] = typer.Option(
        None, "--compression", help=f"Gradient compression ratios (1 = none). {_LISTS}"
    ),
    latency: str = typer.Option(
        "10us", "--latency", help="ringscope model: per-step latency α (2(N−1) steps per all-reduce); 0 to drop."
    ),
    gpus_per_server: int = typer.Option(
        1,
        "--gpus-per-server",
        help="ringscope model: G GPUs per server for a hierarchical all-reduce (bandwidth is then the server NIC's).",
    ),
    intra_bandwidth: str = typer.Option(
        "1.2Tbit", "--intra-bandwidth", help="ringscope model: bandwidth inside a server (NVLink/PCIe) when G > 1."
    ),
    buckets: str = typer.Option(
        "horovod",
        "--buckets",
        help="ringscope model: horovod (64 MiB fusion, 5 ms cycle) or ddp (25 MiB buckets, first 1 MiB).",
    ),
    fp16: bool = typer.Option(
        False, "--fp16/--fp32", help="ringscope model: gradients communicated in half precision."
    ),
    efficiency: Optional[float] = typer.Option(
        None,
        "--efficiency",
        help="ringscope model: transport efficiency in (0, 1] (rate while communicating ÷ line rate).",
    ),
    json_out: Optional[Path] = typer.Option(
        None, "--json", help="Write {\"scaling\": ...} as JSON to FILE; '-' for stdout."
    ),
) -> None:
    """Full-utilization scaling what-if: would training scale if the network ran at line rate?"""
    _analysis_command()
    from analyze.whatif.request import WhatIfOptions
    from analyze.api import run_whatif

    options = WhatIfOptions(
        model=model,
        profile=profile,
        single_iteration_time=single_iteration_time,
        reduce_cost=reduce_cost,
        workers=workers or (),
        bandwidth=bandwidth or (),
        compression=compression or (),
        latency=latency,
        gpus_per_server=gpus_per_server,
        intra_bandwidth=intra_bandwidth,
        buckets=buckets,
        fp16=fp16,
        efficiency=efficiency,
    )
    try:
        result = run_whatif(source, options)
    except ValueError as exc:
        raise fail(str(exc)) from None
    _show_whatif(result, json_out)


def _show_whatif(result: "WhatIf", json_out: Optional[Path]) -> None:
    """Print the what-if's tables, and write {"scaling": ...} to JSON_OUT ('-': only the JSON, on stdout)."""
    from analyze.model.jsonform import plain
    from analyze.model.result import SCHEMA_VERSION
    from reports.text import render_whatif

    doc = {"schema": SCHEMA_VERSION, "scaling": plain(result)}
    if json_out is not None and str(json_out) == "-":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    print(render_whatif(result))
    if json_out is not None:
        try:
            json_out.write_text(json.dumps(doc, indent=1) + "\n")
        except OSError as exc:
            raise fail(f"{json_out}: cannot write: {exc.strerror or exc}") from None


@app.command()
def profile(
    spec: str = typer.Argument(
        ...,
        metavar="MODULE:FACTORY",
        help="Factory returning (module, make_input[, loss_fn]); MODULE may be a dotted name or a .py path.",
    ),
    batch_size: int = typer.Option(32, "--batch-size", help="Batch size passed to make_input."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    steps: int = typer.Option(5, "--steps", help="Measured steps (after one warm-up), averaged."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Write the profile: .json, .csv, or the paper's .bk.log format; '-' for JSON on stdout."
    ),
) -> None:
    """Record per-parameter gradient-ready times and sizes of a torch model (a backward profile for whatif)."""
    import tempfile

    from analyze.whatif.backward_profile import save_profile
    from analyze.whatif.torch_profile import profile_spec

    try:
        prof = profile_spec(spec, batch_size=batch_size, device=device, steps=steps)
    except ValueError as exc:
        raise fail(str(exc))
    if out is not None and str(out) == "-":
        with tempfile.TemporaryDirectory() as tmp:
            save_profile(prof, Path(tmp) / "profile.json")
            sys.stdout.write((Path(tmp) / "profile.json").read_text())
        return
    print(
        f"{spec}: {prof.tensors} gradient tensors, {prof.gradient_bytes / 1e6:.2f} MB, backward "
        f"{prof.meta['backward_s'] * 1e3:.2f} ms on {prof.meta['device']} (batch {batch_size}, mean of {steps} steps)"
    )
    if out is not None:
        try:
            save_profile(prof, out)
        except OSError as exc:
            raise fail(f"{out}: cannot write: {exc.strerror or exc}")


# ---- report (issue 6) -------------------------------------------------------------------------


@app.command()
def report(
    paths: List[Path] = typer.Argument(
        ...,
        help="A result JSON from `ringscope analyze --json` (drawn without time series) or captures / a capture directory / a `ringscope convert` dataset (analyzed first); optionally also a `ringscope whatif --json` file, whose scaling key fills the what-if section.",
    ),
    out: Path = typer.Option(..., "-o", "--output", help="The HTML file to write."),
    title: Optional[str] = typer.Option(None, "--title", help="Page title (default: 'ringscope report — RUN ID')."),
    link_speed: Optional[str] = typer.Option(
        None, "--link-speed", help="When analyzing captures: link speed for hosts whose meta.json gives none."
    ),
    bin_: Optional[str] = typer.Option(
        None,
        "--bin",
        help="When analyzing captures: bin width of the throughput series (default: chosen from the traffic).",
    ),
    host: List[str] = typer.Option(
        [],
        "--host",
        help="Beyond 16 hosts the figures draw the hosts' spread and a few hosts in full (the stragglers, the "
        "hosts that sent least and most): draw this host in full instead (repeat for several).",
    ),
) -> None:
    """Write one self-contained HTML report (plotly embedded, works offline)."""
    _analysis_command()
    from reports.inputs import split_inputs

    try:
        result, extra, captures = split_inputs(paths)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if result is None:
        from analyze.api import analyze as analyze_run
        from analyze.read.formats import FileError
        from capture.units import parse_bin, parse_link_speed

        try:
            result = analyze_run(
                captures,
                link_speed_bps=parse_link_speed(link_speed) if link_speed else None,
                bin_ns=parse_bin(bin_) if bin_ else None,
            )
        except (FileError, ValueError) as exc:
            raise fail(str(exc)) from None
    replaced = extra.get("scaling") is not None  # a `ringscope whatif --json` document: its what-if is the run's
    if replaced:
        from analyze.model.findings import WhatIf
        from analyze.model.jsonform import from_plain
        from analyze.model.older import upgraded

        try:
            result.scaling = from_plain(WhatIf, upgraded(extra["scaling"], extra.get("schema")))
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise fail(f"the whatif JSON's scaling is not a what-if (from `ringscope whatif --json`): {exc}") from None
    if replaced or result.verdict is None:  # judged again on the new what-if, or never (a result JSON from before)
        from analyze.verdict import judge

        result.verdict = judge(result)
    _write_report(result, out, title, host)


def _usage_error_class() -> "type[UsageError]":
    """The UsageError typer raises: its vendored click's when it has one (newer typer), else click's.

    The vendored one comes first because a standalone click may be installed too (dask brings one),
    and its UsageError is a different class that typer never raises.
    """
    try:
        from typer._click.exceptions import UsageError as VendoredUsageError

        return VendoredUsageError
    except ImportError:
        from click.exceptions import UsageError as ClickUsageError

        return ClickUsageError


def main() -> None:
    """Console-script entry point: usage errors end in one line, like every other user error."""
    import sys

    usage_error = _usage_error_class()
    try:
        code = app(standalone_mode=False)
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError" or len(sys.argv) < 2:
            app()  # no arguments: show the help, as typer does
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        typer.echo(f"ringscope: error: {exc.format_message()}{where}", err=True)
        sys.exit(2)
    except typer.Abort:
        typer.echo("ringscope: interrupted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def script() -> None:
    """The `ringscope` executable: main(), then, after an analysis command, exit without tearing the
    interpreter down. Freeing pandas, pyarrow and numpy module by module took 0.1-0.15 s of every analyze,
    after its output was written and its files closed; outputs are flushed first."""
    import sys

    code: str | int | None = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    if not _fast_exit:
        sys.exit(code)
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what sys.exit does with a message
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (| head), or a stream already closed
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    script()

"""`ringscope analyze`: options in, result out — a human summary, JSON, and table files.

Kept out of cli.py so that `ringscope --help` does not import numpy or pandas.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from analyze.read.formats import FileError
from capture.units import format_rate, parse_bin, parse_duration, parse_rate, parse_size


# What one worker reads while this process imports pandas and the table code (0.25-0.3 s here, at 4-4.6 GB/s
# a core): up to this much work (bytes, plus engine.STREAM_COST_BYTES a host) goes to one worker
# (analyze.read.engine.workers_beside).
TABLE_IMPORT_BYTES = 1 << 30


def _die(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"ringscope: error: {message}", err=True)
    return typer.Exit(code=code)


def run_analyze(paths: list[Path], *, json_out: Optional[Path], out: Optional[Path], link_speed: Optional[str],
                bin_: str, byte_mode: str, workers: Optional[int], launch_order: Optional[str] = None,
                gradient_bytes: Optional[str] = None, nccl_log: Optional[Path] = None,
                html_out: Optional[Path] = None, single_iteration_time: Optional[str] = None,
                scheduler: Optional[str] = None, iterations: Optional[int] = None) -> None:
    """Parse options, analyze, and write what was asked for; user errors end in one line."""
    try:

        order = [h.strip() for h in launch_order.split(",") if h.strip()] if launch_order else None
        grad = parse_size(gradient_bytes) if gradient_bytes else None
        if nccl_log is not None and not nccl_log.is_file():
            raise ValueError(f"{nccl_log}: no such NCCL log file")
        link_bps = parse_rate(link_speed) if link_speed else None
        bin_ns = parse_bin(bin_)
        if byte_mode not in ("ip", "wire", "payload"):
            raise ValueError(f"bad --bytes {byte_mode!r}: choose ip, wire or payload")
        if workers is not None and workers < 1:
            raise ValueError("--workers must be at least 1")
        if workers is not None and scheduler is not None:
            raise ValueError("--workers sets local processes and --scheduler reads on a Dask cluster: give one of them")
        if iterations is not None and iterations < 1:
            raise ValueError(f"bad --iterations {iterations}: must be at least 1")
        t_single = parse_duration(single_iteration_time) / 1e9 if single_iteration_time else None
        if t_single is not None and t_single <= 0:
            raise ValueError(f"bad --single-iteration-time {single_iteration_time!r}: must be longer than 0")
    except ValueError as exc:
        raise _die(str(exc)) from None

    from analyze.read.cluster import ClusterError
    from analyze.read.reading import start_reading

    quiet = str(json_out) == "-" or not sys.stderr.isatty()
    try:
        with _progress(quiet) as progress:
            reading = start_reading(paths, bin_ns=bin_ns, byte_mode=byte_mode, workers=workers, progress=progress,
                                    scheduler=scheduler, busy_bytes=TABLE_IMPORT_BYTES)
            from analyze.api import finish  # pandas and the table code load while a local pool reads

            result = finish(reading, link_speed_bps=link_bps, launch_order=order, gradient_bytes=grad,
                            nccl_log=nccl_log, single_iteration_time_s=t_single, iterations=iterations)
    except (FileError, ClusterError) as exc:
        raise _die(str(exc)) from None
    if json_out is not None:
        try:
            result.write_json(json_out)
        except OSError as exc:
            raise _die(f"{json_out}: cannot write ({exc.strerror})") from None
    if out is not None:
        from reports.tables import write_tables

        try:
            written = write_tables(result, out)
        except OSError as exc:
            raise _die(f"{out}: cannot write tables ({exc.strerror})") from None
        typer.echo(f"wrote {len(written)} table files to {out}", err=True)
    if html_out is not None:
        from reports.cli_report import write_report

        write_report(result, html_out, None)
    if str(json_out) != "-":
        typer.echo(summary_text(result))


class _progress:
    """A rich progress bar over bytes read, on stderr, only on a terminal."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bar = None

    def __enter__(self):  # noqa: ANN204 - returns the callback or None
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


def summary_text(result) -> str:  # noqa: ANN001 - analyze.result.Result, imported lazily
    """The human summary: captures, hosts with utilization, top flows, warnings."""
    lines = []
    packets = sum(c.packets for c in result.captures)
    lines.append(f"{len(result.captures)} capture file(s), {packets:,} packets, {len(result.hosts)} host(s), "
                 f"{len(result.flows):,} flow(s); bytes counted as {result.byte_mode}, bins of {result.bin_ns / 1e6:g} ms")
    lines.append("")
    lines.append(f"{'host':<20} {'link':>12} {'tx bytes':>15} {'rx bytes':>15}  {'tx util mean/busy/while-busy/p99':>34}")
    for h in result.hosts:
        u = h.tx_utilization
        link = format_rate(h.link_speed_bps) + ("*" if h.link_speed_source == "assumed" else "")
        lines.append(f"{h.name[:20]:<20} {link:>12} {h.tx_bytes:>15,} {h.rx_bytes:>15,}  "
                     f"{u.mean:>8.1%} {u.busy_fraction:>7.1%} {u.while_busy:>8.1%} {u.p99:>7.1%}")
    lines.append("")
    lines.append("top flows (by bytes):")
    for f in result.flows[:10]:
        lines.append(f"  {f.src}:{f.sport} -> {f.dst}:{f.dport} {f.proto:<5} {f.bytes:>15,} B "
                     f"{format_rate(f.mean_bps):>14}  retrans {f.retransmitted_bytes:,} B  (view: {f.view})")
    if len(result.flows) > 10:
        lines.append(f"  ... and {len(result.flows) - 10:,} more")
    if "topology" in result.extra:
        from analyze.collective import collective_lines

        lines.extend(collective_lines(result.extra))
    if result.extra.get("scaling"):
        from analyze.scaling_result import scaling_lines

        lines.extend(scaling_lines(result.extra["scaling"]))
    for a in result.assumptions:
        lines.append(f"assumed: {a}")
    for w in result.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)

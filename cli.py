"""ringscope command line: a thin face over the capture, analyze and reports libraries.

Heavy libraries (numba, pandas, plotly, torch) are imported inside the commands so that
`ringscope --help` stays fast.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(
    name="ringscope",
    help="Is the network the bottleneck of your distributed training job? Capture, analyze, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print one clear error line on stderr and return the Exit to raise."""
    typer.echo(f"ringscope: error: {message}", err=True)
    return typer.Exit(code=code)


# ---- analyze ---------------------------------------------------------------------------------


@app.command()
def analyze(
    paths: List[Path] = typer.Argument(..., help="Capture directory (run.json + one folder per host), folders of pcaps (searched recursively) or pcap/pcapng files, optionally gzip-compressed."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the result object (JSON, schema 1) to FILE; '-' for stdout."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the tables (flows, hosts, series) as CSV and Parquet into DIR."),
    link_speed: Optional[str] = typer.Option(None, "--link-speed", help="Link speed for hosts whose meta.json gives none, e.g. 25Gbit, 100G, 1e9."),
    bin_: str = typer.Option("10ms", "--bin", help="Bin width of the throughput series, e.g. 1ms, 10ms, 0.5s."),
    byte_mode: str = typer.Option("ip", "--bytes", help="Byte accounting: ip (IP header length, default), wire (ip + Ethernet framing per MTU frame), payload (TCP/UDP payload)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Local worker processes for reading files (default: one per core)."),
) -> None:
    """Read captures and print a flow and link-utilization summary."""
    from analyze.cli_analyze import run_analyze

    run_analyze(paths, json_out=json_out, out=out, link_speed=link_speed, bin_=bin_, byte_mode=byte_mode, workers=workers)


# ---- capture (issue 4) ------------------------------------------------------------------------
# ---- whatif / profile (issue 5) ---------------------------------------------------------------
# ---- report (issue 6) -------------------------------------------------------------------------


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()

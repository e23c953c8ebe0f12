"""`ringscope report` and `ringscope analyze --html`: write the HTML report.

PATH is either a result JSON written by `ringscope analyze --json` (rendered as it is: the JSON holds the
summaries, not the time series, so those sections say how to get them) or captures / a capture directory
(analyzed first, so every section is drawn). Kept out of cli.py so `ringscope --help` stays fast.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer


def _die(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"ringscope: error: {message}", err=True)
    return typer.Exit(code=code)


def is_result_json(paths: list[Path]) -> bool:
    """One path, a file that starts with '{' (JSON), not a capture."""
    if len(paths) != 1 or not paths[0].is_file():
        return False
    try:
        with paths[0].open("rb") as f:
            head = f.read(64).lstrip()
    except OSError:
        return False
    return head.startswith(b"{")


def load_result_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable result JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("hosts", doc.get("result", {}).get("hosts") if
                                                             isinstance(doc.get("result"), dict) else None), list):
        raise ValueError(f"{path}: not a result JSON from `ringscope analyze --json` (no 'hosts' list)")
    return doc


def write_report(result: Any, out: Path, title: Optional[str]) -> None:
    """Render and write; prints where and how big on stderr. Raises typer.Exit on write errors."""
    from reports.html import write_html

    try:
        size = write_html(result, out, title=title)
    except OSError as exc:
        raise _die(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    typer.echo(f"wrote {out} ({size / 1e6:.1f} MB)", err=True)


def run_report(paths: list[Path], *, out: Path, title: Optional[str], link_speed: Optional[str], bin_: str) -> None:
    """`ringscope report PATH... -o FILE`."""
    if is_result_json(paths):
        try:
            result: Any = load_result_json(paths[0])
        except ValueError as exc:
            raise _die(str(exc)) from None
    else:
        from analyze.formats import FileError
        from analyze.units import parse_duration, parse_rate

        try:
            link_bps = parse_rate(link_speed) if link_speed else None
            bin_ns = parse_duration(bin_)
            if bin_ns <= 0:
                raise ValueError(f"bad --bin {bin_!r}: must be longer than 0")
        except ValueError as exc:
            raise _die(str(exc)) from None
        from analyze.api import analyze

        try:
            result = analyze(paths, link_speed_bps=link_bps, bin_ns=bin_ns)
        except FileError as exc:
            raise _die(str(exc)) from None
        except ValueError as exc:
            raise _die(str(exc)) from None
    write_report(result, out, title)

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


def is_json(path: Path) -> bool:
    """A file whose first non-blank byte is '{' (a capture never starts so)."""
    if not path.is_file():
        return False
    try:
        with path.open("rb") as f:
            head = f.read(64).lstrip()
    except OSError:
        return False
    return head.startswith(b"{")


def load_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object (a result from `ringscope analyze --json` or "
                         f"`ringscope whatif --json`)")
    if isinstance(doc.get("result"), dict) and "hosts" not in doc:
        doc = doc["result"]
    return doc


def split_inputs(paths: list[Path]) -> tuple[Optional[dict[str, Any]], dict[str, Any], list[Path]]:
    """(result JSON or None, extra keys from other JSONs such as whatif's {"scaling": ...}, capture paths)."""
    result, extra, captures = None, {}, []
    for p in paths:
        if not is_json(p):
            captures.append(p)
            continue
        doc = load_json(p)
        if isinstance(doc.get("hosts"), list):
            if result is not None:
                raise ValueError(f"{p}: a second result JSON; give one run per report")
            result = doc
        else:
            extra.update(doc)
    if result is not None and captures:
        raise ValueError("give either a result JSON or captures, not both")
    if result is None and not captures:
        raise ValueError("no result JSON and no captures among the paths (a whatif JSON alone has no run to report)")
    return result, extra, captures


def write_report(result: Any, out: Path, title: Optional[str]) -> None:
    """Render and write; prints where and how big on stderr. Raises typer.Exit on write errors."""
    from reports.html import write_html

    try:
        size = write_html(result, out, title=title)
    except OSError as exc:
        raise _die(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    typer.echo(f"wrote {out} ({size / 1e6:.1f} MB)", err=True)


def run_report(paths: list[Path], *, out: Path, title: Optional[str], link_speed: Optional[str], bin_: str) -> None:
    """`ringscope report PATH... -o FILE`: a result JSON or captures, plus optional extra JSONs (whatif --json)."""
    try:
        doc, extra, captures = split_inputs(paths)
    except ValueError as exc:
        raise _die(str(exc)) from None
    if doc is not None:
        doc.update(extra)
        result: Any = doc
    else:
        from analyze.read.formats import FileError
        from capture.units import parse_bin, parse_rate

        try:
            link_bps = parse_rate(link_speed) if link_speed else None
            bin_ns = parse_bin(bin_)
        except ValueError as exc:
            raise _die(str(exc)) from None
        from analyze.api import analyze

        try:
            result = analyze(captures, link_speed_bps=link_bps, bin_ns=bin_ns)
        except (FileError, ValueError) as exc:
            raise _die(str(exc)) from None
        result.extra.update(extra)
    write_report(result, out, title)

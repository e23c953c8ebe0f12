"""What `ringscope report` is given besides captures: a result JSON (`ringscope analyze --json`, drawn as it
is: it holds the summaries, not the time series) and extra JSON documents such as `ringscope whatif --json`'s
{"scaling": ...}. JSON only: captures are analyzed by the caller, never read here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional


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
    """A JSON object written by ringscope (a result, or `whatif --json`'s document); a result saved inside
    {"result": ...} is unwrapped. Every failure is one ValueError line naming the file."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not a result JSON (from `ringscope analyze --json`): {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(
            f"{path}: expected a JSON object (a result from `ringscope analyze --json` or `ringscope whatif --json`)"
        )
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


__all__ = ["is_json", "load_json", "split_inputs"]

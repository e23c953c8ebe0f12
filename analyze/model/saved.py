"""A result saved as JSON (`ringscope analyze --json`), read back as the typed Result, and the other JSON
documents ringscope writes (`ringscope whatif --json`'s {"scaling": ...}).

Why apart from the analysis: `ringscope report RESULT.json` and `ringscope whatif RESULT.json` read these files
and never read captures, so this module imports the Result and nothing that analyzes. User errors are ValueError
with one line naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyze.model.result import Result

__all__ = ["is_result", "load_json", "read_result", "result_from_json"]

NOT_A_RESULT = "not a result JSON (from `ringscope analyze --json`)"


def load_json(path: Path) -> dict[str, Any]:
    """A JSON object written by ringscope (a result, or `whatif --json`'s document); a result saved inside
    {"result": ...} is unwrapped. Every failure is one ValueError line naming the file."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: {NOT_A_RESULT}: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(
            f"{path}: expected a JSON object (a result from `ringscope analyze --json` or `ringscope whatif --json`)"
        )
    if isinstance(doc.get("result"), dict) and "hosts" not in doc:
        doc = doc["result"]
    return doc


def is_result(doc: dict[str, Any]) -> bool:
    """Whether a JSON object is an analysis result (it has the hosts list every result has)."""
    return isinstance(doc.get("hosts"), list)


def result_from_json(doc: dict[str, Any], path: Path, complete: bool = False) -> Result:
    """The Result a result JSON read from PATH holds (without its tables); one that is not a result is one
    ValueError line. COMPLETE: every required key must be there (a report draws all of it); without it, what a
    partial document does not say is unknown (the what-if reads a few keys)."""
    if not is_result(doc):
        raise ValueError(f"{path}: {NOT_A_RESULT}: it has no hosts list")
    try:
        return Result.from_json(doc, complete)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a record where a list or number belongs
        raise ValueError(f"{path}: {NOT_A_RESULT}: {exc}") from None


def read_result(path: Path) -> Result:
    """The Result a result JSON file holds."""
    return result_from_json(load_json(path), path)

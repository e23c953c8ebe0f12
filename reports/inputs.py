"""What `ringscope report` is given besides captures: a result JSON (`ringscope analyze --json`, read back as the
typed Result and drawn as it is: it holds the summaries, not the time series) and extra JSON documents such as
`ringscope whatif --json`'s {"scaling": ...}. JSON only: captures are analyzed by the caller, never read here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from analyze.model.saved import is_result, load_json, result_from_json
from analyze.model.result import Result


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


def split_inputs(paths: list[Path]) -> tuple[Optional[Result], dict[str, Any], list[Path]]:
    """(the result a result JSON holds, or None; the keys of the other JSONs such as whatif's {"scaling": ...};
    the capture paths)."""
    result: Optional[Result] = None
    extra: dict[str, Any] = {}
    captures: list[Path] = []
    for p in paths:
        if not is_json(p):
            captures.append(p)
            continue
        doc = load_json(p)
        if is_result(doc):
            if result is not None:
                raise ValueError(f"{p}: a second result JSON; give one run per report")
            result = result_from_json(doc, p, complete=True)
        else:
            extra.update(doc)
    if result is not None and captures:
        raise ValueError("give either a result JSON or captures, not both")
    if result is None and not captures:
        raise ValueError("no result JSON and no captures among the paths (a whatif JSON alone has no run to report)")
    return result, extra, captures


__all__ = ["is_json", "load_json", "split_inputs"]

"""A trace-event JSON file as profilers write it (PyTorch's Kineto: `torch.profiler` `export_chrome_trace` or
`tensorboard_trace_handler`), gzip-compressed or not: read whole, checked to be one, for the trace it is merged
into (reports.trace) and the ranks' own timing (analyze.wire.rank_profiles)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

__all__ = ["read_trace"]


def read_trace(path: Path) -> dict[str, Any]:
    """A trace-event JSON file, gzip-compressed or not (torch.profiler.tensorboard_trace_handler writes both)."""
    raw = path.read_bytes()
    try:
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (ValueError, EOFError, OSError) as exc:  # not JSON, or a cut or damaged gzip stream
        raise ValueError(f"{path}: not a trace-event JSON file ({exc})") from None
    if isinstance(doc, list):  # the JSON array form of the format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{path}: not a trace-event file (no traceEvents list)")
    return doc

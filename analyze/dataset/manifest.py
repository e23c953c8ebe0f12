"""What a ringscope Parquet dataset is made of, and how one is recognised.

Layout (documented for users in docs/dataset.md):

    OUT/ringscope-dataset.json        this manifest: schema, how the run was read, hosts, run.json, meta.json
    OUT/packets/host=H/part-0.parquet one row per IP packet, headers only
    OUT/flows/host=H/part-0.parquet   one row per flow as host H's capture saw it, with its counters
    OUT/flow_bins/host=H/...          bytes per flow and time bin
    OUT/samples/host=H/...            the transport's sequence samples (what round trips and clocks are made of)
    OUT/files/host=H/...              each capture file: format, records, per-kind counts, warnings
    OUT/meta/H/markers.jsonl          the host's iteration markers, as the job wrote them (when it did)

The manifest is written last: a directory without it is a conversion that did not finish.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from analyze.read.formats import FileError

MANIFEST = "ringscope-dataset.json"
FORMAT = "ringscope-dataset"
SCHEMA = 1
PART = "part-0.parquet"  # each table's one file per host
REQUIRED = ("bin_ns", "byte_mode", "hosts", "warnings")


class DatasetError(FileError):
    """A dataset that cannot be written or read back (one line: path, offset, cause), met as any unreadable input."""


def is_dataset(path: Path) -> bool:
    """Whether PATH is the top of a ringscope dataset (a folder holding the manifest)."""
    return (path / MANIFEST).is_file()


def partition(table: str, host: str) -> str:
    """A table's folder for one host, Hive style (host=NAME), with characters a path cannot hold escaped."""
    return f"{table}/host={quote(host, safe='')}"


def markers_path(host: str) -> str:
    """Where a host's copied markers file lies, relative to the dataset's top."""
    return f"meta/{quote(host, safe='')}/markers.jsonl"


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the dataset at ROOT; DatasetError when it is not one this version reads."""
    path = root / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: offset 0: not a readable dataset manifest ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DatasetError(f"{path}: offset 0: not a ringscope dataset manifest")
    if doc.get("schema") != SCHEMA:
        raise DatasetError(
            f"{path}: offset 0: dataset schema {doc.get('schema')!r}; this ringscope reads schema {SCHEMA}"
        )
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise DatasetError(f"{path}: offset 0: dataset manifest lacks {', '.join(missing)}")
    return doc

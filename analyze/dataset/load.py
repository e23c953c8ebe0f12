"""A Parquet dataset read back as the per-host scans an analysis starts from (`ringscope analyze OUT`).

The tables hold each host's scan bit for bit (analyze.dataset.columns), so analysis from here on is the very
code that runs after reading pcaps, and gives the same result. Only how the scans were made is fixed: the
series' bin width and byte accounting are the conversion's (the analysis may choose wider bins from the traffic,
analyze.read.bin_choice), and asking for others is an error that says how to get them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from capture import layout

from analyze.dataset import columns
from analyze.dataset.manifest import MANIFEST, PART, DatasetError, partition, read_manifest
from analyze.read.inputs import HostInput, RunInput
from analyze.read.reading import Reading
from analyze.read.scan import StreamScan


def read_dataset(root: Path, *, bin_ns: Optional[int], byte_mode: Optional[str]) -> Reading:
    """A Reading whose scans come from the dataset at ROOT; DatasetError when it cannot be read back or was
    converted with another bin width or byte accounting than BIN_NS / BYTE_MODE (None: the dataset's own)."""
    doc = read_manifest(root)
    own_bin, own_bytes = int(doc["bin_ns"]), str(doc["byte_mode"])
    if (bin_ns is not None and bin_ns != own_bin) or (byte_mode is not None and byte_mode != own_bytes):
        raise DatasetError(
            f"{root}: offset 0: the dataset's series were binned at {own_bin / 1e6:g} ms counting {own_bytes} "
            f"bytes; analyze it without --bin/--bytes, or convert the captures again with the ones wanted"
        )
    try:
        hosts = [
            HostInput(
                name=str(h["name"]),
                files=[Path(f) for f in h["files"]],
                meta=layout.HostMeta(h["meta"]) if isinstance(h.get("meta"), dict) else None,
                markers=root / h["markers"] if h.get("markers") else None,
            )
            for h in doc["hosts"]
        ]
    except (KeyError, TypeError, AttributeError) as exc:
        raise DatasetError(
            f"{root / MANIFEST}: offset 0: a host entry of the manifest is malformed ({exc!r})"
        ) from None
    run_input = RunInput(
        hosts=hosts, run=doc.get("run"), root=Path(doc["root"]) if doc.get("root") else None, warnings=doc["warnings"]
    )
    entries = doc["hosts"]

    def collect() -> list[StreamScan]:
        return [_scan(root, h, own_bin) for h in entries]

    return Reading(run_input=run_input, collect=collect, bin_ns=own_bin, byte_mode=own_bytes, given_ns=bin_ns)


def _scan(root: Path, entry: dict[str, Any], bin_ns: int) -> StreamScan:
    """One host's scan from its four tables."""
    flows, bins, samples, files = (
        _table(root, name, entry["name"]) for name in ("flows", "flow_bins", "samples", "files")
    )
    scan = columns.stream_scan(flows, bins, samples, files, bin_ns)
    scan.joinable, scan.folded = bool(entry.get("joinable", True)), bool(entry.get("folded", False))
    return scan


def _table(root: Path, name: str, host: str) -> pa.Table:
    path = root / partition(name, host) / PART
    try:
        return pq.read_table(path, partitioning=None)
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"{path}: offset 0: cannot read the dataset's {name} table ({exc})") from None

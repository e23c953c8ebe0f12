"""Where an analysis reads from: a Parquet dataset that `ringscope convert` wrote is read back, anything else is
scanned as captures. Decided here, above both, so the read path never imports the dataset layer (which is built
on it), and without importing pandas, so the CLI starts the scans before it imports the table code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from analyze.dataset.manifest import is_dataset
from analyze.read.work import Progress
from analyze.read.reading import ReadOptions, Reading, start_reading


def open_source(
    paths: Sequence[str | Path],
    options: ReadOptions = ReadOptions(),
    *,
    progress: Optional[Progress] = None,
    busy_bytes: int = 0,
) -> Reading:
    """A dataset's scans read back (its own bin width and byte mode unless OPTIONS give them), or the captures'
    scans started (analyze.read.reading.start_reading, whose options and errors these are)."""
    if len(paths) == 1 and is_dataset(Path(paths[0])):
        from analyze.dataset.load import read_dataset  # pyarrow, only for a dataset

        return read_dataset(Path(paths[0]), bin_ns=options.bin_ns, byte_mode=options.byte_mode)
    return start_reading(paths, options, progress=progress, busy_bytes=busy_bytes)

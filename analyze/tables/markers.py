"""Read the iteration markers training scripts wrote (markers.jsonl) into one table.

Markers are small (one line per rank per iteration), so a plain line reader is right here; a bad
line is skipped and counted, never fatal, because a killed job often leaves half a line behind.
"""

from __future__ import annotations

import json

import pandas as pd

from analyze.read.inputs import HostInput

REQUIRED = ("rank", "iteration", "start_ns", "end_ns")


def load_markers(hosts: list[HostInput], warnings: list[str]) -> pd.DataFrame:
    """All hosts' markers: host, rank, local_rank, iteration, start_ns, end_ns, plus any metadata keys."""
    rows = []
    for h in hosts:
        if h.markers is None:
            continue
        bad = 0
        first_bad = 0
        offset = 0
        with open(h.markers, "rb") as fh:
            for raw in fh:
                try:
                    row = json.loads(raw)
                    if not isinstance(row, dict) or any(k not in row for k in REQUIRED):
                        raise ValueError("missing keys")
                    row["host"] = h.name
                    rows.append(row)
                except ValueError:
                    if bad == 0:
                        first_bad = offset
                    bad += 1
                offset += len(raw)
        if bad:
            warnings.append(f"{h.markers}: offset {first_bad}: {bad} marker line(s) unreadable and skipped")
    if not rows:
        return pd.DataFrame(columns=["host", "rank", "local_rank", "iteration", "start_ns", "end_ns"])
    df = pd.DataFrame(rows)
    if "local_rank" not in df:
        df["local_rank"] = 0
    return df.sort_values(["iteration", "rank"], kind="stable").reset_index(drop=True)


__all__ = ["load_markers"]

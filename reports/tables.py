"""Table exports: every analyzer table as CSV and Parquet, same column names as the JSON form."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from analyze.model.result import Result


def hosts_frame(result: Result) -> pd.DataFrame:
    """One row per host with the utilization summaries flattened (tx_utilization_mean, ...)."""
    rows = []
    for h in result.hosts:
        row = {k: v for k, v in asdict(h).items() if not isinstance(v, dict)}
        row["addresses"] = ",".join(h.addresses)
        for direction in ("tx", "rx"):
            for k, v in asdict(getattr(h, f"{direction}_utilization")).items():
                row[f"{direction}_utilization_{k}"] = v
        for k, v in h.drops.items():
            row[k] = v
        rows.append(row)
    return pd.DataFrame(rows)


def write_tables(result: Result, out: Path) -> list[Path]:
    """Write flows, flow_views, hosts, host_series, flow_series and the transport's per-flow TCP counters and
    samples over time (transport, transport_samples) as .csv and .parquet into `out`. ValueError for a result
    without tables (one read back from its JSON, which holds the summaries only)."""
    t = result.tables
    if t is None:
        raise ValueError("this result has no tables (a result JSON holds only the summaries): analyze the captures")
    out.mkdir(parents=True, exist_ok=True)
    tables = {
        "flows": t.flows,
        "flow_views": t.flow_views,
        "hosts": hosts_frame(result),
        "host_series": t.host_series,
        "flow_series": t.flow_series,
    }
    if t.transport is not None and t.transport_samples is not None:
        tables["transport"] = t.transport
        tables["transport_samples"] = t.transport_samples
    written = []
    for name, df in tables.items():
        csv, parquet = out / f"{name}.csv", out / f"{name}.parquet"
        df.to_csv(csv, index=False)
        df.to_parquet(parquet, index=False)
        written += [csv, parquet]
    return written

"""Table exports: every analyzer table as CSV and Parquet, same column names as the JSON form."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd


def hosts_frame(result) -> pd.DataFrame:  # noqa: ANN001 - analyze.result.Result
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


def write_tables(result, out: Path) -> list[Path]:  # noqa: ANN001
    """Write flows, flow_views, hosts, host_series, flow_series and the transport's per-flow TCP counters and
    samples over time (transport, transport_samples) as .csv and .parquet into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    t = result.tables
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

"""The report's figures beyond a few dozen hosts: how the hosts spread, and a few hosts in detail.

One row per host (reports.figures.utilization_figure) reads well up to DETAIL_HOSTS hosts; at 512 hosts the rows
took 8.3 MB of a 17 MB report and no screen shows them, and at 4,096 hosts one row per host (4,096 y axes) is
neither drawable nor readable. Beyond DETAIL_HOSTS the report draws, per time bucket (utilization) or per iteration
(bytes sent), the hosts' median, their 5th-95th percentile band and their extremes, so a slow host or a quiet stretch
shows as a band or an outlying line; and it draws in full only the hosts worth reading: the ones the user names
(`ringscope report --host`), else the stragglers and the hosts that sent least and most.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from analyze.model.findings import Iterations, Straggler
from analyze.model.result import HostSummary
from reports.downsample import bucket_plan
from reports.figures import LINE_RATE_COLOR, PALETTE, RX_COLOR, TX_COLOR, arr, base_layout, esc, host_bytes_line

if TYPE_CHECKING:  # the tables are pandas frames; pandas itself is imported by the code that builds them
    import pandas as pd

DETAIL_HOSTS = 16  # up to this many hosts every host gets its own row; beyond, the spread and a few hosts
SHOWN_HOSTS = 6  # hosts drawn in full beyond DETAIL_HOSTS when the user names none
SPREAD_POINTS = 1000  # time buckets of the spread figure
BAND = "rgba(31,119,180,0.18)"


def many(hosts: Sequence[Any]) -> bool:
    """Whether the report summarizes the hosts instead of drawing each."""
    return len(hosts) > DETAIL_HOSTS


def detail_hosts(hosts: Sequence[HostSummary], stragglers: Sequence[Straggler], asked: Sequence[str]) -> list[str]:
    """The hosts drawn in full beside the spread: ASKED (the user's --host, checked by the caller), else the
    stragglers' hosts, then the hosts that sent least and most, SHOWN_HOSTS in all."""
    if asked:
        return list(asked)
    names = {h.name for h in hosts}
    chosen = list(dict.fromkeys(s.host for s in stragglers if s.host in names))
    by_tx = sorted(hosts, key=lambda h: (h.tx_bytes, h.name))
    for h in [x for pair in zip(by_tx, reversed(by_tx)) for x in pair]:
        if len(chosen) >= SHOWN_HOSTS:
            break
        if h.name not in chosen:
            chosen.append(h.name)
    return chosen


def _bucket_matrix(
    host_series: pd.DataFrame, names: list[str], direction: str, t0_ns: int, width_ns: int, buckets: int, bin_ns: int
) -> np.ndarray:
    """hosts x buckets: each host's mean utilization in each bucket (bins with no traffic count as 0)."""
    part = host_series[host_series["direction"] == direction]
    code = np.asarray(part["host"].astype("category").cat.set_categories(names).cat.codes.to_numpy(), dtype=np.int64)
    t = part["t_ns"].to_numpy(np.int64)
    keep = (code >= 0) & (t >= t0_ns) & (t < t0_ns + width_ns * buckets)
    cell = code[keep] * buckets + (t[keep] - t0_ns) // width_ns
    sums = np.bincount(cell, weights=part["utilization"].to_numpy(np.float64)[keep], minlength=len(names) * buckets)
    return sums.reshape(len(names), buckets) / max(1, width_ns // bin_ns)


def _band(
    x: dict[str, str], rows: np.ndarray, label: str, color: str, yaxis: str, first: bool, unit: str
) -> list[dict[str, Any]]:
    """Traces of the spread over rows (axis 0): the 5th-95th percentile band, the median and the maximum."""
    p5, p50, p95 = np.percentile(rows, [5, 50, 95], axis=0)
    top = rows.max(axis=0)
    common = {"type": "scatter", "mode": "lines", "x": x, "xaxis": "x", "yaxis": yaxis}
    hover = "%{y:" + unit + "}<extra>" + esc(label) + " WHO</extra>"
    return [
        {**common, "name": "p95", "y": arr(p95, "f4"), "line": {"width": 0}, "showlegend": False,
         "legendgroup": "band", "hovertemplate": hover.replace("WHO", "p95")},
        {**common, "name": "5th-95th percentile of the hosts", "y": arr(p5, "f4"), "line": {"width": 0},
         "fill": "tonexty", "fillcolor": BAND, "showlegend": first, "legendgroup": "band",
         "hovertemplate": hover.replace("WHO", "p5")},
        {**common, "name": "median host", "y": arr(p50, "f4"), "line": {"color": color, "width": 1.6},
         "showlegend": first, "legendgroup": "median", "hovertemplate": hover.replace("WHO", "median")},
        {**common, "name": "busiest host", "y": arr(top, "f4"), "line": {"color": color, "width": 1, "dash": "dot"},
         "showlegend": first, "legendgroup": "max", "hovertemplate": hover.replace("WHO", "max")},
    ]  # fmt: skip


def utilization_spread_figure(
    host_series: pd.DataFrame, hosts: Sequence[HostSummary], bin_ns: int, t0_ns: int, t1_ns: int
) -> dict[str, Any]:
    """Two rows, tx and rx: per time bucket, the hosts' mean utilization spread (median, 5-95 % band, max)."""
    names = [str(h.name) for h in hosts]
    per, buckets = bucket_plan(t0_ns, t1_ns, bin_ns, 2 * SPREAD_POINTS)
    width = per * bin_ns
    x = arr(np.arange(buckets, dtype=np.float64) * (width / 1e9))
    data: list[dict[str, Any]] = []
    layout = base_layout(520, hovermode="x unified")
    for i, (direction, color) in enumerate((("tx", TX_COLOR), ("rx", RX_COLOR))):
        rows = _bucket_matrix(host_series, names, direction, t0_ns, width, buckets, bin_ns)
        yname = "y" if i == 0 else "y2"
        data += _band(x, rows, direction, color, yname, i == 0, ".1%")
        layout["yaxis" if i == 0 else "yaxis2"] = {
            "domain": [0.55, 1.0] if i == 0 else [0.0, 0.45],
            "title": {"text": f"{direction} utilization"},
            "tickformat": ".0%",
            "rangemode": "tozero",
            "anchor": "x",
        }
    layout["xaxis"] = {"title": {"text": "time since first packet (s)"}, "anchor": "y2", "ticksuffix": " s"}
    layout["shapes"] = [
        {"type": "line", "xref": "x domain", "x0": 0, "x1": 1, "yref": y, "y0": 1, "y1": 1,
         "line": {"color": LINE_RATE_COLOR, "width": 1.5, "dash": "dash"}}
        for y in ("y", "y2")
    ]  # fmt: skip
    return {"data": data, "layout": layout}


def iteration_spread_traces(
    iterations: Iterations, hosts: Sequence[str], detail: Sequence[str]
) -> list[dict[str, Any]]:
    """Bytes sent per iteration: the hosts' spread (median, 5-95 % band, max) and the DETAIL hosts' own lines."""
    per = iterations.per_iteration or []
    idx = arr(np.array([float(it.index) for it in per]))
    values = np.array([[float(it.bytes_by_host.get(h, 0)) for it in per] for h in hosts], dtype=np.float64)
    data = _band(idx, values, "bytes", TX_COLOR, "y", True, ".4s")
    for k, h in enumerate(detail):
        line = host_bytes_line(per, h, PALETTE[(k + 2) % len(PALETTE)])
        if line is not None:
            data.append(line)
    for trace in data:
        trace.pop("xaxis", None)
        trace.pop("yaxis", None)
    return data

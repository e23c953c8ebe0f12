"""Plotly figure specs (plain dicts: data + layout) for the HTML report, built from the result's tables and its
typed findings (analyze.model.findings: Iterations, WhatIf, Transport, Clock).

Arrays go in plotly's compact typed-array form ({"dtype", "bdata": base64}), so a 4,000-point trace costs
~64 KB, not ~200 KB of decimal text. Colors that depend on the light/dark scheme are set by the page's
script; the specs here only name the series colors. Every label that comes from the capture (host names,
addresses) is HTML-escaped, because plotly renders a subset of HTML in labels.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from analyze.model.findings import (
    Clock,
    IterationRecord,
    Iterations,
    Measured,
    Rdma,
    Straggler,
    Sweep,
    Transport,
    WhatIf,
)
from analyze.model.result import HostSummary
from reports.downsample import Line, bucket_mean, bucket_share, sparse_line

if TYPE_CHECKING:  # the tables are pandas frames; pandas itself is imported by the code that builds them
    import pandas as pd

TX_COLOR, RX_COLOR, BUSY_COLOR, LINE_RATE_COLOR = "#1f77b4", "#ff7f0e", "rgba(127,127,127,0.22)", "#d62728"
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
OTHER_COLOR = "#7f7f7f"
MAX_POINTS = 4000  # per trace; see reports/downsample.py
FIGURE_POINTS = 120_000  # per figure: with many hosts each trace gets fewer points (64 hosts: ~600 each)
TOP_FLOWS = 8


def arr(values: Any, dtype: str = "f8") -> dict[str, str]:
    """A numpy array as plotly's typed-array JSON ({"dtype": "f4", "bdata": "..."})."""
    a = np.ascontiguousarray(np.asarray(values, dtype={"f4": np.float32, "f8": np.float64, "i4": np.int32}[dtype]))
    return {"dtype": dtype, "bdata": base64.b64encode(a.tobytes()).decode("ascii")}


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def base_layout(height: int, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": height,
        "margin": {"l": 70, "r": 20, "t": 30, "b": 50},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0, "bgcolor": "rgba(0,0,0,0)"},
        "hovermode": "x unified",
    }
    layout.update(extra)
    return layout


def _seconds(t_ns: np.ndarray, t0_ns: int) -> np.ndarray:
    return (np.asarray(t_ns, dtype=np.int64) - int(t0_ns)) / 1e9


def _resolution(lines: Sequence[Line], bin_ns: int) -> str:
    coarse = max((ln.bucket_ns for ln in lines), default=0)
    if coarse > bin_ns:
        return (
            f"downsampled for drawing: each point pair is the min and max {bin_ns / 1e6:g} ms bin of a "
            f"{coarse / 1e9:.3g} s bucket (peaks kept)"
        )
    return f"every {bin_ns / 1e6:g} ms bin drawn"


def on_reference_clock(
    host_series: pd.DataFrame, clock: Clock | None, bin_ns: int
) -> tuple[pd.DataFrame, dict[str, int]]:
    """HOST_SERIES with each host's times moved onto the reference host's clock (the result's `clock`, from
    the packets), by whole bins, and {host: shift in ns} for the hosts that moved. Without it, two hosts
    whose clocks are 40 ms apart would draw the same ring step four 10 ms bins apart. Each host's middle time
    comes from one grouping by host code (a comparison of the whole host column per host took 64 s of a
    4,096-host report)."""
    import pandas as pd

    shifts: dict[str, int] = {}
    if clock is None or not clock.hosts or len(host_series) == 0:
        return host_series, shifts
    codes, names = pd.factorize(host_series["host"])
    t = host_series["t_ns"].to_numpy(np.int64)
    middles = pd.Series(t.astype(np.float64)).groupby(codes).median()
    code_of = {str(n): i for i, n in enumerate(names)}
    by_code = np.zeros(len(names) + 1, dtype=np.int64)  # code -1 (no host) moves by 0
    for h in clock.hosts:
        c = code_of.get(h.name)
        if h.offset_ns is None or c is None:
            continue
        middle = float(middles[c]) - float(clock.t0_ns)
        offset = float(h.offset_ns) + float(h.drift_ppm or 0.0) * 1e-6 * middle
        bins = round(offset / bin_ns)
        if bins:
            shifts[h.name] = bins * bin_ns
            by_code[c] = bins * bin_ns
    if not shifts:
        return host_series, shifts
    moved = host_series.copy()
    moved["t_ns"] = t - by_code[codes]
    return moved, shifts


def utilization_figure(
    host_series: pd.DataFrame,
    hosts: Sequence[HostSummary],
    bin_ns: int,
    busy_threshold: float,
    t0_ns: int,
    t1_ns: int,
    max_points: int = MAX_POINTS,
) -> tuple[dict[str, Any], str]:
    """Stacked rows, one per host: tx and rx utilization (0–1 of line rate), busy shading, line-rate line."""
    n = max(1, len(hosts))
    max_points = max(400, min(max_points, FIGURE_POINTS // (3 * n)))
    gap = min(0.04, 0.3 / n) if n > 1 else 0.0
    row_h = (1.0 - gap * (n - 1)) / n
    data, shapes, annotations, lines = [], [], [], []
    layout = base_layout(140 + (170 if n <= 8 else 110) * n, hovermode="x")
    by_key = _groups(host_series, ["host", "direction"])
    ymax = 1.05
    for i, h in enumerate(hosts):
        name = str(h.name)
        yname = "y" if i == 0 else f"y{i + 1}"
        top = 1.0 - i * (row_h + gap)
        axis = {
            "domain": [max(0.0, top - row_h), top],
            "title": {"text": "utilization"},
            "tickformat": ".0%",
            "rangemode": "tozero",
            "anchor": "x",
        }
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = axis
        link = float(h.link_speed_bps or 0) or 1.0
        busy_t, traces = [], []
        for direction, color in (("tx", TX_COLOR), ("rx", RX_COLOR)):
            part = by_key.get((name, direction))
            t = part["t_ns"].to_numpy() if part is not None else np.zeros(0, np.int64)
            u = part["utilization"].to_numpy(dtype=np.float64) if part is not None else np.zeros(0)
            busy_t.append(t[u >= busy_threshold])
            ln = sparse_line(t, u, bin_ns, t0_ns, t1_ns, max_points)
            lines.append(ln)
            if ln.y.size:
                ymax = max(ymax, float(ln.y.max()) * 1.05)
            hover = f"{direction} %{{y:.1%}} of {esc(_rate(link))}<extra>{esc(name)}</extra>"
            for trace in _traces(ln, t, u, bin_ns, t0_ns, t1_ns, f"{esc(name)} {direction}", color, hover):
                traces.append(
                    {
                        **trace,
                        "legendgroup": trace["name"].replace(esc(name), "", 1),
                        "showlegend": i == 0,
                        "xaxis": "x",
                        "yaxis": yname,
                    }
                )
        busy = bucket_share(np.concatenate(busy_t), bin_ns, t0_ns, t1_ns, max_points)
        data.append(
            {  # drawn first, so the rates sit on top of the shading
                "type": "scatter",
                "mode": "lines",
                "name": f"busy (any bin ≥ {busy_threshold:.0%})" if busy.exact else "busy share of bucket",
                "legendgroup": "busy",
                "showlegend": i == 0,
                "line": {"width": 0, "shape": "hv"},
                "fill": "tozeroy",
                "fillcolor": BUSY_COLOR,
                "x": arr(_seconds(busy.t_ns, t0_ns)),
                "y": arr(busy.y, "f4"),
                "xaxis": "x",
                "yaxis": yname,
                "hoverinfo": "skip",
            }
        )
        data += traces
        shapes.append(
            {
                "type": "line",
                "xref": "x domain",
                "x0": 0,
                "x1": 1,
                "yref": yname,
                "y0": 1,
                "y1": 1,
                "line": {"color": LINE_RATE_COLOR, "width": 1.5, "dash": "dash"},
            }
        )
        annotations.append(
            {
                "xref": "paper",
                "x": 0,
                "xanchor": "left",
                "yref": f"{yname} domain",
                "y": 1.0,
                "yanchor": "bottom",
                "showarrow": False,
                "text": f"<b>{esc(name)}</b> · line rate {esc(_rate(link))} (dashed = 100%)",
            }
        )
    for i in range(n):
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"]["range"] = [0, ymax]
    layout["xaxis"] = {
        "title": {"text": "time since first packet (s)"},
        "anchor": f"y{n}" if n > 1 else "y",
        "ticksuffix": " s",
    }
    layout["shapes"], layout["annotations"] = shapes, annotations
    return {"data": data, "layout": layout}, _resolution(lines, bin_ns)


def flow_figure(
    flow_series: pd.DataFrame,
    flows: pd.DataFrame,
    bin_ns: int,
    t0_ns: int,
    t1_ns: int,
    top: int = TOP_FLOWS,
    max_points: int = MAX_POINTS,
) -> tuple[dict[str, Any], str]:
    """Throughput over time (bit/s) of the `top` flows by bytes, the rest summed into one 'other' line."""
    order = flows.sort_values("bytes", ascending=False, kind="stable")
    head = order.head(top)
    data, lines = [], []
    by_flow = _groups(flow_series, ["flow_id"])
    for k, f in enumerate(head.itertuples(index=False)):
        part = by_flow.get((f.flow_id,))
        if part is None:
            continue
        ln = sparse_line(
            part["t_ns"].to_numpy(), part["bps"].to_numpy(dtype=np.float64), bin_ns, t0_ns, t1_ns, max_points
        )
        lines.append(ln)
        label = f"{f.src}:{f.sport} → {f.dst}:{f.dport} {f.proto}"
        data += _traces(
            ln,
            part["t_ns"].to_numpy(),
            part["bps"].to_numpy(dtype=np.float64),
            bin_ns,
            t0_ns,
            t1_ns,
            esc(label),
            PALETTE[k % len(PALETTE)],
            RATE_HOVER,
        )
    rest_ids = order["flow_id"].iloc[top:]
    if len(rest_ids):
        rest = flow_series[flow_series["flow_id"].isin(set(rest_ids.tolist()))]
        if len(rest):
            summed = rest.groupby("t_ns", sort=True)["bps"].sum()
            ln = sparse_line(
                summed.index.to_numpy(), summed.to_numpy(dtype=np.float64), bin_ns, t0_ns, t1_ns, max_points
            )
            lines.append(ln)
            data += _traces(
                ln,
                summed.index.to_numpy(),
                summed.to_numpy(dtype=np.float64),
                bin_ns,
                t0_ns,
                t1_ns,
                f"other {len(rest_ids):,} flows (summed)",
                OTHER_COLOR,
                RATE_HOVER,
            )
    layout = base_layout(
        420,
        hovermode="closest",
        xaxis={"title": {"text": "time since first packet (s)"}, "ticksuffix": " s"},
        yaxis={"title": {"text": "throughput (bit/s)"}, "rangemode": "tozero", "exponentformat": "SI"},
    )
    return {"data": data, "layout": layout}, _resolution(lines, bin_ns)


RATE_HOVER = "%{y:.3s}bit/s at %{x:.3f} s<extra>%{fullData.name}</extra>"


def _traces(
    ln: Line, t: np.ndarray, y: np.ndarray, bin_ns: int, t0_ns: int, t1_ns: int, name: str, color: str, hover: str
) -> list[dict[str, Any]]:
    """One line when every bin is drawn; when downsampled, the min/max envelope (faint) and the bucket mean."""
    kind = "scattergl" if len(ln) > 20000 else "scatter"
    x = arr(_seconds(ln.t_ns, t0_ns))
    if ln.exact:
        return [
            {
                "type": kind,
                "mode": "lines",
                "name": name,
                "line": {"color": color, "width": 1.2, "shape": "hv"},
                "x": x,
                "y": arr(ln.y, "f4"),
                "hovertemplate": hover,
            }
        ]
    mean = bucket_mean(t, y, bin_ns, t0_ns, t1_ns, ln.bucket_ns)
    return [
        {
            "type": kind,
            "mode": "lines",
            "name": f"{name} min–max",
            "opacity": 0.3,
            "line": {"color": color, "width": 1},
            "x": x,
            "y": arr(ln.y, "f4"),
            "hovertemplate": hover,
        },
        {
            "type": kind,
            "mode": "lines",
            "name": f"{name} mean",
            "line": {"color": color, "width": 1.6, "shape": "hv"},
            "x": arr(_seconds(mean.t_ns, t0_ns)),
            "y": arr(mean.y, "f4"),
            "hovertemplate": hover,
        },
    ]


def host_bytes_line(per: Sequence[IterationRecord], host: str, color: str) -> dict[str, Any] | None:
    """One host's bytes sent per iteration as a line (None where it sent in none of them)."""
    y = np.array([_num(it.bytes_by_host.get(host)) for it in per])
    if np.all(np.isnan(y)):
        return None
    return {
        "type": "scatter",
        "mode": "lines+markers" if len(per) <= 200 else "lines",
        "name": esc(host),
        "x": arr(np.array([float(it.index) for it in per])),
        "y": arr(y),
        "line": {"color": color, "width": 1.2},
        "marker": {"size": 4},
        "hovertemplate": "iteration %{x}: %{y:.4s}B<extra>%{fullData.name}</extra>",
    }


def iteration_figures(
    iterations: Iterations, hosts: Sequence[str], workers: int, bytes_traces: list[dict[str, Any]] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """Bytes sent per iteration per host (or BYTES_TRACES in their place: reports.host_spread's, beyond a few dozen
    hosts) with the ring's 2(N−1)/N·S line; iteration and communication time."""
    per = iterations.per_iteration or []
    if not per:
        return []
    idx = np.array([float(it.index) for it in per])
    if bytes_traces is None:
        names = list(dict.fromkeys([*hosts, *(h for it in per for h in it.bytes_by_host)]))
        lines = [host_bytes_line(per, h, PALETTE[k % len(PALETTE)]) for k, h in enumerate(names)]
        bytes_traces = [line for line in lines if line is not None]
    data = list(bytes_traces)
    shapes, annotations = [], []
    s = _num(iterations.gradient_bytes or iterations.implied_gradient_bytes)
    if workers > 1 and np.isfinite(s):
        expected = 2 * (workers - 1) / workers * s
        shapes.append(
            {
                "type": "line",
                "xref": "x domain",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": expected,
                "y1": expected,
                "line": {"color": LINE_RATE_COLOR, "width": 1.5, "dash": "dash"},
            }
        )
        annotations.append(
            {
                "xref": "x domain",
                "x": 1,
                "xanchor": "right",
                "yref": "y",
                "y": expected,
                "yanchor": "bottom",
                "showarrow": False,
                "text": f"2(N−1)/N·S = {_si(expected)}B (N = {workers}, S = {_si(s)}B)",
            }
        )
    bytes_fig = {
        "data": data,
        "layout": base_layout(
            380,
            hovermode="closest",
            shapes=shapes,
            annotations=annotations,
            xaxis={"title": {"text": "iteration"}},
            yaxis={"title": {"text": "bytes sent per iteration (B)"}, "rangemode": "tozero", "exponentformat": "SI"},
        ),
    }
    # iteration time: start to next start (inferred windows cover only the burst); the last one: its own span
    starts = np.array([_num(it.start_ns) for it in per])
    spans = np.array([_num(it.end_ns) for it in per]) - starts
    it_ms = np.append(np.diff(starts), spans[-1:]) / 1e6
    it_ms[:-1] = np.where(np.diff(starts) > 0, it_ms[:-1], spans[:-1] / 1e6)
    comm_ms = np.array([_num(it.comm_ns) / 1e6 for it in per])
    mode = "lines+markers" if len(per) <= 200 else "lines"
    time_fig = {
        "data": [
            {
                "type": "scatter",
                "mode": mode,
                "name": "iteration time",
                "x": arr(idx),
                "y": arr(it_ms),
                "line": {"color": TX_COLOR},
                "marker": {"size": 4},
                "hovertemplate": "%{y:.2f} ms<extra>iteration</extra>",
            },
            {
                "type": "scatter",
                "mode": mode,
                "name": "communication time",
                "x": arr(idx),
                "y": arr(comm_ms),
                "line": {"color": RX_COLOR},
                "marker": {"size": 4},
                "hovertemplate": "%{y:.2f} ms<extra>communication</extra>",
            },
        ],
        "layout": base_layout(
            340,
            hovermode="x unified",
            xaxis={"title": {"text": "iteration"}},
            yaxis={"title": {"text": "time (ms)"}, "rangemode": "tozero"},
        ),
    }
    return [("fig-iter-bytes", bytes_fig), ("fig-iter-time", time_fig)]


def whatif_figures(scaling: WhatIf) -> list[tuple[str, dict[str, Any]]]:
    """Scaling factor vs bandwidth (curves, measured point, full-utilization point); compression needed."""
    out: list[tuple[str, dict[str, Any]]] = []
    scaling_figure = _scaling_figure(scaling)
    if scaling_figure is not None:
        out.append(("fig-whatif-scaling", scaling_figure))
    compression_figure = _compression_figure(scaling.needed_compression or [])
    if compression_figure is not None:
        out.append(("fig-whatif-compression", compression_figure))
    return out


def _scaling_figure(scaling: WhatIf) -> dict[str, Any] | None:
    """The sweep's curves of scaling factor against bandwidth, with the measured point and the points at full
    utilization and at the measured efficiency; None where there is nothing to draw."""
    sweep = scaling.sweep or Sweep()
    bw = np.array([_num(b) for b in sweep.bandwidths_bps or []])
    measured = scaling.measured or Measured()
    data: list[dict[str, Any]] = []
    for k, c in enumerate(sweep.curves or []):
        sf = np.array([_num(v) for v in c.scaling_factor or []])
        if sf.size != bw.size or not bw.size:
            continue
        mine = measured.workers == c.workers
        label = f"N = {c.workers}" + (f", {c.compression:g}× compression" if _num(c.compression) != 1 else "")
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": esc(label),
                "x": arr(bw / 1e9),
                "y": arr(sf),
                "line": {"color": PALETTE[k % len(PALETTE)], "width": 3 if mine else 1.3},
                "hovertemplate": "%{x:.3g} Gbit/s: %{y:.3f}<extra>%{fullData.name}</extra>",
            }
        )
    link = _num(measured.link_speed_bps)
    points = [
        ("full utilization of this link", link, measured.full_utilization_scaling_factor, "circle"),
        (
            "at the measured transport efficiency",
            link * _num(measured.transport_efficiency) if np.isfinite(link) else np.nan,
            measured.scaling_factor_at_measured_efficiency,
            "diamond",
        ),
        ("measured", link, measured.measured_scaling_factor, "x"),
    ]
    for label, x, y, symbol in points:
        if np.isfinite(_num(x)) and np.isfinite(_num(y)):
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": label,
                    "x": [_num(x) / 1e9],
                    "y": [_num(y)],
                    "marker": {
                        "size": 12,
                        "symbol": symbol,
                        "color": LINE_RATE_COLOR if label == "measured" else None,
                        "line": {"width": 1},
                    },
                    "hovertemplate": "%{x:.3g} Gbit/s: %{y:.3f}<extra>" + label + "</extra>",
                }
            )
    if not data:
        return None
    return {
        "data": data,
        "layout": base_layout(
            420,
            hovermode="closest",
            xaxis={"title": {"text": "link bandwidth (Gbit/s, log scale)"}, "type": "log"},
            yaxis={"title": {"text": "scaling factor (T / (T + overhead))"}, "range": [0, 1.02]},
        ),
    }


def _compression_figure(rows: list[Any]) -> dict[str, Any] | None:
    """The compression ratio needed to reach each target scaling factor, against bandwidth, at the most workers
    the what-if asked for; None where there is nothing to draw."""
    if rows:
        n = max(int(r.workers or 0) for r in rows)
        cdata = []
        for k, target in enumerate(sorted({_num(r.target) for r in rows})):
            sel = sorted(
                (r for r in rows if r.workers == n and _num(r.target) == target),
                key=lambda r: _num(r.bandwidth_bps),
            )
            if not sel:
                continue
            cdata.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": f"scaling factor {target:g}",
                    "x": arr([_num(r.bandwidth_bps) / 1e9 for r in sel]),
                    "y": arr([_num(r.compression) for r in sel]),
                    "line": {"color": PALETTE[k % len(PALETTE)]},
                    "hovertemplate": "%{x:.3g} Gbit/s: %{y:.3g}×<extra>%{fullData.name}</extra>",
                }
            )
        if cdata:
            return {
                "data": cdata,
                "layout": base_layout(
                    360,
                    hovermode="closest",
                    xaxis={"title": {"text": f"link bandwidth (Gbit/s, log scale), N = {n}"}, "type": "log"},
                    yaxis={"title": {"text": "compression ratio needed (×, log scale)"}, "type": "log"},
                ),
            }
    return None


def _groups(df: pd.DataFrame | None, keys: list[str]) -> dict[tuple[Any, ...], pd.DataFrame]:
    """Sub-frames by key, as a dict (one pass; empty when the table is missing or empty)."""
    if df is None or len(df) == 0 or any(k not in df.columns for k in keys):
        return {}
    return {(k if isinstance(k, tuple) else (k,)): g for k, g in df.groupby(keys, sort=False, observed=True)}


def _num(value: float | None) -> float:
    """VALUE as a float; NaN where it is unknown (None)."""
    return float("nan") if value is None else float(value)


def _si(value: float) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}"
    return f"{value:.3g} "


def _rate(bps: float) -> str:
    from capture.units import format_rate

    return format_rate(bps)


def transport_figures(transport: Transport, t0_ns: int, edges: int = TOP_FLOWS) -> list[tuple[str, dict[str, Any]]]:
    """The judged ring edges over time, one color per edge in every figure: share of line rate per bin, bytes in
    flight after marked segments against the edge's mean advertised window (dashed), round trips of marked
    bytes (first send to the first ACK past them), and bytes re-sent per bin."""
    parts: dict[str, list[dict[str, Any]]] = {"rate": [], "inflight": [], "rtt": [], "resent": []}
    judged = [x for x in transport.edges or [] if x.limiter][:edges]
    for k, edge in enumerate(judged):
        s = edge.series
        name = esc(f"{edge.src} → {edge.dst} ({edge.limiter})")
        color = PALETTE[k % len(PALETTE)]

        def trace(kind: str, t_ns: Sequence[int], y: Sequence[float], mode: str, hover: str, **extra: Any) -> None:
            if t_ns:
                parts[kind].append(
                    {
                        "type": "scattergl",
                        "mode": mode,
                        "name": name,
                        "legendgroup": name,
                        "x": arr(_seconds(np.asarray(t_ns), t0_ns)),
                        "y": arr(y),
                        "hovertemplate": hover + " at %{x:.3f} s<extra>%{fullData.name}</extra>",
                        **extra,
                    }
                )

        trace("rate", s.t_ns, s.utilization, "lines", "%{y:.0%} of line rate", line={"color": color, "width": 1})
        trace(
            "inflight",
            s.inflight_t_ns,
            s.inflight_bytes,
            "markers",
            "%{y:.3s}B in flight",
            marker={"color": color, "size": 4},
        )
        if edge.window_mean_bytes and s.inflight_t_ns:
            ends = _seconds(np.asarray([s.inflight_t_ns[0], s.inflight_t_ns[-1]]), t0_ns)
            parts["inflight"].append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": name + " mean window",
                    "legendgroup": name,
                    "showlegend": False,
                    "x": arr(ends),
                    "y": arr([edge.window_mean_bytes] * 2),
                    "line": {"color": color, "width": 1, "dash": "dash"},
                    "hovertemplate": "mean window %{y:.3s}B<extra>%{fullData.name}</extra>",
                }
            )
        trace(
            "rtt", s.rtt_t_ns, [x / 1e6 for x in s.rtt_ns], "markers", "%{y:.3f} ms", marker={"color": color, "size": 4}
        )
        trace(
            "resent",
            s.resent_t_ns,
            s.resent_bytes,
            "markers",
            "%{y:.3s}B re-sent",
            marker={"color": color, "size": 5},
        )
    axis = {"title": {"text": "time since first packet (s)"}, "ticksuffix": " s"}
    yaxes = {
        "rate": {"title": {"text": "share of line rate"}, "tickformat": ".0%", "rangemode": "tozero"},
        "inflight": {"title": {"text": "bytes in flight"}, "rangemode": "tozero", "exponentformat": "SI"},
        "rtt": {"title": {"text": "round trip (ms)"}, "type": "log"},
        "resent": {"title": {"text": "bytes re-sent per bin"}, "rangemode": "tozero", "exponentformat": "SI"},
    }
    return [
        (
            f"fig-transport-{kind}",
            {"data": data, "layout": base_layout(300, hovermode="closest", xaxis=axis, yaxis=yaxes[kind])},
        )
        for kind, data in parts.items()
        if data
    ]


RDMA_EVENTS = (("cnp_t_ns", "CNP"), ("nak_t_ns", "NAK"), ("resent_t_ns", "resend"))


def rdma_figures(rdma: Rdma, t0_ns: int, edges: int = TOP_FLOWS) -> list[tuple[str, dict[str, Any]]]:
    """The judged RDMA edges over time, one color per edge: each queue pair's share of line rate per bin (one line
    per QP, so QPs of one edge carrying unequal bytes show), the instants of CNPs, NAKs and resends the sender saw
    (one row each), and ACK round trips."""
    rates: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    trips: list[dict[str, Any]] = []
    for k, edge in enumerate([x for x in rdma.edges or [] if x.limiter][:edges]):
        s = edge.series
        name = esc(f"{edge.src} → {edge.dst} ({edge.limiter})")
        color = PALETTE[k % len(PALETTE)]
        for j, q in enumerate(s.qp_rates):
            if q.t_ns:
                rates.append(
                    {
                        "type": "scattergl",
                        "mode": "lines",
                        "name": f"{name} QP {q.qp:#x}",
                        "legendgroup": name,
                        "x": arr(_seconds(np.asarray(q.t_ns), t0_ns)),
                        "y": arr(q.utilization),
                        "line": {"color": color, "width": 1, "dash": ("solid", "dot", "dash", "dashdot")[j % 4]},
                        "hovertemplate": "%{y:.0%} of line rate at %{x:.3f} s<extra>%{fullData.name}</extra>",
                    }
                )
        for field_name, label in RDMA_EVENTS:
            times = getattr(s, field_name)
            if times:
                events.append(
                    {
                        "type": "scattergl",
                        "mode": "markers",
                        "name": f"{name} {label}",
                        "legendgroup": name,
                        "x": arr(_seconds(np.asarray(times), t0_ns)),
                        "y": [label] * len(times),
                        "marker": {"color": color, "size": 6, "symbol": "line-ns-open"},
                        "hovertemplate": f"{label} at %{{x:.6f}} s<extra>%{{fullData.name}}</extra>",
                    }
                )
        if s.rtt_t_ns:
            trips.append(
                {
                    "type": "scattergl",
                    "mode": "markers",
                    "name": name,
                    "legendgroup": name,
                    "x": arr(_seconds(np.asarray(s.rtt_t_ns), t0_ns)),
                    "y": arr([x / 1e3 for x in s.rtt_ns]),
                    "marker": {"color": color, "size": 4},
                    "hovertemplate": "ACK after %{y:.3g} µs at %{x:.3f} s<extra>%{fullData.name}</extra>",
                }
            )
    axis = {"title": {"text": "time since first packet (s)"}, "ticksuffix": " s"}
    yaxes = {
        "qp-rate": {"title": {"text": "share of line rate (per QP)"}, "tickformat": ".0%", "rangemode": "tozero"},
        "events": {"type": "category", "categoryorder": "array", "categoryarray": [x[1] for x in RDMA_EVENTS]},
        "ack-rtt": {"title": {"text": "ACK round trip (µs)"}, "type": "log"},
    }
    parts = {"qp-rate": rates, "events": events, "ack-rtt": trips}
    return [
        (
            f"fig-rdma-{kind}",
            {"data": data, "layout": base_layout(300, hovermode="closest", xaxis=axis, yaxis=yaxes[kind])},
        )
        for kind, data in parts.items()
        if data
    ]


HEAT_EDGES = 48  # edges in the per-iteration pace heat map, the heaviest first (all are in the JSON)


def straggler_figures(transport: Transport | None, found: Sequence[Straggler]) -> list[tuple[str, dict[str, Any]]]:
    """Who holds the ring back, drawn per iteration: each ring edge's rate while sending (a heat map: a slow link's
    edges stay dark in every iteration) and, for each rank late into the collective, how long the ring waited."""
    out: list[tuple[str, dict[str, Any]]] = []
    edges = [e for e in (transport.edges if transport is not None else []) if e.limiter and e.per_iteration.index]
    edges = sorted(edges, key=lambda e: -e.payload_bytes)[:HEAT_EDGES]
    if edges:
        last = max(max(e.per_iteration.index) for e in edges) + 1
        z = np.full((len(edges), last), np.nan)
        for row, e in enumerate(edges):
            x = e.per_iteration
            z[row, x.index] = np.asarray(x.rate_while_busy, dtype=np.float64) * e.link_speed_bps / 1e6
        spec = {
            "type": "heatmap",
            "z": z.tolist(),
            "x": list(range(last)),
            "y": [esc(f"{e.src} → {e.dst}") for e in edges],
            "colorscale": "Viridis",
            "colorbar": {"title": {"text": "Mbit/s"}},
            "hovertemplate": "%{y}, iteration %{x}: %{z:.0f} Mbit/s while sending<extra></extra>",
        }
        layout = base_layout(
            max(220, 26 * len(edges) + 90),
            hovermode="closest",
            xaxis={"title": {"text": "iteration"}},
            yaxis={"automargin": True},
        )
        out.append(("fig-edge-pace", {"data": [spec], "layout": layout}))
    late = [s for s in found if s.kind == "compute" and s.waits]
    if late:
        data = [
            {
                "type": "bar",
                "name": esc(s.host),
                "x": [w[0] for w in s.waits or []],
                "y": [(w[2] - w[1]) / 1e6 for w in s.waits or []],
                "marker": {"color": PALETTE[i % len(PALETTE)]},
                "hovertemplate": "iteration %{x}: the ring waited %{y:.0f} ms<extra>%{fullData.name}</extra>",
            }
            for i, s in enumerate(late)
        ]
        layout = base_layout(
            260, hovermode="closest", xaxis={"title": {"text": "iteration"}}, yaxis={"title": {"text": "ms waited"}}
        )
        out.append(("fig-waits", {"data": data, "layout": layout}))
    return out

"""The rate a connection sends at while it sends, from packet times: the flow tables' `send_rate_bps`.

Why from packet times and not the series: a rate "while sending" taken as bytes over the bins a flow was busy in
is a property of the bin. The read path instead files every group of packets (those sharing a timestamp) by the
rate its wire bytes left at since the group before it (analyze.read.layouts AGG_PACE_BYTES, AGG_PACE_NS); no bin
enters. A connection's rate is its median byte's: the half-octave bin holding the byte-weighted median, read exact
as that bin's bytes over its time. The gaps between bursts file the first group of each burst under a slow rate;
they are few of the bytes and leave the median where the bulk of the bytes went. How an edge's rate follows from
its connections', and what a rate at line rate settles, is analyze.wire.send_rate's.
"""

from __future__ import annotations

import numpy as np

from analyze.read import layouts as L

__all__ = ["flow_send_rates"]


def flow_send_rates(agg: np.ndarray) -> np.ndarray:
    """Per row of AGG (the read path's flow counters), the rate of its median byte in bit/s; NaN where fewer
    than two groups of packets were seen (no time between them to read a rate from)."""
    nbytes = agg[:, L.AGG_PACE_BYTES : L.AGG_PACE_BYTES + L.PACE_BINS].astype(np.float64)
    times = agg[:, L.AGG_PACE_NS : L.AGG_PACE_NS + L.PACE_BINS].astype(np.float64)
    total = nbytes.sum(axis=1)
    out = np.full(len(agg), np.nan)
    seen = total > 0
    if not seen.any():
        return out
    median_bin = np.argmax(np.cumsum(nbytes[seen], axis=1) >= total[seen, None] / 2, axis=1)
    rows = np.flatnonzero(seen)
    out[rows] = nbytes[rows, median_bin] * 8e9 / np.maximum(times[rows, median_bin], 1.0)
    return out

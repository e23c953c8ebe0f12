"""Pauses a retransmission ends: a lossy link's stalls, read as the job's steps.

Why: the staircase cuts iterations at pauses that repeat every so many bytes, and a TCP retransmission timeout
(200 ms at least on Linux) is a pause too. Where a link loses a segment at the same point of most steps, the
timeouts repeat as regularly as the steps do and the bytes cannot tell them apart: the real 3-host DDP ring on a
lossy tbf queue (fixtures/real-training/ddp-lossy-rto, 14 steps by its ranks' records) read 14 at 1 and 2 ms bins
and 28 at 0.996 at 4 ms, its steps halved by their timeouts. The transport says which: a pause a timeout ended
ends with the segment sent again, on that edge, while a step's pause ends with new data. Of the 28 cuts at 4 ms,
14-16 of 27 per edge ended within two bins of a re-sent segment of the edge; of the 14 at 1 and 2 ms, 1-4 of 13
(a step's first send may follow a loss too). Where the median edge's share reaches STALL_SHARE, the count is
unsure.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyze.collective.staircase import Staircase

STALL_SHARE = 0.4  # cuts ending in a re-sent segment of their edge, on the median edge: the pauses may be stalls
STALL_CONFIDENCE = 0.5  # the most a count so cut can be stated with


def stall_share(stairs: Staircase, samples: Any, flow_hosts: pd.DataFrame, bin_ns: int) -> float:
    """The median over the staircase's edges of the share of their inner cuts followed (within [-1, +2] bins of
    the cut: a pause's end, where the comb placed it) by a re-sent segment of a flow of that edge; 0 without
    re-sent samples (SAMPLES: the transport samples table, FLOW_HOSTS: flow_id, src_host, dst_host)."""
    if samples is None or not len(samples) or not stairs.edges:
        return 0.0
    resent = samples[samples["what"] == "resent_bytes"]
    if not len(resent):
        return 0.0
    edge_of = flow_hosts.set_index("flow_id")[["src_host", "dst_host"]]
    pairs = edge_of.reindex(resent["flow_id"].to_numpy())
    key = pairs["src_host"].astype(str).to_numpy() + " -> " + pairs["dst_host"].astype(str).to_numpy()
    times = resent["t_ns"].to_numpy(np.int64)
    order = np.lexsort((times, key))  # each edge's re-sent times in one sorted run: no pass over all per edge
    key, times = key[order], times[order]
    names, first = np.unique(key, return_index=True)
    bounds = dict(zip(names.tolist(), zip(first.tolist(), [*first[1:].tolist(), len(key)])))
    shares = []
    for e in stairs.edges:
        lo, hi = bounds.get(f"{e.src} -> {e.dst}", (0, 0))
        t = times[lo:hi]
        cuts = np.asarray(e.cut_ns[1:-1], dtype=np.int64)
        if not len(cuts):
            continue
        if not len(t):  # the edge re-sent nothing: no cut of it ends in a resend
            shares.append(0.0)
            continue
        width = e.bin_ns or bin_ns
        k = np.searchsorted(t, cuts - width)
        hit = (k < len(t)) & (t[np.minimum(k, len(t) - 1)] <= cuts + 2 * width)
        shares.append(float(np.mean(hit)))
    return float(np.median(shares)) if shares else 0.0

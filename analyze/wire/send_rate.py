"""The rate a connection sends at while it sends, from packet times, and an edge's from its connections'.

Why not from the series: a rate "while sending" taken as bytes over the bins an edge was busy in is a property of
the bin. A clean RoCEv2 ring at 100 Gbit/s, bursts of a few ms at line rate, read 23 % of line rate at 10 ms bins
and 87 % at 1 ms, and was called sender-limited at the default. The read path instead files every group of packets
(those sharing a timestamp) by the rate its wire bytes left at since the group before it (analyze.read.layouts
AGG_PACE_BYTES, AGG_PACE_NS); no bin enters.

A connection's rate is its median byte's: the half-octave bin holding the byte-weighted median, read exact as that
bin's bytes over its time. The gaps between bursts (a ring step waiting for its predecessor, the compute between
iterations) file the first group of each burst under a slow rate; they are few of the bytes and leave the median
where the bulk of the bytes went.

What the packet times settle and what they leave open (fills_link): bursts under FILLS_LINK of line rate say the
link is not full even while the edge sends, at any bin. Bursts at line rate say the link is full while a burst
lasts, not that the edge sends without pause: a ring step waiting for its predecessor and the compute between
iterations both idle the link, and only bins finer than the bursts tell them apart. So where the bursts run at
line rate and the busy bins read under FILLS_LINK, the edge is not called link-limited and its other verdict is
unsure: at 10 ms bins a 100 Gbit/s RoCE ring (1 ms of communication an iteration) read "sender, 1.00" with every
burst at line rate; a gloo ring of 256 kB all-reduces, which does wait between its steps, reads the same way.

An edge's rate comes from its data connections (those carrying at least DATA_SHARE of its busiest one's bytes), and
how depends on whether they send at once, which per-connection rates cannot show:

* TCP: the sum. NCCL deals each step over its sockets at once, and a host's ranks send to one peer side by side,
  each connection at its share of the link.
* RDMA: their byte-weighted mean. NCCL posts a connection's messages on its queue pairs in turn (as
  tests/support/rocegen.py generates them), each at the rate the NIC sends one queue pair; summed, two queue pairs
  at line rate read twice line rate. Where the NIC interleaves them (each message split over the queue pairs at
  once) this reads each queue pair's share: the edge reads slow, never falsely full.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from analyze.confidence.thresholds import FILLS_LINK

__all__ = [
    "edge_send_rates",
    "fill_note",
    "fills_link",
    "unresolved_evidence",
    "DATA_SHARE",
    "UNRESOLVED_CONFIDENCE",
]

DATA_SHARE = 0.25  # a connection carrying under this share of its edge's busiest one's bytes: control, not paced
UNRESOLVED_CONFIDENCE = 0.5  # the most a verdict other than link gets where bursts run at line rate (fills_link)


def edge_send_rates(
    code: np.ndarray, rate_bps: np.ndarray, payload: np.ndarray, n: int, at_once: bool = True
) -> np.ndarray:
    """Per edge 0..N-1 (CODE: each flow's edge), its data connections' RATE_BPS (DATA_SHARE) summed where AT_ONCE,
    else their mean weighted by PAYLOAD (module docstring); NaN where none has a rate."""
    if not len(code):
        return np.full(n, np.nan)
    weight = payload.astype(np.float64)
    busiest = np.zeros(n)
    np.maximum.at(busiest, code, weight)
    data = (weight >= DATA_SHARE * busiest[code]) & np.isfinite(rate_bps)
    c, r, w = code[data], rate_bps[data], weight[data]
    total = np.bincount(c, weights=r if at_once else r * w, minlength=n).astype(np.float64)
    if not at_once:
        total /= np.maximum(np.bincount(c, weights=w, minlength=n), 1.0)
    return np.where(np.bincount(c, minlength=n) > 0, total, np.nan)


def fills_link(in_bursts: Optional[float], in_bins: Optional[float]) -> Optional[bool]:
    """Whether an edge keeps its link full while it sends, from its rate IN_BURSTS (packet times) and over its busy
    bins IN_BINS (shares of line rate): True where both reach FILLS_LINK, False where the bursts do not (or, with
    no burst rate, the bins do not), None where the bursts do and the bins do not: the bins are coarser than what
    idles the link (module docstring)."""
    if in_bursts is None:
        return None if in_bins is None else in_bins >= FILLS_LINK
    if in_bursts < FILLS_LINK:
        return False
    return True if in_bins is not None and in_bins >= FILLS_LINK else None


def unresolved_evidence(in_bursts: float, in_bins: Optional[float], bin_ns: int) -> str:
    """Why a burst at line rate does not make the edge link-limited, in words."""
    bins = f"{in_bins:.0%}" if in_bins is not None else "not"
    return (
        f"bursts leave at {in_bursts:.0%} of line rate (packet times) while its {bin_ns / 1e6:g} ms busy bins are "
        f"{bins} full: whether the link idles between ring steps or only between iterations is finer than a bin; "
        f"a finer --bin tells"
    )


def fill_note(fill_ns: int, bin_ns: int) -> str:
    """Why the links' fill reads other bins than --bin's: the width is the traffic's (analyze.read.bin_choice)."""
    return (
        f"each link's fill is judged in the {fill_ns / 1e6:g} ms bins chosen from the traffic, not --bin's "
        f"{bin_ns / 1e6:g} ms: a limiter and its sureness do not move with the display's bin"
    )

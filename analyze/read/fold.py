"""One host's capture folded into one flow table: unique flow keys, summed counters, series cells.

A host's files (or the pieces of one big file) are scanned apart; folding merges their flow tables and adds
up the series cells two scans both hold for one (flow, bin). numpy only, like the rest of the read path.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from analyze.read import layouts as L
from analyze.read.groupsum import group_sum
from analyze.read.scan import StreamScan, scan_stream

SUMMED = [L.AGG_PACKETS, L.AGG_IP_BYTES, L.AGG_WIRE_BYTES, L.AGG_PAYLOAD_BYTES, L.AGG_RETRANS_BYTES]
# TCP behaviour counters (analyze.wire.transport), added up like the totals. A flow cut by a piece boundary starts
# its second half not knowing the ACK or window before it, so pieces count a few segments fewer than one read.
TRANSPORT_SUMMED = [
    L.AGG_REORDER_BYTES,
    L.AGG_DUP_ACKS,
    L.AGG_SACK_ACKS,
    L.AGG_ZERO_WINS,
    L.AGG_ZERO_WIN_NS,
    L.AGG_INFLIGHT_SUM,
    L.AGG_INFLIGHT_N,
    L.AGG_WIN_SUM,
    L.AGG_WIN_N,
    L.AGG_WIN_FULL_BYTES,
]
# RDMA queue pairs' counters (layouts.AGG_ROCE_*): summed like the totals; the version is the same in every scan.
ROCE_SUMMED = [
    L.AGG_ROCE_WRITE_BYTES,
    L.AGG_ROCE_SEND_BYTES,
    L.AGG_ROCE_READ_BYTES,
    L.AGG_ROCE_MESSAGES,
    L.AGG_ROCE_IMM,
    L.AGG_ROCE_ACKS,
    L.AGG_ROCE_NAKS,
    L.AGG_ROCE_RNR_NAKS,
    L.AGG_ROCE_NAK_ERRORS,
    L.AGG_ROCE_CNPS,
    L.AGG_ROCE_CE,
    L.AGG_ROCE_FECN,
    L.AGG_ROCE_BECN,
    L.AGG_ROCE_PSN_GAPS,
    L.AGG_ROCE_RESENT,
    L.AGG_ROCE_RESENDS,
    L.AGG_ROCE_TIMEOUTS,
    L.AGG_ROCE_STALL_NS,
]
TRANSPORT_MAX = [L.AGG_INFLIGHT_MAX, L.AGG_WSCALE, L.AGG_ROCE_VERSION, L.AGG_ROCE_SPORT]
# the bytes and times by rate (analyze.wire.send_rate): a piece adds its groups like a whole read, less the group
# that straddles its start
PACE_SUMMED = list(range(L.AGG_PACE_BYTES, L.AGG_PACE_NS + L.PACE_BINS))
SEQ_SPACE = 1 << 32


def seq_missing(agg: np.ndarray) -> np.ndarray:
    """Per flow of an unfolded scan: TCP payload bytes of its sequence span (first to highest data segment seen)
    that the capture did not hold; 0 for flows without data.

    A lower bound that never blames the network: a segment the network lost is sent again, and its resending
    fills the span at the receiver's capture and is counted twice at the sender's, so only bytes no capture
    record carried stay missing (a lost record of a re-sent segment hides behind its twin). The span is taken
    modulo 2^32 and unwrapped to the least value at or above the bytes seen once (payload less re-sent), which
    the span can never be below: exact for flows missing under 4 GiB."""
    data = agg[:, L.AGG_SEQ_FIRST] >= 0
    payload = agg[:, L.AGG_PAYLOAD_BYTES]
    span = (agg[:, L.AGG_SEQ_END] - agg[:, L.AGG_SEQ_FIRST]) % SEQ_SPACE
    once = payload - agg[:, L.AGG_RETRANS_BYTES]
    span = span + np.maximum(0, -(-(once - span) // SEQ_SPACE)) * SEQ_SPACE
    return np.where(data, np.maximum(span - payload, 0), 0)


@dataclass
class HostFlows:
    """One host's capture after merging its files: unique flow keys, totals and series cells."""

    host: str
    keys: np.ndarray  # uint64[n, 5]
    agg: np.ndarray  # int64[n, N_AGG]; only the summed, transport and first/last columns are meaningful
    cell_flow: np.ndarray
    cell_bin: np.ndarray
    cell_bytes: np.ndarray
    samples: np.ndarray  # int64[m, N_SAMPLE]: sequence samples, their flow = row in keys (layouts.SAMPLE_*)


def sample_fields(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flow row, kind bits, 32-bit value) of each row of a samples table (layouts.SAMPLE_*)."""
    key = samples[:, L.SAMPLE_KEY]
    return key >> L.SAMPLE_FLOW_SHIFT, key & L.SAMPLE_KIND, key & 0xFFFFFFFF


def unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique rows of a uint64 key matrix and the inverse index (exact, sort-based)."""
    if len(keys) == 0:
        return keys.reshape(0, keys.shape[1] if keys.ndim == 2 else 5), np.zeros(0, dtype=np.int64)
    view = np.ascontiguousarray(keys).view(np.dtype((np.void, keys.dtype.itemsize * keys.shape[1])))
    _, first, inverse = np.unique(view.ravel(), return_index=True, return_inverse=True)
    return keys[first], inverse.ravel()


def sum_cells(flow: np.ndarray, bins: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Add up cells that share (flow, bin), in (flow, bin) order; out-of-order packets and file boundaries
    create such twins. Where there are none and each flow's bins ascend (one file's cells), by a sort on the
    flow alone (_by_flow); else counted or hashed over (flow, bin offset): a host's cells span few bins per flow."""
    if len(flow) == 0:
        return flow.astype(np.int64), bins, values
    ordered = _by_flow(flow, bins, values)
    if ordered is not None:
        return ordered
    lo = int(bins.min())
    (f, b), v = group_sum([flow.astype(np.int64), bins - lo], [int(flow.max()) + 1, int(bins.max()) - lo + 1], values)
    return f, b + lo, v


def _by_flow(
    flow: np.ndarray, bins: np.ndarray, values: np.ndarray
) -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The cells in (flow, bin) order where they have no twins, else None. One file's cells come in time order,
    so each flow's bins already ascend: a stable sort by flow alone orders them, and with fewer than 65,536
    flows numpy sorts 16-bit keys by radix (linear). At 512 hosts the counted-or-hashed sum took 2.6 ms of a
    host's 5 ms read, twice the kernel's time."""
    if int(flow.max()) >= 1 << 16:
        return None
    order = np.argsort(flow.astype(np.uint16), kind="stable")
    f, b = flow[order], bins[order]
    if ((f[1:] == f[:-1]) & (b[1:] <= b[:-1])).any():
        return None  # a twin or a bin out of order: summed by group_sum
    return f.astype(np.int64), b.astype(np.int64, copy=False), values[order].astype(np.int64, copy=False)


def merge_host(host: str, scans: list[StreamScan]) -> HostFlows:
    """Fold a host's stream scans into one flow table (several when its streams were scanned apart)."""
    if len(scans) == 1 and scans[0].folded:
        s = scans[0]
        return HostFlows(host, s.keys, s.agg, s.cell_flow, s.cell_bin, s.cell_bytes, s.samples)
    return HostFlows(host, *fold_scans(scans))


def scan_host(paths: list[Path], **kwargs: Any) -> StreamScan:
    """A host's whole stream read (analyze.read.scan.scan_stream) and folded as merge_host would fold it.

    Why fold where it is read: in a pool worker or on a Dask worker the fold runs beside the other
    reads, instead of in the main process after the last file (0.08 s of that serial part at 128 hosts).
    A piece is not folded: the join needs the TCP sequence columns that folding drops.
    """
    scan = scan_stream(paths, **kwargs)
    return replace(scan, **fold_scans([scan])._asdict(), folded=True)


def _renumber(samples: np.ndarray, flows: np.ndarray) -> None:
    """Give SAMPLES (in place) the flow rows FLOWS, keeping their positions."""
    low = samples[:, L.SAMPLE_KEY] & ((1 << L.SAMPLE_FLOW_SHIFT) - 1)
    samples[:, L.SAMPLE_KEY] = (flows.astype(np.int64) << L.SAMPLE_FLOW_SHIFT) | low


class Folded(NamedTuple):
    """A host's flows after folding: the fields HostFlows and StreamScan hold, in their order."""

    keys: np.ndarray
    agg: np.ndarray
    cell_flow: np.ndarray
    cell_bin: np.ndarray
    cell_bytes: np.ndarray
    samples: np.ndarray


def fold_scans(scans: list[StreamScan]) -> Folded:
    """Unique flow keys, their summed counters and first/last times, their cells with twins added up, and
    their sequence samples (flow renumbered to the unique keys)."""
    keys = np.concatenate([s.keys for s in scans]) if scans else np.zeros((0, 5), np.uint64)
    agg = np.concatenate([s.agg for s in scans]) if scans else np.zeros((0, L.N_AGG), np.int64)
    ukeys, inv = unique_rows(keys)
    n = len(ukeys)
    out = np.zeros((n, L.N_AGG), dtype=np.int64)
    for col in SUMMED + TRANSPORT_SUMMED + ROCE_SUMMED + PACE_SUMMED:
        out[:, col] = np.bincount(inv, weights=agg[:, col], minlength=n).astype(np.int64) if n else 0
    # a folded scan carries its own (its sequence columns are gone); an unfolded one's is read from them now
    missing = (
        np.concatenate([s.agg[:, L.AGG_SEQ_MISSING] if s.folded else seq_missing(s.agg) for s in scans]) if n else 0
    )
    out[:, L.AGG_SEQ_MISSING] = np.bincount(inv, weights=missing, minlength=n).astype(np.int64) if n else 0
    for col in TRANSPORT_MAX:
        out[:, col] = -1
        np.maximum.at(out[:, col], inv, agg[:, col])
    out[:, L.AGG_FIRST_NS] = np.iinfo(np.int64).max
    np.minimum.at(out[:, L.AGG_FIRST_NS], inv, agg[:, L.AGG_FIRST_NS])
    np.maximum.at(out[:, L.AGG_LAST_NS], inv, agg[:, L.AGG_LAST_NS])
    offsets = np.cumsum([0] + [len(s.keys) for s in scans[:-1]]) if scans else np.zeros(0, np.int64)
    cf = np.concatenate([inv[o + s.cell_flow] for o, s in zip(offsets, scans)]) if scans else np.zeros(0, np.int64)
    cb = np.concatenate([s.cell_bin for s in scans]) if scans else np.zeros(0, np.int64)
    cv = np.concatenate([s.cell_bytes for s in scans]) if scans else np.zeros(0, np.int64)
    samples = np.concatenate([s.samples for s in scans]) if scans else np.zeros((0, L.N_SAMPLE), np.int64)
    if len(samples):
        starts = np.repeat(offsets, [len(s.samples) for s in scans])
        _renumber(samples, inv[starts + (samples[:, L.SAMPLE_KEY] >> L.SAMPLE_FLOW_SHIFT)])
    # a flow that only ever held fragments later moved to their datagram's flow is gone
    keep = out[:, L.AGG_PACKETS] > 0
    if not keep.all():
        new_id = np.cumsum(keep) - 1
        ok = keep[cf]
        ukeys, out, cf, cb, cv = ukeys[keep], out[keep], new_id[cf[ok]], cb[ok], cv[ok]
        flows = samples[:, L.SAMPLE_KEY] >> L.SAMPLE_FLOW_SHIFT
        samples = samples[keep[flows]]
        _renumber(samples, new_id[flows[keep[flows]]])
    cf, cb, cv = sum_cells(cf, cb, cv)
    return Folded(ukeys, out, cf, cb, cv, samples)

"""The compiled read path: walk pcap/pcapng records and aggregate flows and series in one pass.

Why one fused pass: reading the file is the physical limit, so every packet is touched exactly once,
decoded from link layer to TCP/UDP in registers, and folded into a flow hash table and a sparse
(flow, time bin) series. Nothing per packet is materialised. The tables are preallocated by the
caller; when one fills up the kernel returns a status and the caller grows it and calls again
(re-binding arrays inside the loop would make numba reference-count every packet).

One record's walk is `_packet`: a helper per header (`_link_layer`, `_network_layer`, `_transport_header`), the
flow with fragments joined (`_fragment_flow`), then what the flow keeps (`_sequence`, `_rdma`, `_transport`,
`_cell`). Each is inline="always": numba joins them into the one loop, so the split costs nothing (it read the
5 M-packet ring in 5 % less wall time than the 360-line walk it replaced, the same tables).

This module imports numba. Callers do not import it: analyze.read.compiled hands out these walkers compiled
ahead of time into a cached extension (no numba at run time), or through numba's JIT as a fallback.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from analyze.read.layouts import (
    AGG_ACK_MARKS,
    AGG_ACK_TOP,
    AGG_CUR_BIN,
    AGG_CUR_BYTES,
    AGG_DATA_MARKS,
    AGG_DUP_ACKS,
    AGG_FIRST_NS,
    AGG_GAP2_HI,
    AGG_GAP2_LO,
    AGG_GAP2_NS,
    AGG_GAP_HI,
    AGG_GAP_LO,
    AGG_GAP_NS,
    AGG_INFLIGHT_MAX,
    AGG_INFLIGHT_N,
    CTS_MAX_BYTES,
    AGG_INFLIGHT_SUM,
    AGG_IP_BYTES,
    AGG_GROUP_BYTES,
    AGG_GROUP_NS,
    AGG_GROUP_PREV_NS,
    AGG_LAST_NS,
    AGG_MARK_NS,
    AGG_PACE_BYTES,
    AGG_PACE_NS,
    AGG_MARK_POS,
    AGG_PACKETS,
    AGG_PAYLOAD_BYTES,
    AGG_REORDER_BYTES,
    AGG_RESENT_MARKS,
    AGG_RETRANS_BYTES,
    AGG_REV,
    AGG_ROCE_ACK_MARKS,
    AGG_ROCE_ACKS,
    AGG_ROCE_BECN,
    AGG_ROCE_CE,
    AGG_ROCE_CNPS,
    AGG_ROCE_EVENT_MARKS,
    AGG_ROCE_FECN,
    AGG_ROCE_IMM,
    AGG_ROCE_IN_RESEND,
    AGG_ROCE_MESSAGES,
    AGG_ROCE_NAK_ERRORS,
    AGG_ROCE_NAKS,
    AGG_ROCE_PSN_GAPS,
    AGG_ROCE_PSN_NEXT,
    AGG_ROCE_READ_BYTES,
    AGG_ROCE_REQ_MARKS,
    AGG_ROCE_RESENDS,
    AGG_ROCE_RESENT,
    AGG_ROCE_RNR_NAKS,
    AGG_ROCE_SEND_BYTES,
    AGG_ROCE_SPORT,
    AGG_ROCE_STALL_NS,
    AGG_ROCE_TIMEOUTS,
    AGG_ROCE_VERSION,
    AGG_ROCE_WRITE_BYTES,
    AGG_RTT_MIN,
    AGG_SACK_ACKS,
    AGG_SEQ_END,
    AGG_SEQ_FIRST,
    AGG_SEQ_FIRST_NS,
    AGG_TSECR,
    AGG_TSECR_MARKS,
    AGG_TSVAL,
    AGG_TSVAL_MARKS,
    AGG_WIN,
    AGG_WIN_FULL_BYTES,
    AGG_WIN_N,
    AGG_WIN_SUM,
    AGG_WIRE_BYTES,
    AGG_WSCALE,
    AGG_ZERO_SINCE,
    AGG_ZERO_WIN_NS,
    AGG_ZERO_WINS,
    BOM_BIG,
    BOM_LITTLE,
    BYTES_IP,
    BYTES_PAYLOAD,
    ETHERNET_MIN_FRAME_BYTES,
    ETHERNET_OVERHEAD_BYTES,
    KIND_ARP,
    KIND_BAD_IP,
    KIND_FRAGMENT,
    KIND_ICMP,
    KIND_OTHER_ETHERTYPE,
    KIND_OTHER_IP,
    KIND_ROCE,
    LID_KEY_HI_VALUE,
    KIND_TCP,
    KIND_TRUNCATED,
    KIND_UDP,
    KIND_UNKNOWN_LINKTYPE,
    LINKTYPE_ETHERNET,
    LINKTYPE_INFINIBAND,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
    LINKTYPE_RAW_BSD,
    JUMP_AT,
    JUMP_AT_NS,
    JUMP_BEFORE_AT,
    JUMP_BEFORE_NS,
    JUMP_NS,
    JUMP_RECORD,
    MAX_BLOCK_BYTES,
    MAX_IFACES,
    MAX_RECORD_BYTES,
    PROTO_ROCE,
    REORDER_FLOOR_NS,
    ROCE_EV_ACK,
    ROCE_EV_CHUNK_END,
    ROCE_EV_CHUNK_START,
    ROCE_EV_CNP,
    ROCE_EV_CTS,
    ROCE_EV_NAK,
    ROCE_EV_NAK_ERROR,
    ROCE_EV_READ,
    ROCE_EV_READ_ANSWER,
    ROCE_EV_READ_KEY,
    ROCE_EV_READ_LEN,
    ROCE_EV_RESENT,
    ROCE_EV_RNR_NAK,
    ROCE_TIMEOUT_NS,
    ROCE_UDP_PORT,
    ROW_NS,
    ROW_SRC_HI,
    ROW_SRC_LO,
    ROW_DST_HI,
    ROW_DST_LO,
    ROW_SPORT,
    ROW_DPORT,
    ROW_PROTO,
    ROW_FRAME_BYTES,
    ROW_IP_BYTES,
    PACE_BINS,
    PACE_LOW_LOG2,
    ROW_PAYLOAD_BYTES,
    ROW_FLAGS,
    ROW_SEQ,
    ROW_ACK,
    ROW_WINDOW,
    ROW_FRAGMENT,
    ROW_OPCODE,
    ROW_PSN,
    ROW_QP,
    STATUS_ROWS_FULL,
    ST_NROWS,
    REORDER_NS,
    SAMPLE_ACK,
    SAMPLE_BUDGET,
    SAMPLE_FLOW_SHIFT,
    SAMPLE_INFLIGHT,
    SAMPLE_KEY,
    SAMPLE_NS,
    SAMPLE_RDMA_EVENT,
    SAMPLE_RDMA_REQUEST,
    SAMPLE_RESENT,
    SAMPLE_SHIFT,
    SAMPLE_TSECR,
    SAMPLE_TSVAL,
    SHB_TYPE,
    STATUS_BUDGET,
    STATUS_CELLS_FULL,
    STATUS_CORRUPT,
    STATUS_END,
    STATUS_FLOWS_FULL,
    STATUS_SAMPLES_FULL,
    STATUS_TOO_MANY_IFACES,
    STATUS_TRUNCATED,
    ST_BASE,
    ST_FIRST_NS,
    ST_IFACE_BASE,
    ST_JUMPS_SEEN,
    ST_LAST_AT,
    ST_LAST_NS,
    ST_MAX_NS,
    ST_NCELLS,
    ST_NFLOWS,
    ST_NIFACE,
    ST_NJUMPS,
    ST_NSAMPLES,
    ST_PACKET_BYTES,
    ST_POS,
    ST_RECORDS,
    ST_STATUS,
    ST_SWAP,
)

IPV4_MAPPED = np.uint64(0x0000FFFF00000000)
LID_KEY_HI = np.uint64(LID_KEY_HI_VALUE)
FRAG_SLOTS = 4096

_CACHE = True
# The walkers run without numba's reference-counting runtime: they allocate nothing, and with it numba
# increfs and decrefs every array argument of the inlined per-packet helpers on every packet (2.2x slower).
_NO_NRT: dict[str, Any] = dict(cache=_CACHE, _nrt=False)


# Indices on the per-packet path are unsigned (np.uint64): numba then drops its fix-up for negative indices,
# and LLVM can prove neighbouring bytes neighbours and merge their loads into one (the walk took 30 % less time;
# the readers add unsigned offsets to an unsigned base, which measured faster than np.uint64(o + k)).
@njit(inline="always", cache=_CACHE)
def _byte(b, o):
    return np.int64(b[np.uint64(o)])


@njit(inline="always", cache=_CACHE)
def _be16(b, o):
    u = np.uint64(o)
    return (np.int64(b[u]) << 8) | np.int64(b[u + np.uint64(1)])


@njit(inline="always", cache=_CACHE)
def _be32(b, o):
    u = np.uint64(o)
    return (
        (np.int64(b[u]) << 24)
        | (np.int64(b[u + np.uint64(1)]) << 16)
        | (np.int64(b[u + np.uint64(2)]) << 8)
        | np.int64(b[u + np.uint64(3)])
    )


@njit(inline="always", cache=_CACHE)
def _be64(b, o):
    return (np.uint64(_be32(b, o)) << np.uint64(32)) | np.uint64(_be32(b, o + 4))


@njit(inline="always", cache=_CACHE)
def _rd16(b, o, swap):
    if swap:
        return _be16(b, o)
    u = np.uint64(o)
    return np.int64(b[u]) | (np.int64(b[u + np.uint64(1)]) << 8)


@njit(inline="always", cache=_CACHE)
def _rd32(b, o, swap):
    if swap:
        return _be32(b, o)
    u = np.uint64(o)
    return (
        np.int64(b[u])
        | (np.int64(b[u + np.uint64(1)]) << 8)
        | (np.int64(b[u + np.uint64(2)]) << 16)
        | (np.int64(b[u + np.uint64(3)]) << 24)
    )


@njit(inline="always", cache=_CACHE)
def _mix(h, v):
    h ^= v
    h *= np.uint64(0x9E3779B97F4A7C15)
    return h ^ (h >> np.uint64(29))


@njit(inline="always", cache=_CACHE)
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(inline="always", cache=_CACHE)
def _flow_hash(a0, a1, a2, a3, ports, proto):
    """One multiply over rotated key words: a short dependency chain on the hottest path (5 chained
    multiply rounds cost ~6 % of the scan); the high half folded down keeps the low slot bits mixed."""
    x = (a0 ^ _rotl(a1, 17)) ^ (_rotl(a2, 31) ^ _rotl(a3, 47)) ^ ((ports << np.uint64(8)) | proto)
    x *= np.uint64(0x9E3779B97F4A7C15)
    return x ^ (x >> np.uint64(31))


@njit(inline="always", cache=_CACHE)
def _flow_index(keys, slots, agg, st, a0, a1, a2, a3, ports, proto, ts):
    """Find or insert the directed 5-tuple; returns its row in the flow table."""
    h = _flow_hash(a0, a1, a2, a3, np.uint64(ports), np.uint64(proto))
    mask = slots.shape[0] - 1
    s = np.int64(h & np.uint64(mask))
    while True:
        f = slots[np.uint64(s)]
        if f < 0:
            f = st[ST_NFLOWS]
            row = np.uint64(f)
            st[ST_NFLOWS] = f + 1
            slots[np.uint64(s)] = f
            keys[row, 0] = a0
            keys[row, 1] = a1
            keys[row, 2] = a2
            keys[row, 3] = a3
            keys[row, 4] = (np.uint64(ports) << np.uint64(8)) | np.uint64(proto)
            agg[row, :] = 0
            agg[row, AGG_FIRST_NS] = ts
            agg[row, AGG_SEQ_END] = -1
            agg[row, AGG_CUR_BIN] = -1
            agg[row, AGG_GAP_LO] = -1
            agg[row, AGG_GAP2_LO] = -1
            agg[row, AGG_SEQ_FIRST] = -1
            agg[row, AGG_ACK_TOP] = -1
            agg[row, AGG_REV] = -1
            agg[row, AGG_WIN] = -1
            agg[row, AGG_WSCALE] = -1
            agg[row, AGG_ZERO_SINCE] = -1
            agg[row, AGG_MARK_POS] = -1
            agg[row, AGG_RTT_MIN] = -1
            agg[row, AGG_TSVAL] = -1
            agg[row, AGG_TSECR] = -1
            agg[row, AGG_ROCE_PSN_NEXT] = -1
            return f
        row = np.uint64(f)
        if (
            keys[row, 0] == a0
            and keys[row, 1] == a1
            and keys[row, 2] == a2
            and keys[row, 3] == a3
            and keys[row, 4] == ((np.uint64(ports) << np.uint64(8)) | np.uint64(proto))
        ):
            return f
        s = (s + 1) & mask


@njit(inline="always", cache=_CACHE)
def _flow_find(keys, slots, a0, a1, a2, a3, ports, proto):
    """The row of a directed 5-tuple already in the table, else -1 (nothing inserted)."""
    h = _flow_hash(a0, a1, a2, a3, np.uint64(ports), np.uint64(proto))
    mask = slots.shape[0] - 1
    s = np.int64(h & np.uint64(mask))
    k4 = (np.uint64(ports) << np.uint64(8)) | np.uint64(proto)
    while True:
        f = slots[np.uint64(s)]
        if f < 0:
            return np.int64(-1)
        row = np.uint64(f)
        if (
            keys[row, 0] == a0
            and keys[row, 1] == a1
            and keys[row, 2] == a2
            and keys[row, 3] == a3
            and keys[row, 4] == k4
        ):
            return f
        s = (s + 1) & mask


@njit(inline="always", cache=_CACHE)
def _tcp_options(b, o, stop, flags, agg, row):
    """Window scale from a SYN's options, and whether a pure ACK carries SACK blocks."""
    if flags & 2:
        agg[row, AGG_WSCALE] = 0  # a SYN without the option: windows are not scaled
    while o + 1 < stop:
        kind = _byte(b, o)
        if kind == 0:
            break
        if kind == 1:
            o += 1
            continue
        ln = _byte(b, o + 1)
        if ln < 2:
            break
        if kind == 3 and (flags & 2) and o + 2 < stop:
            agg[row, AGG_WSCALE] = min(_byte(b, o + 2), np.int64(14))
        elif kind == 5:
            agg[row, AGG_SACK_ACKS] += 1
            break
        o += ln


@njit(inline="always", cache=_CACHE)
def _timestamps(agg, row, samples, st, f, tsval, tsecr, payload, ack, ts):
    """A row for a timestamp value's first data segment and one for the first ACK echoing a value, each kept
    by the value's low bits at the flow's level (SAMPLE_BUDGET per doubling), as positions are."""
    if tsval >= 0 and payload > 0 and tsval != agg[row, AGG_TSVAL]:
        agg[row, AGG_TSVAL] = tsval
        level = _level(agg, row, AGG_TSVAL_MARKS)
        if (tsval & ((np.int64(1) << level) - 1)) == 0:
            _sample(samples, st, f, SAMPLE_TSVAL | tsval, ts)
    if tsecr > 0 and ack >= 0 and tsecr != agg[row, AGG_TSECR]:
        agg[row, AGG_TSECR] = tsecr
        level = _level(agg, row, AGG_TSECR_MARKS)
        if (tsecr & ((np.int64(1) << level) - 1)) == 0:
            _sample(samples, st, f, SAMPLE_TSECR | tsecr, ts)


@njit(inline="always", cache=_CACHE)
def _transport(
    b,
    l4,
    l4hdr,
    end,
    flags,
    win,
    ack,
    payload,
    marked,
    agg,
    row,
    f,
    keys,
    slots,
    samples,
    st,
    a0,
    a1,
    a2,
    a3,
    ports,
    ts,
):
    """TCP behaviour of one segment: options, duplicate ACKs, zero windows, and for new data the bytes in
    flight against the receiver's window (its ACKs and windows are the reverse flow's, found once); where the
    segment got a data sample (marked), a row with those bytes in flight."""
    if l4hdr > 20 and ((flags & 2) or payload == 0):
        _tcp_options(b, l4 + 20, min(l4 + l4hdr, end), flags, agg, row)
    elif flags & 2:
        agg[row, AGG_WSCALE] = 0
    if l4hdr >= 32 and l4 + 32 <= end and _be32(b, l4 + 20) == 0x0101080A:  # NOP NOP TS, as Linux sends it
        tsval = _be32(b, l4 + 24)
        tsecr = _be32(b, l4 + 28)
    if ack >= 0:
        # tshark's rule: the window non-zero (a receiver answering zero-window probes repeats its ACK and its
        # closed window, no sign of a lost segment) and the sequence number the next expected one (a pure ACK
        # built before a data segment but captured after it repeats that segment's ACK and window: two of the
        # three extra duplicates counted on a live capture before this rule, tests/collective/test_transport.py)
        top = agg[row, AGG_SEQ_END]
        same = ack == agg[row, AGG_ACK_TOP] and win == agg[row, AGG_WIN] and win != 0
        if payload == 0 and (flags & 7) == 0 and same and (top < 0 or _be32(b, l4 + 4) == top):
            agg[row, AGG_DUP_ACKS] += 1
        if (flags & 4) == 0:
            if win == 0:
                if agg[row, AGG_ZERO_SINCE] < 0:
                    agg[row, AGG_ZERO_SINCE] = ts
                    agg[row, AGG_ZERO_WINS] += 1
            elif agg[row, AGG_ZERO_SINCE] >= 0:
                agg[row, AGG_ZERO_WIN_NS] += ts - agg[row, AGG_ZERO_SINCE]
                agg[row, AGG_ZERO_SINCE] = -1
        agg[row, AGG_WIN] = win
        _timestamps(agg, row, samples, st, f, tsval, tsecr, payload, ack, ts)
    r = agg[row, AGG_REV]
    if r < 0:
        n = agg[row, AGG_PACKETS]
        if (n & (n - 1)) != 0:
            return  # look for the reverse flow at packets 1, 2, 4, 8, ...: a one-way flow costs little
        r = _flow_find(keys, slots, a2, a3, a0, a1, ((ports & 0xFFFF) << 16) | (ports >> 16), 6)
        if r < 0:
            return
        agg[row, AGG_REV] = r
        agg[np.uint64(r), AGG_REV] = f
    if payload <= 0:
        return
    rr = np.uint64(r)
    acked = agg[rr, AGG_ACK_TOP]
    rwin = agg[rr, AGG_WIN]
    if acked < 0 or rwin < 0:
        return
    inflight = (agg[row, AGG_SEQ_END] - acked) & 0xFFFFFFFF
    if inflight >= 0x80000000:
        return
    agg[row, AGG_INFLIGHT_SUM] += inflight
    agg[row, AGG_INFLIGHT_N] += 1
    if marked:
        _sample(samples, st, f, SAMPLE_INFLIGHT | inflight, ts)
    if inflight > agg[row, AGG_INFLIGHT_MAX]:
        agg[row, AGG_INFLIGHT_MAX] = inflight
    scale = agg[rr, AGG_WSCALE]
    if scale >= 0:
        window = rwin << scale
        agg[row, AGG_WIN_SUM] += window
        agg[row, AGG_WIN_N] += 1
        if inflight + payload > window:
            agg[row, AGG_WIN_FULL_BYTES] += payload


@njit(inline="always", cache=_CACHE)
def _wire_bytes(ip_len, hdr_len, mtu):
    """Bytes on an Ethernet wire for an IP packet that TSO/GRO may have merged from several frames.

    A merged segment leaves the NIC as frames of at most `mtu` IP bytes, each repeating the headers.
    """
    frames = np.int64(1)
    if ip_len > mtu and mtu > hdr_len:
        frames = (ip_len - hdr_len + (mtu - hdr_len) - 1) // (mtu - hdr_len)
    total = ip_len + (frames - 1) * hdr_len
    per_frame_min = ETHERNET_MIN_FRAME_BYTES - 18  # IP bytes below this are padded
    if frames == 1 and ip_len < per_frame_min:
        total = per_frame_min
    return total + frames * ETHERNET_OVERHEAD_BYTES


@njit(inline="always", cache=_CACHE)
def _pace(agg, row, wire, ts):
    """Close the flow's latest group of packets when a later timestamp comes: its bytes and the time since the
    group before it go to the bin of their rate (layouts.AGG_PACE_BYTES). A packet dated at or before the group
    joins it: the capture's clock did not tell them apart. A flow's last group is never closed (one of many)."""
    g = agg[row, AGG_GROUP_NS]
    if ts <= g:
        agg[row, AGG_GROUP_BYTES] += wire
        return
    prev = agg[row, AGG_GROUP_PREV_NS]
    if prev > 0:
        gap = g - prev
        nbytes = agg[row, AGG_GROUP_BYTES]
        k = np.int64(np.floor(2.0 * np.log2(nbytes * 8e9 / gap))) - 2 * PACE_LOW_LOG2
        k = min(max(k, 0), PACE_BINS - 1)
        agg[row, AGG_PACE_BYTES + k] += nbytes
        agg[row, AGG_PACE_NS + k] += gap
    if g > 0:
        agg[row, AGG_GROUP_PREV_NS] = g
    agg[row, AGG_GROUP_NS] = ts
    agg[row, AGG_GROUP_BYTES] = wire


@njit(inline="always", cache=_CACHE)
def _fills(agg, row, lo_col, hi_col, ns_col, seq, n, ts):
    """True when [seq, seq+n) lies in the hole kept in columns lo/hi/ns soon after its opening (REORDER_NS);
    the hole then shrinks from whichever end was filled (a fill in its middle leaves it as it was)."""
    lo = agg[row, lo_col]
    window = np.int64(REORDER_NS)
    rtt = agg[row, AGG_RTT_MIN]
    if rtt > 0:
        window = max(min(rtt, np.int64(REORDER_NS)), np.int64(REORDER_FLOOR_NS))
    if lo < 0 or ts - agg[row, ns_col] > window:
        return False
    width = (agg[row, hi_col] - lo) & 0xFFFFFFFF
    off = (seq - lo) & 0xFFFFFFFF
    if off + n > width:
        return False
    if off == 0:
        agg[row, lo_col] = (seq + n) & 0xFFFFFFFF
    elif off + n == width:
        agg[row, hi_col] = seq
    if agg[row, lo_col] == agg[row, hi_col]:
        agg[row, lo_col] = -1
    return True


@njit(inline="always", cache=_CACHE)
def _fills_gap(agg, row, seq, n, ts):
    """Bytes below the highest sequence seen that fill one of the flow's two latest holes soon enough
    (row: the flow's row, unsigned)."""
    return _fills(agg, row, AGG_GAP_LO, AGG_GAP_HI, AGG_GAP_NS, seq, n, ts) or _fills(
        agg, row, AGG_GAP2_LO, AGG_GAP2_HI, AGG_GAP2_NS, seq, n, ts
    )


@njit(inline="always", cache=_CACHE)
def _sample(samples, st, f, pos, ts):
    n = st[ST_NSAMPLES]
    samples[n, SAMPLE_KEY] = (np.int64(f) << SAMPLE_FLOW_SHIFT) | pos
    samples[n, SAMPLE_NS] = ts
    st[ST_NSAMPLES] = n + 1


@njit(inline="always", cache=_CACHE)
def _level(agg, row, col):
    """Count one more mark in column col; the flow's thinning level for it (SAMPLE_BUDGET per doubling)."""
    marks = agg[row, col]
    agg[row, col] = marks + 1
    level = 0
    while marks >= SAMPLE_BUDGET * ((np.int64(2) << level) - 1):
        level += 1
    return level


@njit(inline="always", cache=_CACHE)
def _kept(agg, row, col, pos):
    """Count a sample position the flow passed; whether it is kept at the flow's level (SAMPLE_BUDGET)."""
    level = _level(agg, row, col)
    return ((pos >> SAMPLE_SHIFT) & ((np.int64(1) << level) - 1)) == 0


@njit(inline="always", cache=_CACHE)
def _thinned(agg, row, col):
    """Count one more event in column col; 0 when it is not kept, else how many events it stands for (every one
    at first, then every 2nd, 4th, ...: about SAMPLE_BUDGET kept per doubling)."""
    level = _level(agg, row, col)
    if ((agg[row, col] - 1) & ((np.int64(1) << level) - 1)) == 0:
        return np.int64(1) << level
    return np.int64(0)


@njit(inline="always", cache=_CACHE)
def _sample_resent(agg, row, samples, st, f, nbytes, ts):
    """A re-sent segment's row, its bytes multiplied by the segments it stands for."""
    weight = _thinned(agg, row, AGG_RESENT_MARKS)
    if weight:
        _sample(samples, st, f, SAMPLE_RESENT | min(nbytes * weight, np.int64(0xFFFFFFFF)), ts)


@njit(inline="always", cache=_CACHE)
def _sample_data(agg, row, samples, st, f, start, end, ts):
    """A data sample when new bytes [start, end) (mod 2^32) hold a multiple of 2^SAMPLE_SHIFT; whether one was
    kept."""
    step = np.int64(1) << SAMPLE_SHIFT
    pos = ((start + step - 1) & ~(step - 1)) & 0xFFFFFFFF
    if ((pos - start) & 0xFFFFFFFF) < ((end - start) & 0xFFFFFFFF):
        agg[row, AGG_MARK_POS] = pos
        agg[row, AGG_MARK_NS] = ts
        if _kept(agg, row, AGG_DATA_MARKS, pos):
            _sample(samples, st, f, pos, ts)
            return True
    return False


@njit(inline="always", cache=_CACHE)
def _sample_ack(agg, row, samples, st, f, ack, ts):
    """An ACK sample when the acknowledgment reaches past a multiple of 2^SAMPLE_SHIFT for the first time."""
    top = agg[row, AGG_ACK_TOP]
    if top < 0:
        agg[row, AGG_ACK_TOP] = ack
        return
    advance = (ack - top) & 0xFFFFFFFF
    if advance == 0 or advance >= 0x80000000:
        return  # a duplicate or an older ACK
    agg[row, AGG_ACK_TOP] = ack
    data = agg[row, AGG_REV]
    if data >= 0:  # the round trip of the latest marked byte of the data this ACK answers
        d = np.uint64(data)
        mark = agg[d, AGG_MARK_POS]
        if mark >= 0 and ((mark - top) & 0xFFFFFFFF) < advance:
            rtt = ts - agg[d, AGG_MARK_NS]
            if rtt > 0 and (agg[d, AGG_RTT_MIN] < 0 or rtt < agg[d, AGG_RTT_MIN]):
                agg[d, AGG_RTT_MIN] = rtt
            agg[d, AGG_MARK_POS] = -1
    step = np.int64(1) << SAMPLE_SHIFT
    pos = ((top + step) & ~(step - 1)) & 0xFFFFFFFF
    if ((pos - top) & 0xFFFFFFFF) <= advance and _kept(agg, row, AGG_ACK_MARKS, pos):
        _sample(samples, st, f, pos | SAMPLE_ACK, ts)


@njit(inline="always", cache=_CACHE)
def _bth_extension_bytes(op):
    """Bytes of the extension headers between a BTH with this opcode and its payload (RETH, AETH, ImmDt, IETH,
    DETH, AtomicETH; a CNP's 16 reserved bytes); -1 for an opcode this reader does not know (RD, vendor)."""
    if op == 0x81:
        return np.int64(16)
    t = op >> 5
    c = op & 0x1F
    if t == 3:  # UD: DETH, then ImmDt for SEND only with immediate
        if c == 4:
            return np.int64(8)
        if c == 5:
            return np.int64(12)
        return np.int64(-1)
    if t > 1 or c > 0x17 or c == 0x15:
        return np.int64(-1)
    if c == 6 or c == 0x0A or c == 0x0C:
        return np.int64(16)
    if c == 0x0B:
        return np.int64(20)
    if c == 0x12:
        return np.int64(12)
    if c == 0x13 or c == 0x14:
        return np.int64(28)
    if c == 3 or c == 5 or c == 9 or c == 0x0D or c == 0x0F or c == 0x10 or c == 0x11 or c == 0x16 or c == 0x17:
        return np.int64(4)
    return np.int64(0)


@njit(inline="always", cache=_CACHE)
def _psn_kept(agg, row, col, psn):
    """Count one more PSN sample in column col; whether it is kept. Kept by a hash of the PSN, not its low bits:
    NCCL asks for an ACK at the end of each message, so those PSNs share their low bits. Both captures of a queue
    pair hash alike, so they keep the same PSNs."""
    level = _level(agg, row, col)
    h = ((psn * np.int64(0x9E3779B1)) >> 12) & ((np.int64(1) << level) - 1)
    return h == 0


@njit(inline="always", cache=_CACHE)
def _rdma_event(agg, row, samples, st, f, code, psn, ts):
    """A NAK, CNP or resend as an event row, thinned like re-sent rows (every one at first)."""
    if _thinned(agg, row, AGG_ROCE_EVENT_MARKS):
        _sample(samples, st, f, SAMPLE_RDMA_EVENT | (code << 24) | psn, ts)


@njit(inline="always", cache=_CACHE)
def _rdma(b, bth, end, op, payload, ecn, prev_ns, agg, row, samples, st, f, ts):
    """Fold one RDMA packet's transport into its queue pair's counters: bytes by opcode class, messages, ACKs and
    NAKs (AETH syndrome), CNPs, congestion marks, and the request PSN sequence (gaps, resends, timeouts)."""
    c = op & 0x1F
    rc_uc = (op >> 5) <= 1
    if ecn == 3:
        agg[row, AGG_ROCE_CE] += 1
    flags = _byte(b, bth + 4)
    if flags & 0x80:
        agg[row, AGG_ROCE_FECN] += 1
    if flags & 0x40:
        agg[row, AGG_ROCE_BECN] += 1
    psn = _be32(b, bth + 8) & 0xFFFFFF
    if op == 0x81:
        agg[row, AGG_ROCE_CNPS] += 1
        _rdma_event(agg, row, samples, st, f, ROCE_EV_CNP, 0, ts)
        return
    if rc_uc and (c == 0x11 or c == 0x12):  # ACK or atomic ACK: the AETH's syndrome says which
        syndrome = _byte(b, bth + 12) if bth + 13 <= end else np.int64(0)  # cut before the AETH: an ACK
        kind = syndrome >> 5
        if kind == 0:
            agg[row, AGG_ROCE_ACKS] += 1
            if _psn_kept(agg, row, AGG_ROCE_ACK_MARKS, psn):
                _sample(samples, st, f, SAMPLE_RDMA_EVENT | (ROCE_EV_ACK << 24) | psn, ts)
        elif kind == 1:
            agg[row, AGG_ROCE_RNR_NAKS] += 1
            _rdma_event(agg, row, samples, st, f, ROCE_EV_RNR_NAK, psn, ts)
        elif kind == 3 and (syndrome & 0x1F) == 0:
            agg[row, AGG_ROCE_NAKS] += 1
            _rdma_event(agg, row, samples, st, f, ROCE_EV_NAK, psn, ts)
        else:
            agg[row, AGG_ROCE_NAK_ERRORS] += 1
            _rdma_event(agg, row, samples, st, f, ROCE_EV_NAK_ERROR, psn, ts)
        return
    if rc_uc and c >= 0x0D and c <= 0x10:  # READ responses: the reverse flow's PSN space
        agg[row, AGG_ROCE_READ_BYTES] += payload
        if c == 0x0D or c == 0x10:  # the first: its PSN is the request's (analyze.wire.failover)
            _sample(samples, st, f, SAMPLE_RDMA_EVENT | (ROCE_EV_READ_ANSWER << 24) | psn, ts)
        return
    if rc_uc and c >= 6 and c <= 0x0B:
        agg[row, AGG_ROCE_WRITE_BYTES] += payload
    elif rc_uc and c <= 0x17 and c != 0x0C and c != 0x13 and c != 0x14:
        agg[row, AGG_ROCE_SEND_BYTES] += payload
    elif not rc_uc:
        agg[row, AGG_ROCE_SEND_BYTES] += payload
    if (
        not rc_uc
        or c == 0
        or c == 4
        or c == 5
        or c == 6
        or c == 0x0A
        or c == 0x0B
        or c == 0x0C
        or c == 0x13
        or c == 0x14
        or c == 0x17
    ):
        agg[row, AGG_ROCE_MESSAGES] += 1
    if (rc_uc and (c == 3 or c == 5 or c == 9 or c == 0x0B)) or op == 0x65:
        agg[row, AGG_ROCE_IMM] += 1
    if (_byte(b, bth + 8) & 0x80) and _psn_kept(agg, row, AGG_ROCE_REQ_MARKS, psn):  # AckReq
        _sample(samples, st, f, SAMPLE_RDMA_REQUEST | psn, ts)
    # the request PSN sequence: ahead of the next expected is a gap, behind it a resend. A READ request takes
    # as many PSNs as its response has packets, unknown here, so the PSN after one is not checked for a gap.
    nxt = agg[row, AGG_ROCE_PSN_NEXT]
    if nxt >= 0 and (op >> 5) != 3:
        d = (psn - nxt) & 0xFFFFFF
        if d >= 0x800000:  # behind: sent before
            agg[row, AGG_ROCE_RESENT] += 1
            agg[row, AGG_RETRANS_BYTES] += payload
            if agg[row, AGG_ROCE_IN_RESEND] == 0:
                agg[row, AGG_ROCE_IN_RESEND] = 1
                agg[row, AGG_ROCE_RESENDS] += 1
                if ts - prev_ns >= ROCE_TIMEOUT_NS:
                    agg[row, AGG_ROCE_TIMEOUTS] += 1
                    agg[row, AGG_ROCE_STALL_NS] += ts - prev_ns
                _rdma_event(agg, row, samples, st, f, ROCE_EV_RESENT, psn, ts)
            return
        if d > 0:
            agg[row, AGG_ROCE_PSN_GAPS] += d
    agg[row, AGG_ROCE_IN_RESEND] = 0
    agg[row, AGG_ROCE_PSN_NEXT] = (psn + 1) & 0xFFFFFF if c != 0x0C else -1
    if rc_uc and c >= 6 and c <= 0x0B:
        _write_marks(samples, st, f, c, payload, psn, ts)
    elif op == 0x0C and bth + 28 <= end:  # an RC READ request, its RETH captured
        _read_marks(b, bth, samples, st, f, psn, ts)


@njit(inline="always", cache=_CACHE)
def _read_marks(b, bth, samples, st, f, psn, ts):
    """A READ request as three event rows, unthinned: its PSN, a 24-bit key of its RETH's virtual address and
    length, and the length (at most 2^24 - 1). After a failover an answered buffer is read again on another device:
    the same bytes moved twice, not goodput (analyze.wire.failover)."""
    va_hi, va_lo, length = _be32(b, bth + 12), _be32(b, bth + 16), _be32(b, bth + 24)
    key = (va_hi * np.int64(0x9E3779B1)) ^ (va_lo * np.int64(0x85EBCA77)) ^ (length * np.int64(0xC2B2AE3D))
    _sample(samples, st, f, SAMPLE_RDMA_EVENT | (ROCE_EV_READ << 24) | psn, ts)
    _sample(samples, st, f, SAMPLE_RDMA_EVENT | (ROCE_EV_READ_KEY << 24) | ((key >> 20) & 0xFFFFFF), ts)
    _sample(samples, st, f, SAMPLE_RDMA_EVENT | (ROCE_EV_READ_LEN << 24) | min(length, np.int64(0xFFFFFF)), ts)


@njit(inline="always", cache=_CACHE)
def _write_marks(samples, st, f, c, payload, psn, ts):
    """A WRITE message's first and last packet as event rows, or, for one small WRITE only, a clear-to-send: NCCL's
    receiver grants each chunk with one, and whether the sender or the receiver kept the link idle between grant
    and chunk (analyze.wire.clear_to_send) needs every one, unthinned (about one row per 16 packets at 128 KB)."""
    only = c == 0x0A or c == 0x0B
    if only and payload <= CTS_MAX_BYTES:
        _sample(samples, st, f, SAMPLE_RDMA_EVENT | (ROCE_EV_CTS << 24) | psn, ts)
        return
    if c == 6 or only:
        _sample(samples, st, f, SAMPLE_RDMA_EVENT | (ROCE_EV_CHUNK_START << 24) | psn, ts)
    if c == 8 or c == 9 or only:
        _sample(samples, st, f, SAMPLE_RDMA_EVENT | (ROCE_EV_CHUNK_END << 24) | psn, ts)


@njit(inline="always", cache=_CACHE)
def _row(rows, st, ts, a0, a1, a2, a3, sport, dport, proto, wirelen, ip_len, payload, flags, seq, ack, win):
    """Append one packet row (layouts.ROW_*); the walker returned before the packet when the table was full."""
    r = np.uint64(st[ST_NROWS])
    rows[r, ROW_NS] = ts
    rows[r, ROW_SRC_HI] = np.int64(a0)
    rows[r, ROW_SRC_LO] = np.int64(a1)
    rows[r, ROW_DST_HI] = np.int64(a2)
    rows[r, ROW_DST_LO] = np.int64(a3)
    rows[r, ROW_SPORT] = sport
    rows[r, ROW_DPORT] = dport
    rows[r, ROW_PROTO] = proto
    rows[r, ROW_FRAME_BYTES] = wirelen
    rows[r, ROW_IP_BYTES] = ip_len
    rows[r, ROW_PAYLOAD_BYTES] = payload
    rows[r, ROW_FLAGS] = flags
    rows[r, ROW_SEQ] = seq
    rows[r, ROW_ACK] = ack
    rows[r, ROW_WINDOW] = win
    rows[r, ROW_FRAGMENT] = 0
    rows[r, ROW_QP] = -1
    rows[r, ROW_OPCODE] = -1
    rows[r, ROW_PSN] = -1
    st[ST_NROWS] = st[ST_NROWS] + 1


@njit(inline="always", cache=_CACHE)
def _link_layer(b, o, end, linktype, kinds):
    """Where the network header starts and its ethertype after any 802.1Q / QinQ tags (0: the IP version nibble
    decides); -1 where the record holds no IP or RDMA packet, counted in KINDS."""
    if linktype == LINKTYPE_ETHERNET:
        hdr, type_at = 14, 12
    elif linktype == LINKTYPE_LINUX_SLL:
        hdr, type_at = 16, 14
    elif linktype == LINKTYPE_LINUX_SLL2:
        hdr, type_at = 20, 0
    elif linktype == LINKTYPE_NULL:
        hdr, type_at = 4, -1  # the address family says only "IP": the version nibble decides
    elif (
        linktype == LINKTYPE_RAW
        or linktype == LINKTYPE_RAW_BSD
        or linktype == LINKTYPE_IPV4
        or linktype == LINKTYPE_IPV6
    ):
        hdr, type_at = 0, -1
    elif linktype == LINKTYPE_INFINIBAND:
        hdr, type_at = 8, -1  # the LRH; its LNH says whether a GRH (IPv6-shaped) or the BTH follows
    else:
        kinds[KIND_UNKNOWN_LINKTYPE] += 1
        return np.int64(-1), np.int64(0)
    if end - o < hdr:
        kinds[KIND_TRUNCATED] += 1
        return np.int64(-1), np.int64(0)
    ethertype = _be16(b, o + type_at) if type_at >= 0 else np.int64(0)
    p = np.int64(o + hdr)
    while (ethertype == 0x8100 or ethertype == 0x88A8 or ethertype == 0x9100) and p + 4 <= end:
        ethertype = _be16(b, p + 2)  # 802.1Q / QinQ tags between the addresses and the type
        p += 4
    if ethertype == 0x0806:
        kinds[KIND_ARP] += 1
        return np.int64(-1), ethertype
    if ethertype != 0 and ethertype != 0x0800 and ethertype != 0x86DD and ethertype != 0x8915:
        kinds[KIND_OTHER_ETHERTYPE] += 1
        return np.int64(-1), ethertype
    if p >= end:
        kinds[KIND_TRUNCATED] += 1
        return np.int64(-1), ethertype
    return p, ethertype


@njit(inline="always", cache=_CACHE)
def _network_layer(b, o, p, end, wirelen, lid_routed, kinds):
    """The network header: (l4 offset or -1 where the packet is not read further, counted in KINDS; the four
    address words; IP length; protocol; ECN; header length; fragment id, >= 0 for a fragment; later fragment)."""
    a0 = np.uint64(0)
    a1 = np.uint64(0)
    a2 = np.uint64(0)
    a3 = np.uint64(0)
    frame_ip = wirelen - (p - o)  # IP bytes implied by the frame, when the header says 0 (TSO)
    ecn = np.int64(0)
    frag_id = np.int64(-1)
    later_fragment = False
    version = _byte(b, p) >> 4
    if lid_routed:  # addresses are the LRH's local IDs; its packet length counts 4-byte words from the LRH on
        if (_byte(b, o + 1) & 3) != 2:
            kinds[KIND_OTHER_ETHERTYPE] += 1  # raw IPv6 or raw datagrams over InfiniBand: no BTH
            return np.int64(-1), a0, a1, a2, a3, np.int64(0), np.int64(0), ecn, np.int64(0), frag_id, later_fragment
        a0 = LID_KEY_HI
        a1 = np.uint64(_be16(b, o + 6))
        a2 = LID_KEY_HI
        a3 = np.uint64(_be16(b, o + 2))
        ip_len = (_be16(b, o + 4) & 0x7FF) * 4 - 8
        return p, a0, a1, a2, a3, ip_len, np.int64(PROTO_ROCE), ecn, np.int64(0), frag_id, later_fragment
    if version == 4:
        if p + 20 > end:
            kinds[KIND_TRUNCATED] += 1
            return np.int64(-1), a0, a1, a2, a3, np.int64(0), np.int64(0), ecn, np.int64(0), frag_id, later_fragment
        ihl = (_byte(b, p) & 15) * 4
        ip_len = _be16(b, p + 2)
        if ihl < 20:
            kinds[KIND_BAD_IP] += 1
            return np.int64(-1), a0, a1, a2, a3, np.int64(0), np.int64(0), ecn, np.int64(0), frag_id, later_fragment
        if ip_len == 0:
            ip_len = frame_ip
        proto = _byte(b, p + 9)
        ecn = _byte(b, p + 1) & 3
        a1 = IPV4_MAPPED | np.uint64(_be32(b, p + 12))
        a3 = IPV4_MAPPED | np.uint64(_be32(b, p + 16))
        fl = _be16(b, p + 6)
        if (fl & 0x1FFF) != 0:
            later_fragment = True
            frag_id = _be16(b, p + 4)
        elif (fl & 0x2000) != 0:
            frag_id = _be16(b, p + 4)
        return p + ihl, a0, a1, a2, a3, ip_len, proto, ecn, ihl, frag_id, later_fragment
    if version != 6:
        kinds[KIND_BAD_IP] += 1
        return np.int64(-1), a0, a1, a2, a3, np.int64(0), np.int64(0), ecn, np.int64(0), frag_id, later_fragment
    if p + 40 > end:
        kinds[KIND_TRUNCATED] += 1
        return np.int64(-1), a0, a1, a2, a3, np.int64(0), np.int64(0), ecn, np.int64(0), frag_id, later_fragment
    ip_len = 40 + _be16(b, p + 4)
    if ip_len == 40 and frame_ip > 40:
        ip_len = frame_ip
    proto = _byte(b, p + 6)
    ecn = (_byte(b, p + 1) >> 4) & 3
    a0 = _be64(b, p + 8)
    a1 = _be64(b, p + 16)
    a2 = _be64(b, p + 24)
    a3 = _be64(b, p + 32)
    l4 = p + 40
    # walk the extension headers that may precede TCP/UDP
    while l4 + 8 <= end and (proto == 0 or proto == 43 or proto == 60 or proto == 44):
        if proto == 44:
            if (_be16(b, l4 + 2) & 0xFFF8) != 0:
                later_fragment = True
            frag_id = _be32(b, l4 + 4)
            proto = _byte(b, l4)
            l4 += 8
        else:
            nxt = _byte(b, l4)
            l4 += (_byte(b, l4 + 1) + 1) * 8
            proto = nxt
    return l4, a0, a1, a2, a3, ip_len, proto, ecn, l4 - p, frag_id, later_fragment


@njit(inline="always", cache=_CACHE)
def _transport_header(b, p, l4, end, ip_len, hdr, proto, grh, lid_routed, later_fragment, kinds):
    """The transport header: (source and destination port, its length, TCP sequence, acknowledgment, flags and
    window, -1 where absent; where an RDMA packet's Base Transport Header starts, -1 for none; its opcode; payload
    bytes; the protocol, PROTO_ROCE for RDMA)."""
    sport = np.int64(0)
    dport = np.int64(0)
    l4hdr = np.int64(0)
    seq = np.int64(-1)
    ack = np.int64(-1)
    flags = np.int64(0)
    win = np.int64(-1)
    bth = np.int64(-1)
    op = np.int64(0)
    if later_fragment:
        kinds[KIND_FRAGMENT] += 1
    elif proto == 17 and l4 + 20 <= end and _be16(b, l4 + 2) == ROCE_UDP_PORT:
        bth = l4 + 8
    elif proto == PROTO_ROCE and (grh or lid_routed) and l4 + 12 <= end:
        bth = l4
    if bth >= 0:
        kinds[KIND_ROCE] += 1
        sport = _be16(b, l4) if proto == 17 else np.int64(0)
        dport = np.int64(ROCE_UDP_PORT) if proto == 17 else np.int64(0)
        op = _byte(b, bth)
        ext = _bth_extension_bytes(op)
        payload = p + ip_len - bth - 12 - (ext if ext > 0 else 0) - ((_byte(b, bth + 1) >> 4) & 3) - 4
        l4hdr = bth + 12 - l4  # the UDP header and the BTH: wire bytes below need no TSO split
        return sport, dport, l4hdr, seq, ack, flags, win, bth, op, max(payload, 0), np.int64(PROTO_ROCE)
    if later_fragment:
        pass
    elif proto == 6 or proto == 17:
        kinds[KIND_TCP if proto == 6 else KIND_UDP] += 1
        if l4 + 4 <= end:  # both start with the two ports
            sport = _be16(b, l4)
            dport = _be16(b, l4 + 2)
        l4hdr = 20 if proto == 6 else 8
        if proto == 6 and l4 + 13 <= end:
            seq = _be32(b, l4 + 4)
            l4hdr = (_byte(b, l4 + 12) >> 4) * 4
            if l4 + 14 <= end:
                flags = _byte(b, l4 + 13)
                if flags & 0x10:  # the ACK flag: its acknowledgment number counts
                    ack = _be32(b, l4 + 8)
            if l4 + 16 <= end:
                win = _be16(b, l4 + 14)
    elif proto == 1 or proto == 58:
        kinds[KIND_ICMP] += 1
    else:
        kinds[KIND_OTHER_IP] += 1
    payload = ip_len - hdr - l4hdr
    return sport, dport, l4hdr, seq, ack, flags, win, bth, op, max(payload, 0), proto


@njit(inline="always", cache=_CACHE)
def _fragment_flow(
    keys, slots, agg, st, frag_keys, frag_flow, frag_pend, a0, a1, a2, a3, ports, proto, frag_id, later, sizes, ts
):
    """The packet's flow row, fragments joined: a later fragment joins the flow of its datagram's first fragment.
    One that comes before its first is held in a ports-0 flow (frag_pend: ip, wire and payload bytes, the flow,
    the first ns) and moved over when the first arrives. SIZES: the packet's (ip, wire, payload) bytes."""
    fslot = np.int64(-1)
    same = False
    if frag_id >= 0:
        fh = _mix(_mix(_mix(np.uint64(frag_id), a1), a3), np.uint64(proto))
        fslot = np.int64(fh & np.uint64(FRAG_SLOTS - 1))
        same = (
            frag_keys[fslot, 0] == a1
            and frag_keys[fslot, 1] == a3
            and frag_keys[fslot, 2] == np.uint64((frag_id << 8) | proto)
        )
    if later and same and frag_flow[fslot] >= 0:
        return frag_flow[fslot]
    if later:
        f = _flow_index(keys, slots, agg, st, a0, a1, a2, a3, 0, proto, ts)
        if not (same and frag_pend[fslot, 3] == f):
            agg[np.uint64(f), AGG_PACKETS] += 1  # counts the datagram once, however many fragments precede the first
            frag_keys[fslot, 0] = a1
            frag_keys[fslot, 1] = a3
            frag_keys[fslot, 2] = np.uint64((frag_id << 8) | proto)
            frag_flow[fslot] = -1
            frag_pend[fslot, :] = 0
            frag_pend[fslot, 3] = f
            frag_pend[fslot, 4] = ts
        frag_pend[fslot, 0] += sizes[0]
        frag_pend[fslot, 1] += sizes[1]
        frag_pend[fslot, 2] += sizes[2]
        return f
    f = _flow_index(keys, slots, agg, st, a0, a1, a2, a3, ports, proto, ts)
    agg[np.uint64(f), AGG_PACKETS] += 1
    if frag_id >= 0:
        if same and frag_flow[fslot] < 0 and frag_pend[fslot, 3] >= 0 and frag_pend[fslot, 0] > 0:
            held = np.uint64(frag_pend[fslot, 3])
            agg[held, AGG_PACKETS] -= 1
            agg[held, AGG_IP_BYTES] -= frag_pend[fslot, 0]
            agg[held, AGG_WIRE_BYTES] -= frag_pend[fslot, 1]
            agg[held, AGG_PAYLOAD_BYTES] -= frag_pend[fslot, 2]
            agg[np.uint64(f), AGG_IP_BYTES] += frag_pend[fslot, 0]
            agg[np.uint64(f), AGG_WIRE_BYTES] += frag_pend[fslot, 1]
            agg[np.uint64(f), AGG_PAYLOAD_BYTES] += frag_pend[fslot, 2]
            if frag_pend[fslot, 4] < agg[np.uint64(f), AGG_FIRST_NS]:
                agg[np.uint64(f), AGG_FIRST_NS] = frag_pend[fslot, 4]
        frag_keys[fslot, 0] = a1
        frag_keys[fslot, 1] = a3
        frag_keys[fslot, 2] = np.uint64((frag_id << 8) | proto)
        frag_flow[fslot] = f
        frag_pend[fslot, :] = 0
        frag_pend[fslot, 3] = -1
    return f


@njit(inline="always", cache=_CACHE)
def _sequence(agg, row, samples, st, f, seq, payload, ts):
    """Retransmitted payload from TCP sequence numbers (modulo 2^32): bytes below the highest seen, unless they
    fill the latest hole soon after it opened (reordered by the capture, not resent). True where a data sample
    was kept for this segment (its bytes in flight are kept too)."""
    marked = False
    seq_end = (seq + payload) & 0xFFFFFFFF
    top = agg[row, AGG_SEQ_END]
    if top < 0:
        agg[row, AGG_SEQ_END] = seq_end
        agg[row, AGG_SEQ_FIRST] = seq
        agg[row, AGG_SEQ_FIRST_NS] = ts
        return _sample_data(agg, row, samples, st, f, seq, seq_end, ts)
    behind = (top - seq) & 0xFFFFFFFF  # bytes of this segment at or below the highest seen
    if behind < 0x80000000 and behind > 0:
        old = behind if behind < payload else payload
        if _fills_gap(agg, row, seq, old, ts):
            agg[row, AGG_REORDER_BYTES] += old
        else:
            agg[row, AGG_RETRANS_BYTES] += old
            _sample_resent(agg, row, samples, st, f, old, ts)
    ahead = (seq_end - top) & 0xFFFFFFFF
    if ahead != 0 and ahead < 0x80000000:
        start = top if behind < 0x80000000 and behind > 0 else seq
        marked = _sample_data(agg, row, samples, st, f, start, seq_end, ts)
        skip = (seq - top) & 0xFFFFFFFF
        if skip != 0 and skip < 0x80000000:  # [top, seq) not seen (yet): a hole opens
            agg[row, AGG_GAP2_LO] = agg[row, AGG_GAP_LO]
            agg[row, AGG_GAP2_HI] = agg[row, AGG_GAP_HI]
            agg[row, AGG_GAP2_NS] = agg[row, AGG_GAP_NS]
            agg[row, AGG_GAP_LO] = top
            agg[row, AGG_GAP_HI] = seq
            agg[row, AGG_GAP_NS] = ts
        agg[row, AGG_SEQ_END] = seq_end
    return marked


@njit(inline="always", cache=_CACHE)
def _cell(agg, row, cell_flow, cell_bin, cell_bytes, st, f, counted, bn):
    """The sparse series: one cell per run of a flow's packets in one bin, written when the flow moves on."""
    cur = agg[row, AGG_CUR_BIN]
    if cur != bn:
        if cur >= 0:
            c = st[ST_NCELLS]
            cell_flow[c] = f
            cell_bin[c] = cur
            cell_bytes[c] = agg[row, AGG_CUR_BYTES]
            st[ST_NCELLS] = c + 1
        agg[row, AGG_CUR_BIN] = bn
        agg[row, AGG_CUR_BYTES] = counted
    else:
        agg[row, AGG_CUR_BYTES] += counted


@njit(inline="always", cache=_CACHE)
def _packet(
    b,
    o,
    caplen,
    wirelen,
    ts,
    linktype,
    mtu,
    bin_ns,
    byte_mode,
    keys,
    slots,
    agg,
    cell_flow,
    cell_bin,
    cell_bytes,
    samples,
    kinds,
    frag_keys,
    frag_flow,
    frag_pend,
    st,
    rows,
):
    """Decode one record and fold it into the flow table and the series cells (and, when the rows table has
    room for any, write its header fields as a packet row): the layers' headers, the flow, then what the flow
    keeps of it (bytes, pace, sequence, RDMA or TCP state, the series cell)."""
    end = o + caplen
    p, ethertype = _link_layer(b, o, end, linktype, kinds)
    if p < 0:
        return
    # RoCEv1 (Ethertype 0x8915) and an InfiniBand packet with a GRH carry the BTH after a GRH, which has the
    # IPv6 header's layout (next header 0x1B); an InfiniBand packet without one (LNH 2) goes straight to it.
    grh = ethertype == 0x8915 or linktype == LINKTYPE_INFINIBAND
    lid_routed = linktype == LINKTYPE_INFINIBAND and (_byte(b, o + 1) & 3) != 3
    l4, a0, a1, a2, a3, ip_len, proto, ecn, hdr, frag_id, later = _network_layer(
        b, o, p, end, wirelen, lid_routed, kinds
    )
    if l4 < 0:
        return
    sport, dport, l4hdr, seq, ack, flags, win, bth, op, payload, proto = _transport_header(
        b, p, l4, end, ip_len, hdr, proto, grh, lid_routed, later, kinds
    )
    if rows.shape[0] > 0:
        _row(rows, st, ts, a0, a1, a2, a3, sport, dport, proto, wirelen, ip_len, payload, flags, seq, ack, win)
        if later:
            rows[np.uint64(st[ST_NROWS] - 1), ROW_FRAGMENT] = 1
        if bth >= 0:
            last = np.uint64(st[ST_NROWS] - 1)
            rows[last, ROW_QP] = _be32(b, bth + 4) & 0xFFFFFF
            rows[last, ROW_OPCODE] = op
            rows[last, ROW_PSN] = _be32(b, bth + 8) & 0xFFFFFF

    if lid_routed or (linktype == LINKTYPE_INFINIBAND and bth >= 0):
        wire = ip_len + (p - o) + 2  # the LRH and the VCRC after the ICRC
    elif bth >= 0:
        wire = _wire_bytes(ip_len, ip_len, mtu)  # one frame: RDMA segments in the NIC, never by TSO
    else:
        wire = _wire_bytes(ip_len, hdr + l4hdr, mtu)
    ports = (sport << 16) | dport if bth < 0 else _be32(b, bth + 4) & 0xFFFFFF  # a queue pair: its QP
    f = _fragment_flow(
        keys,
        slots,
        agg,
        st,
        frag_keys,
        frag_flow,
        frag_pend,
        a0,
        a1,
        a2,
        a3,
        ports,
        proto,
        frag_id,
        later,
        (ip_len, wire, payload),
        ts,
    )

    row = np.uint64(f)
    prev_ns = agg[row, AGG_LAST_NS]
    agg[row, AGG_IP_BYTES] += ip_len
    agg[row, AGG_WIRE_BYTES] += wire
    agg[row, AGG_PAYLOAD_BYTES] += payload
    if ts < agg[row, AGG_FIRST_NS]:
        agg[row, AGG_FIRST_NS] = ts
    if ts > agg[row, AGG_LAST_NS]:
        agg[row, AGG_LAST_NS] = ts
    _pace(agg, row, wire, ts)
    marked = _sequence(agg, row, samples, st, f, seq, payload, ts) if seq >= 0 and payload > 0 else False
    if bth >= 0:
        agg[row, AGG_ROCE_VERSION] = 3 if linktype == LINKTYPE_INFINIBAND else (2 if dport == ROCE_UDP_PORT else 1)
        if dport == ROCE_UDP_PORT:
            agg[row, AGG_ROCE_SPORT] = sport
        _rdma(b, bth, end, op, payload, ecn, prev_ns, agg, row, samples, st, f, ts)
    if win >= 0:
        _transport(
            b,
            l4,
            l4hdr,
            end,
            flags,
            win,
            ack,
            payload,
            marked,
            agg,
            row,
            f,
            keys,
            slots,
            samples,
            st,
            a0,
            a1,
            a2,
            a3,
            (sport << 16) | dport,
            ts,
        )
    if ack >= 0:
        _sample_ack(agg, row, samples, st, f, ack, ts)
    counted = ip_len if byte_mode == BYTES_IP else (payload if byte_mode == BYTES_PAYLOAD else wire)
    _cell(agg, row, cell_flow, cell_bin, cell_bytes, st, f, counted, ts // bin_ns)


@njit(inline="always", cache=_CACHE)
def _note_time(st, jumps, ts, pos):
    """Count a record at buffer offset pos dated ts: the file's times, and a jumps row when it lies more than
    JUMP_NS from the record before it in the file."""
    at = st[ST_BASE] + pos
    if st[ST_RECORDS] > 0 and abs(ts - st[ST_LAST_NS]) > JUMP_NS:
        n = st[ST_NJUMPS]
        if n < jumps.shape[0]:
            jumps[n, JUMP_RECORD] = st[ST_RECORDS]
            jumps[n, JUMP_BEFORE_AT] = st[ST_LAST_AT]
            jumps[n, JUMP_BEFORE_NS] = st[ST_LAST_NS]
            jumps[n, JUMP_AT] = at
            jumps[n, JUMP_AT_NS] = ts
            st[ST_NJUMPS] = n + 1
        st[ST_JUMPS_SEEN] += 1
    st[ST_LAST_NS] = ts
    st[ST_LAST_AT] = at
    if st[ST_RECORDS] == 0 or ts < st[ST_FIRST_NS]:
        st[ST_FIRST_NS] = ts
    if ts > st[ST_MAX_NS]:
        st[ST_MAX_NS] = ts
    st[ST_RECORDS] += 1


@njit(inline="always", cache=_CACHE)
def _must_return(st, keys, cell_flow, samples, rows, done, budget):
    """Status code when the walker must hand back before the next packet (a table may not take one
    more, or the budget is spent), else -1."""
    if st[ST_NFLOWS] + 1 >= keys.shape[0]:
        return STATUS_FLOWS_FULL
    if st[ST_NCELLS] + 1 >= cell_flow.shape[0]:
        return STATUS_CELLS_FULL
    if st[ST_NSAMPLES] + 6 >= samples.shape[0]:  # a packet adds 6 rows at most: data, in flight, re-sent, 2 TS, ACK
        return STATUS_SAMPLES_FULL
    if rows.shape[0] > 0 and st[ST_NROWS] >= rows.shape[0]:
        return STATUS_ROWS_FULL
    if done == budget:
        return STATUS_BUDGET
    return -1


@njit(inline="always", cache=_CACHE)
def _past_end(pos, end, header):
    """Status code when no whole record header starts at pos (the data ended there or inside it), else -1."""
    if pos == end:
        return STATUS_END
    if pos + header > end:
        return STATUS_TRUNCATED
    return -1


@njit(**_NO_NRT)
def scan_pcap(
    b,
    end,
    swap,
    nano,
    linktype,
    budget,
    mtu,
    bin_ns,
    byte_mode,
    keys,
    slots,
    agg,
    cell_flow,
    cell_bin,
    cell_bytes,
    samples,
    kinds,
    frag_keys,
    frag_flow,
    frag_pend,
    st,
    jumps,
    rows,
):
    """Walk classic pcap records from st[ST_POS]; stop at end of data, a full table or the budget."""
    pos = st[ST_POS]
    frac_ns = 1 if nano else 1000
    done = 0
    while True:
        stop = _past_end(pos, end, 16)
        if stop >= 0:
            st[ST_STATUS] = stop
            break
        caplen = _rd32(b, pos + 8, swap)
        if caplen > MAX_RECORD_BYTES:
            st[ST_STATUS] = STATUS_CORRUPT
            break
        if pos + 16 + caplen > end:
            st[ST_STATUS] = STATUS_TRUNCATED
            break
        stop = _must_return(st, keys, cell_flow, samples, rows, done, budget)
        if stop >= 0:
            st[ST_STATUS] = stop
            break
        ts = _rd32(b, pos, swap) * 1000000000 + _rd32(b, pos + 4, swap) * frac_ns
        wirelen = _rd32(b, pos + 12, swap)
        if wirelen < caplen:
            wirelen = caplen
        _note_time(st, jumps, ts, pos)
        st[ST_PACKET_BYTES] += caplen
        _packet(
            b,
            pos + 16,
            caplen,
            wirelen,
            ts,
            linktype,
            mtu,
            bin_ns,
            byte_mode,
            keys,
            slots,
            agg,
            cell_flow,
            cell_bin,
            cell_bytes,
            samples,
            kinds,
            frag_keys,
            frag_flow,
            frag_pend,
            st,
            rows,
        )
        pos += 16 + caplen
        done += 1
    st[ST_POS] = pos


@njit(cache=_CACHE)
def _ts_to_ns(raw, resol, offset_s):
    """Convert a pcapng timestamp in an interface's units (if_tsresol) to integer ns.

    if_tsresol is one byte: units of 2^-shift s (top bit set, shift up to 127) or 10^-e s (e up to 127). Real
    captures use a few of them; a damaged one must still give a number: a fraction that would overflow 64 bits
    is taken in floating point, and units of 10^-28 s or finer (whose ten-power does not fit 64 bits) count
    every raw value as 0 or 1 ns, i.e. 0."""
    if resol & 0x80:
        shift = resol & 0x7F
        if shift >= 64:
            return np.int64(np.float64(raw) * 1e9 / 2.0**shift) + offset_s * 1000000000
        s = np.uint64(shift)
        whole = raw >> s
        part = raw & ((np.uint64(1) << s) - np.uint64(1))
        if shift <= 34:  # part x 10^9 fits 64 bits
            frac = np.int64((part * np.uint64(1000000000)) >> s)
        else:
            frac = np.int64(np.float64(part) * 1e9 / 2.0**shift)
        ns = np.int64(whole) * 1000000000 + frac
    else:
        e = resol
        if e <= 9:
            ns = np.int64(raw) * np.int64(10 ** (9 - e))
        elif e - 9 < 19:
            ns = np.int64(raw // np.uint64(10 ** (e - 9)))
        else:
            ns = np.int64(0)
    return ns + offset_s * 1000000000


@njit(cache=_CACHE)
def _read_idb(b, pos, blen, swap, st, if_link, if_resol, if_offset):
    """Register an Interface Description Block: its link type, if_tsresol and if_tsoffset."""
    idx = st[ST_NIFACE]
    if idx >= MAX_IFACES:
        return False
    if_link[idx] = _rd16(b, pos + 8, swap)
    if_resol[idx] = 6
    if_offset[idx] = 0
    o = pos + 16
    stop = pos + blen - 4
    while o + 4 <= stop:
        code = _rd16(b, o, swap)
        ln = _rd16(b, o + 2, swap)
        if code == 0:
            break
        if code == 9 and ln >= 1:
            if_resol[idx] = _byte(b, o + 4)
        elif code == 14 and ln >= 8:
            w0 = _rd32(b, o + 4, swap)
            w1 = _rd32(b, o + 8, swap)
            if_offset[idx] = (w0 << 32) | w1 if swap else (w1 << 32) | w0
        o += 4 + ((ln + 3) // 4) * 4
    st[ST_NIFACE] = idx + 1
    return True


@njit(**_NO_NRT)
def scan_pcapng(
    b,
    end,
    budget,
    mtu,
    bin_ns,
    byte_mode,
    if_link,
    if_resol,
    if_offset,
    keys,
    slots,
    agg,
    cell_flow,
    cell_bin,
    cell_bytes,
    samples,
    kinds,
    frag_keys,
    frag_flow,
    frag_pend,
    st,
    jumps,
    rows,
):
    """Walk pcapng blocks from st[ST_POS]; packets of every interface, unknown blocks skipped."""
    pos = st[ST_POS]
    done = 0
    while True:
        stop = _past_end(pos, end, 12)
        if stop >= 0:
            st[ST_STATUS] = stop
            break
        btype = _rd32(b, pos, 0)
        if btype == SHB_TYPE:  # Section Header Block: byte order may change here
            bom = _rd32(b, pos + 8, 0)
            if bom == BOM_LITTLE:
                st[ST_SWAP] = 0
            elif bom == BOM_BIG:
                st[ST_SWAP] = 1
            else:
                st[ST_STATUS] = STATUS_CORRUPT
                break
            st[ST_IFACE_BASE] = st[ST_NIFACE]
        swap = st[ST_SWAP]
        if btype != SHB_TYPE:
            btype = _rd32(b, pos, swap)
        blen = _rd32(b, pos + 4, swap)
        if blen < 12 or (blen & 3) != 0 or blen > MAX_BLOCK_BYTES:
            st[ST_STATUS] = STATUS_CORRUPT
            break
        if pos + blen > end:
            st[ST_STATUS] = STATUS_TRUNCATED
            break
        if btype == 6 or btype == 3 or btype == 2:
            stop = _must_return(st, keys, cell_flow, samples, rows, done, budget)
            if stop >= 0:
                st[ST_STATUS] = stop
                break
            if btype == 3:  # Simple Packet Block: interface 0, no timestamp
                if blen < 16:  # no room for its original-length field
                    st[ST_STATUS] = STATUS_CORRUPT
                    break
                iface = st[ST_IFACE_BASE]
                wirelen = _rd32(b, pos + 8, swap)
                caplen = min(wirelen, blen - 16)
                data = pos + 12
                ts = st[ST_LAST_NS]
            else:
                if btype == 6:
                    iface = st[ST_IFACE_BASE] + _rd32(b, pos + 8, swap)
                else:
                    iface = st[ST_IFACE_BASE] + _rd16(b, pos + 8, swap)
                raw = (np.uint64(_rd32(b, pos + 12, swap)) << np.uint64(32)) | np.uint64(_rd32(b, pos + 16, swap))
                caplen = _rd32(b, pos + 20, swap)
                wirelen = _rd32(b, pos + 24, swap)
                data = pos + 28
                if iface >= st[ST_NIFACE] or caplen > blen - 28:
                    st[ST_STATUS] = STATUS_CORRUPT
                    break
                ts = _ts_to_ns(raw, if_resol[iface], if_offset[iface])
            if wirelen < caplen:
                wirelen = caplen
            _note_time(st, jumps, ts, pos)
            st[ST_PACKET_BYTES] += caplen
            _packet(
                b,
                data,
                caplen,
                wirelen,
                ts,
                if_link[iface],
                mtu,
                bin_ns,
                byte_mode,
                keys,
                slots,
                agg,
                cell_flow,
                cell_bin,
                cell_bytes,
                samples,
                kinds,
                frag_keys,
                frag_flow,
                frag_pend,
                st,
                rows,
            )
            done += 1
        elif btype == 1:
            if not _read_idb(b, pos, blen, swap, st, if_link, if_resol, if_offset):
                st[ST_STATUS] = STATUS_TOO_MANY_IFACES
                break
        pos += blen
    st[ST_POS] = pos


@njit(cache=_CACHE)
def rehash(keys, n, slots):
    """Rebuild the open-addressing slots after the flow table grew."""
    mask = slots.shape[0] - 1
    for f in range(n):
        proto = keys[np.uint64(f), 4] & np.uint64(0xFF)
        ports = keys[np.uint64(f), 4] >> np.uint64(8)
        h = _flow_hash(
            keys[np.uint64(f), 0], keys[np.uint64(f), 1], keys[np.uint64(f), 2], keys[np.uint64(f), 3], ports, proto
        )
        s = np.int64(h & np.uint64(mask))
        while slots[np.uint64(s)] >= 0:
            s = (s + 1) & mask
        slots[np.uint64(s)] = f

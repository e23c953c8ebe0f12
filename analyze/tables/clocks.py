"""Each host's clock against one reference host, from the packets both captured.

Why: every host stamps its packets with its own clock, and NTP leaves servers milliseconds apart and tens of
ppm fast or slow, so one host's series, iterations and report axis cannot be laid beside another's until
their clocks are known. No other input says it; the packets do. A TCP byte sent by host A and received by
host B is captured twice: t_B - t_A is the one-way delay plus B's clock offset from A. The same holds the
other way, so over a window the smallest delay each way bounds the offset as NTP does:

    offset(B - A) = (min(t_B - t_A) - min(t_A - t_B)) / 2,   uncertain by at most half the smallest round trip

and a line through the windows' offsets gives the drift. The read path marks the bytes and ACKs to match
(analyze.read.layouts.SAMPLE_*: positions in the sequence space, whatever TSO or GRO did to the segments);
this module pairs them across hosts (numpy), estimates every pair that exchanged data both ways, and solves
for each host against the reference by least squares over those pairs (a ring gives each host two).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from analyze.model.findings import Clock, HostClock
from analyze.read import layouts as L
from analyze.read.fold import HostFlows, unique_rows

MIN_SAMPLES = 8  # a pair with fewer matched samples in either direction is not estimated
MAX_WINDOWS = 40
SAMPLES_PER_WINDOW = 16  # each direction, on average: enough for a minimum near the true delay
QUIET_TRIP_FACTOR, QUIET_TRIP_NS = 3.0, 20_000  # a window whose round trip is below this saw empty queues
MIN_DRIFT_SPAN_NS = 1_000_000_000  # quiet windows over a shorter span do not tell a drift
MAX_DRIFT_PPM = 100.0  # what an unknown drift may be (NTP-disciplined clocks stay well within it)
DENSE_HOSTS = 1024  # up to this many hosts the pairs are solved by a dense least squares
SPARSE_STEPS, SPARSE_TOLERANCE = 4, 1e-13  # past it: at most 4 x hosts steps, to this residual over the first


@dataclass
class PairClock:
    """Host b's clock against host a's, from the samples they both captured."""

    a: int
    b: int
    offset_ns: float  # b ahead of a at t0
    drift_ppm: float | None  # b's clock rate against a's, parts per million (None: too short to tell)
    uncertainty_ns: float
    samples: int


def _owner(keys: np.ndarray, cols: tuple[int, int], locals_: Sequence[Sequence[tuple[int, int]]]) -> np.ndarray:
    """For each flow, the index of the host whose address is the flow's address in COLS, else -1."""
    out = np.full(len(keys), -1, dtype=np.int64)
    hi, lo = keys[:, cols[0]], keys[:, cols[1]]
    for host, addresses in enumerate(locals_):
        for a_hi, a_lo in addresses:
            out[(hi == np.uint64(a_hi)) & (lo == np.uint64(a_lo))] = host
    return out


def earliest(key: np.ndarray, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct key once, with its earliest time (a retransmitted byte or a duplicate ACK repeats one)."""
    order = np.lexsort((ns, key))
    key, ns = key[order], ns[order]
    keep = np.ones(len(key), dtype=bool)
    keep[1:] = key[1:] != key[:-1]
    return key[keep], ns[keep]


def matched_delays(
    host_flows: Sequence[HostFlows], locals_: Sequence[Sequence[tuple[int, int]]]
) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """{(sender, receiver): (send times on the sender's clock, receive - send)} for every sample both captured."""
    keys = np.concatenate([h.keys for h in host_flows]) if host_flows else np.zeros((0, 5), np.uint64)
    ukeys, inverse = unique_rows(keys)
    src, dst = _owner(ukeys, (0, 1), locals_), _owner(ukeys, (2, 3), locals_)
    starts = np.cumsum([0] + [len(h.keys) for h in host_flows[:-1]])
    seen: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}  # (host, sender, receiver) -> keys, ns
    for i, h in enumerate(host_flows):
        if not len(h.samples):
            continue
        flow = inverse[starts[i] + (h.samples[:, L.SAMPLE_KEY] >> L.SAMPLE_FLOW_SHIFT)]
        s, d = src[flow], dst[flow]
        kind = h.samples[:, L.SAMPLE_KEY] & L.SAMPLE_KIND
        # byte and ACK positions; an RDMA request's PSN and an ACK's (both kept by the PSN's hash alike everywhere)
        rdma_ack = (kind == L.SAMPLE_RDMA_EVENT) & (((h.samples[:, L.SAMPLE_KEY] >> 24) & 0xFF) == L.ROCE_EV_ACK)
        matchable = (kind <= L.SAMPLE_ACK) | (kind == L.SAMPLE_RDMA_REQUEST) | rdma_ack
        inter = matchable & (s >= 0) & (d >= 0) & (s != d) & ((s == i) | (d == i))
        position = h.samples[inter, L.SAMPLE_KEY] & ((1 << L.SAMPLE_FLOW_SHIFT) - 1)
        key = (flow[inter].astype(np.int64) << L.SAMPLE_FLOW_SHIFT) | position  # the flow numbered across hosts
        ns = h.samples[inter, L.SAMPLE_NS]
        # the samples grouped by (sender, receiver) with one sort: a set of pairs built sample by sample took
        # 0.7 s at 512 hosts
        pair = s[inter].astype(np.int64) * len(locals_) + d[inter]
        order = np.argsort(pair, kind="stable")
        pairs, first = np.unique(pair[order], return_index=True)
        for p, rows in zip(pairs.tolist(), np.split(order, first[1:])):
            sender, receiver = divmod(p, len(locals_))
            seen[(i, sender, receiver)] = earliest(key[rows], ns[rows])
    out = {}
    for (host, sender, receiver), (key_s, ns_s) in seen.items():
        if host != sender or (receiver, sender, receiver) not in seen:
            continue
        key_r, ns_r = seen[(receiver, sender, receiver)]
        _, i_s, i_r = np.intersect1d(key_s, key_r, assume_unique=True, return_indices=True)
        if len(i_s):
            out[(sender, receiver)] = (ns_s[i_s], ns_r[i_r] - ns_s[i_s])
    return out


def _theil_sen(x: np.ndarray, y: np.ndarray) -> float:
    """The median of the slopes between every two points: a line that a few bad windows cannot tilt."""
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    ok = dx > 0
    return float(np.median((y[j] - y[i])[ok] / dx[ok])) if ok.any() else 0.0


def pair_clock(
    a: int, b: int, ab: tuple[np.ndarray, np.ndarray], ba: tuple[np.ndarray, np.ndarray], t0: int
) -> PairClock | None:
    """b against a from delays a->b (AB) and b->a (BA): windowed minima, the windows whose round trip is
    near the smallest (queues empty both ways), and a robust line through their offsets. The drift is
    estimated only over at least MIN_DRIFT_SPAN_NS of such windows; else it is None and the offset at T0
    carries the uncertainty of a drift up to MAX_DRIFT_PPM over the distance from the data."""
    (t_ab, d_ab), (t_ba, d_ba) = ab, ba
    if len(d_ab) < MIN_SAMPLES or len(d_ba) < MIN_SAMPLES:
        return None
    lo, hi = max(t_ab.min(), t_ba.min()), min(t_ab.max(), t_ba.max())
    if hi <= lo:
        return None
    windows = int(np.clip(min(len(d_ab), len(d_ba)) // SAMPLES_PER_WINDOW, 1, MAX_WINDOWS))
    edges = np.linspace(lo, hi, windows + 1)
    w_ab = np.clip(np.searchsorted(edges, t_ab, side="right") - 1, 0, windows - 1)
    w_ba = np.clip(np.searchsorted(edges, t_ba, side="right") - 1, 0, windows - 1)
    m_ab, m_ba = np.full(windows, np.inf), np.full(windows, np.inf)
    np.minimum.at(m_ab, w_ab[(t_ab >= lo) & (t_ab <= hi)], d_ab[(t_ab >= lo) & (t_ab <= hi)])
    np.minimum.at(m_ba, w_ba[(t_ba >= lo) & (t_ba <= hi)], d_ba[(t_ba >= lo) & (t_ba <= hi)])
    both = np.isfinite(m_ab) & np.isfinite(m_ba)
    if not both.any():
        return None
    mids = ((edges[:-1] + edges[1:]) / 2 - t0)[both]
    m_ab, m_ba = m_ab[both], m_ba[both]
    offsets, trips = (m_ab - m_ba) / 2, m_ab + m_ba
    floor = max(float(trips.min()), 0.0)
    good = trips <= QUIET_TRIP_FACTOR * floor + QUIET_TRIP_NS
    x, y = mids[good], offsets[good]
    drift: float | None = None
    if len(x) >= 3 and np.ptp(x) >= MIN_DRIFT_SPAN_NS:
        drift = _theil_sen(x, y)
    slope = drift or 0.0
    intercept = float(np.median(y - slope * x))
    residual = float(np.median(np.abs(y - (intercept + slope * x)))) * 1.4826  # a robust standard deviation
    uncertainty = residual + floor / 2  # NTP's bound: the delays' asymmetry cannot exceed the round trip
    if drift is None:
        uncertainty += MAX_DRIFT_PPM * 1e-6 * float(np.max(np.abs(x)))
    return PairClock(
        a, b, intercept, drift * 1e6 if drift is not None else None, uncertainty, int(len(d_ab) + len(d_ba))
    )


def _solve(pairs: list[PairClock], n: int, ref: int, value: str) -> np.ndarray:
    """Per-host values against the reference, least squares over the pairs (weights 1/uncertainty). Past
    DENSE_HOSTS the normal equations are solved sparsely (solve_sparse): the dense least squares is cubic in the
    hosts (25 s of a 90 s analysis at 4,096 hosts)."""
    known = [p for p in pairs if getattr(p, value) is not None]
    a = np.array([p.a for p in known], dtype=np.int64)
    b = np.array([p.b for p in known], dtype=np.int64)
    w = np.array([1.0 / max(p.uncertainty_ns, 1.0) for p in known])
    v = np.array([float(getattr(p, value)) for p in known])
    if n > DENSE_HOSTS:
        return solve_sparse(a, b, w, v, n, ref)
    unknown = np.array([h for h in range(n) if h != ref], dtype=np.int64)
    col = np.full(n, -1, dtype=np.int64)
    col[unknown] = np.arange(len(unknown))
    rows = np.zeros((len(known), len(unknown)))  # one row per pair: w (x[b] - x[a]), the reference's x fixed at 0
    at = np.arange(len(known))
    rows[at[b != ref], col[b[b != ref]]] += w[b != ref]
    rows[at[a != ref], col[a[a != ref]]] -= w[a != ref]
    out = np.zeros(n)
    if len(known):
        out[unknown] = np.linalg.lstsq(rows, w * v, rcond=None)[0]
    return out


def solve_sparse(a: np.ndarray, b: np.ndarray, w: np.ndarray, value: np.ndarray, n: int, ref: int) -> np.ndarray:
    """x (x[ref] = 0) minimizing the sum of (w (x[b] - x[a] - value))^2 over the pairs: conjugate gradients on the
    normal equations (the pairs' weighted Laplacian, never formed), a diagonal preconditioner, from x = 0 (where a
    host is tied to no pair it stays 0, as the dense least squares leaves it). Each step costs a few passes over the
    pairs; a ring of hosts needs about as many steps as it has hosts."""
    w2 = w * w

    def apply(x: np.ndarray) -> np.ndarray:
        d = w2 * (x[b] - x[a])
        y = np.bincount(b, weights=d, minlength=n) - np.bincount(a, weights=d, minlength=n)
        y[ref] = 0.0
        return y

    diag = np.bincount(a, weights=w2, minlength=n) + np.bincount(b, weights=w2, minlength=n)
    diag[ref] = 0.0
    inv = np.divide(1.0, diag, out=np.zeros(n), where=diag > 0)
    r: np.ndarray = np.bincount(b, weights=w2 * value, minlength=n).astype(np.float64)
    r -= np.bincount(a, weights=w2 * value, minlength=n)
    r[ref] = 0.0
    x, z = np.zeros(n), inv * r
    p, rz, stop = z.copy(), float(r @ z), SPARSE_TOLERANCE**2 * float(r @ r)
    for _ in range(SPARSE_STEPS * n):
        if float(r @ r) <= stop or rz <= 0.0:
            break
        q = apply(p)
        alpha = rz / float(p @ q)
        x += alpha * p
        r -= alpha * q
        z = inv * r
        rz, before = float(r @ z), rz
        p = z + (rz / before) * p
    return x


def _connected(pairs: list[PairClock], ref: int) -> set[int]:
    """The hosts the pairs link to the reference (a walk over each host's neighbours: scanning every pair from
    every host reached took 0.17 s at 512 hosts)."""
    near: dict[int, list[int]] = {}
    for p in pairs:
        near.setdefault(p.a, []).append(p.b)
        near.setdefault(p.b, []).append(p.a)
    reach, frontier = {ref}, [ref]
    while frontier:
        for y in near.get(frontier.pop(), []):
            if y not in reach:
                reach.add(y)
                frontier.append(y)
    return reach


def estimate_clocks(
    names: Sequence[str],
    host_flows: Sequence[HostFlows],
    locals_: Sequence[Sequence[tuple[int, int]]],
    reference: str,
    t0_ns: int,
) -> Clock | None:
    """Every host's offset and drift against REFERENCE at T0_NS; None for a single host."""
    n = len(names)
    if n < 2 or reference not in names:
        return None
    ref = list(names).index(reference)
    delays = matched_delays(host_flows, locals_)
    pairs = []
    for a, b in sorted({tuple(sorted(k)) for k in delays}):
        if (a, b) in delays and (b, a) in delays:
            p = pair_clock(a, b, delays[(a, b)], delays[(b, a)], t0_ns)
            if p is not None:
                pairs.append(p)
    reach = _connected(pairs, ref)
    usable = [p for p in pairs if p.a in reach and p.b in reach]
    offsets, drifts = _solve(usable, n, ref, "offset_ns"), _solve(usable, n, ref, "drift_ppm")
    drift_reach = _connected([p for p in usable if p.drift_ppm is not None], ref)
    out = Clock(reference=reference, t0_ns=int(t0_ns))
    of_host: dict[int, list[PairClock]] = {}
    for p in usable:
        of_host.setdefault(p.a, []).append(p)
        of_host.setdefault(p.b, []).append(p)
    for h, name in enumerate(names):
        mine = of_host.get(h, [])
        if h not in reach:
            out.hosts.append(HostClock(name, offset_ns=None, drift_ppm=None, uncertainty_ns=None, samples=0))
            out.notes.append(
                f"{name}: clock not estimated: no TCP bytes of it were captured both by it and by a host whose "
                f"clock is known (captured on one side only)"
            )
            continue
        uncertainty = 0.0 if h == ref else min(p.uncertainty_ns for p in mine)
        drift_known = h in drift_reach
        out.hosts.append(
            HostClock(
                name,
                offset_ns=int(round(offsets[h])),
                drift_ppm=round(float(drifts[h]), 3) if drift_known else None,
                uncertainty_ns=int(round(uncertainty)),
                samples=int(sum(p.samples for p in mine)),
            )
        )
    return out

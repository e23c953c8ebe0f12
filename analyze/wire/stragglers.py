"""Who holds the ring back: a rank late into the collective (compute) or a link slower than the others.

Why from the packets: a ring waits for its slowest member, so one slow server and one slow link look alike in any
single host's counters: everyone's step grows and every link idles part of it. The capture tells them apart.

* compute: in a ring all-reduce (and a sharded job's all-gathers) every rank sends its own chunk as the collective
  starts, so a rank late out of its compute sends its first bytes of the iteration after the others have begun.
  Per iteration (analyze.wire.transport gives each edge's first busy bin and its last run after a pause, on the
  reference clock), each edge's first send where a pause shows it (_entries), and each host's against the median
  of the edges that do not touch it. A host so late (LATE_SHARE of the period or LATE_BINS bins, whichever is
  longer) in MOST of the iterations its entry shows in (MIN_JUDGED at least; unsure where that is under half of
  the iterations judged) is a straggler, each iteration losing its median lag; a host whose every edge leads to a
  late host waits on it (a sender waits for its receiver) and is not named. Beside a slow link the edges behind it
  stay busy from one iteration into the next and show no entry; where enough others do (6 hosts, not 4), the lag
  is how late the host enters, an upper bound of what the ring loses (210 ms for 150 ms of extra compute), and it
  is left unsure; there the late host's own edge showed its entry in 6 of 13 iterations once (late in 5).
* compute, over RDMA: where the data moves over RDMA only, NCCL's clear-to-send grants tell a rank late on every
  chunk, as its receiver or its sender (analyze.wire.clear_to_send).
* link: edges whose rate while sending (from packet times, analyze.wire.send_rate: the same at any bin) is under
  SLOW of the usual one (the edges' USUAL_PERCENTILE: one slow host slows two edges of a ring) and within FED of
  the slowest edge's (an edge fed by a slow one waits on it); where they all touch one host, its link. The bins'
  pace (the 90th percentile of an edge's bins' rates) read the edge after a real 200 Mbit/s link at 473 Mbit/s,
  under SLOW of the usual 793, and the slow ones' sureness moved with the bin (0.92 at 10 ms, 0.67 at 20); packet
  times read 206-217 against 996, and that edge 997, at every bin. The bins' pace still prices the time lost.
  The edges a named slow link slows are then link-limited in the transport finding, and the job with them
  (_link_limited): judged against the line rate their hosts state, they read as the sender's.

The per-link what-if (at line rate, and at the others' usual pace): fixing a host's link gives its slow edges line
rate (or the usual pace), where the slowness is at its end (every edge of the host slow; one slow edge alone:
either end); the ring then runs as fast as its slowest edge after the fix, RING_SPEEDUP times as fast as now (from
packet times), and the what-if's wire model prices that from the host's own timeline (analyze.whatif.link_fixes).
The edge sums here price the rows where it cannot: what each edge needs per iteration is its span where it is slow
(it sends through all of it) and its bytes at line rate elsewhere (the others wait on it between ring steps; their
bins, shorter than a burst, read a pace under line rate); the ring needs the most of them, and a fix saves what
the ring then needs less, never more than the communication time per iteration. A slow link's lost time is what
its fix to the others' usual pace saves by those sums: measured on the wire, so it is the same whether or not the
line rate is known (on a real slow link 513 ms lost against 528 ms measured by rerunning without it). Unsure where
the iterations or the clocks are.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from analyze.model.findings import LinkFix, Straggler, Transport, TransportEdge
from analyze.model.result import Result
from capture.layout import RunManifest
from analyze.wire.clear_to_send import LATE_FACTOR, late_by_grants
from analyze.wire.transport import PAUSE_SHARE, pause_ns, slowest_edge_verdict

__all__ = ["add_stragglers", "find_stragglers", "LATE_SHARE", "SLOW"]

# a host entering this share of the period after the others is late (an idle as long starts an entry) ...
LATE_SHARE = PAUSE_SHARE
LATE_BINS = 2  # ... and at least this many bins (what the bins resolve)
MOST = 0.6  # late in this share of the iterations its entry shows in, or more: a straggler; fewer is noise
MIN_JUDGED = 3  # a host whose entry shows in fewer iterations is not judged
SLOW = 0.6  # an edge whose pace is under this share of the usual pace is slow
FED = 1.5  # a slow edge faster than this many times the slowest edge waits on it: fed by it, not slow itself
USUAL_PERCENTILE = 75  # the edges' usual pace: one slow host slows two edges of a ring, half of a ring of four
EDGE_SHARE = 0.1  # an edge carrying under this share of the heaviest edge's bytes is no ring edge
# the patterns whose ranks all send at the collective's start (a pipeline's stages take turns)
ENTER_TOGETHER = ("ring_allreduce", "sharded_data_parallel", "sharded_grad_op")
SHOWN_LATE = 3  # iterations' lags quoted in the evidence
# the limiters an edge reads when judged against a line rate its link does not reach (_link_limited)
UNDER_STATED = ("sender", "latency")
CLOCK_MARGIN = 2.0  # a lag under this many times the host's clock uncertainty is not told from clock error


def add_stragglers(result: Result) -> list[LinkFix]:
    """Set result.stragglers (None where the capture cannot tell) and return the per-link what-if's rows, which
    the what-if's record carries (analyze.whatif.link_fixes.price_link_fixes prices them and puts them there)."""
    if result.transport is None or result.iterations is None or not result.iterations.count:
        return []
    found, fixes, through = find_stragglers(result)
    result.stragglers = found
    _link_limited(result.transport, found, through)
    return fixes


def _link_limited(transport: Transport, found: list[Straggler], through: Through) -> None:
    """The edges a slow link named as a straggler slows, judged `sender` (UNDER_STATED), are link-limited, as sure
    as that finding, and so is a job judged so (a collective runs at its slowest edge's pace). Why: the transport
    judges an edge against the line rate its sender states, which a slow link does not reach: a real 200 Mbit/s
    shaper on a 1 Gbit/s port (fixtures/real-training/ddp-slow-rank-slow-link) read `sender, 1.00` on both edges
    through it, and the job `sender` (0.67), while the stragglers named the link at 0.92. Loss, a receive window,
    a lagging socket or a shared link stay as they were read: those the edge's own counters show."""
    slowed = []
    for s in found:
        if s.kind != "link":
            continue
        for e in transport.edges:
            if (e.src, e.dst) in through.get(s.host, ()) and e.limiter in UNDER_STATED:
                was = f"judged against its stated line rate it read {e.limiter} ({e.confidence:.2f})"
                e.limiter, e.confidence, e.evidence = "link", s.confidence, [*s.evidence[:1], was]
                slowed.append(e)
    if transport.limiter in UNDER_STATED:
        slowest_edge_verdict(transport, "link", slowed, "send through a link slower than its hosts state")


def find_stragglers(result: Result) -> tuple[list[Straggler], list[LinkFix], Through]:
    """(who holds the ring back, each host's link what-if ranked by its saving, the edges each slow link named
    slows); empty where the capture cannot say (no transport, no sure iterations, fewer than two hosts sending)."""
    its, transport = result.iterations, result.transport
    if its is None or transport is None or not its.count or not its.period_ns:
        return [], [], {}
    if not transport.edges and result.rdma is not None:  # data over RDMA only: the grants tell who is late
        return _late_by_grants(result, its.confidence if its.source != "markers" else 1.0), [], {}
    heaviest = max((e.payload_bytes for e in transport.edges), default=0)
    edges = [  # the collective's own edges: data in most iterations, not the set-up's broadcast or a control mesh
        e
        for e in transport.edges
        if len(e.per_iteration.index) >= MOST * its.count and e.payload_bytes >= EDGE_SHARE * heaviest
    ]
    hosts = sorted({e.src for e in edges})
    if len(hosts) < 2:
        return [], [], {}
    sure = its.confidence if its.source != "markers" else 1.0
    period = float(its.period_ns)
    slow, fixes, through = _slow_links(result, edges, period, sure)
    return _late(result, edges, hosts, period, sure, [s.host for s in slow]) + slow, fixes, through


def _late_by_grants(result: Result, sure: float) -> list[Straggler]:
    """Ranks late on every chunk of NCCL's receiver-driven exchange (analyze.wire.clear_to_send), one finding per
    host: late as a receiver, as a sender or both (a slow rank is both), losing the larger excess per iteration."""
    its, rdma = result.iterations, result.rdma
    assert its is not None and rdma is not None and its.period_ns
    by_host: dict[str, tuple[float, list[str], float]] = {}
    for host, role, excess, edge, usual in late_by_grants(rdma.edges):
        lost = excess * (edge.chunks or 0) / its.count
        if lost < LATE_SHARE * its.period_ns:
            continue  # late on each chunk, but by too little to hold the ring back
        wait = excess + usual
        if role == "receiver":
            line = (
                f"{edge.src} → {host} idles {wait / 1e3:,.1f} µs per chunk (median of {edge.chunks:,}) for {host}'s "
                f"clear-to-send, the other edges {usual / 1e3:,.1f} µs: {host} is late to grant each chunk (receiver)"
            )
        else:
            line = (
                f"{host} → {edge.dst} sends each chunk {wait / 1e3:,.1f} µs after its clear-to-send and a free link "
                f"(median of {edge.chunks:,}), the other edges {usual / 1e3:,.1f} µs: {host} is late with each "
                "chunk's data (sender)"
            )
        confidence = min(sure, float(np.clip(0.5 * wait / (LATE_FACTOR * max(usual, 1.0)), 0.5, 1.0)))
        was = by_host.get(host, (0.0, [], 1.0))
        by_host[host] = (max(was[0], lost), [*was[1], line], min(was[2], confidence) if was[1] else confidence)
    return [
        _named(result, host, "compute", lost, its.count, evidence, confidence)
        for host, (lost, evidence, confidence) in sorted(by_host.items())
    ]


def _rank_of(result: Result, host: str) -> Optional[int]:
    """The host's rank where it runs one and the launch order says which (run.json's hosts)."""
    order = RunManifest(result.run).launch_order
    per_host = (result.iterations.ranks_per_host if result.iterations is not None else None) or {}
    if host in order and all(per_host.get(h, 1) == 1 for h in order):
        return order.index(host)
    return None


def _late(
    result: Result, edges: list[TransportEdge], hosts: list[str], period: float, sure: float, beside: list[str]
) -> list[Straggler]:
    """Hosts whose first sends of an iteration come after the others' in most iterations (module doc): compute
    stragglers. BESIDE: hosts of slow links, whose waits shift everyone's entry (the lag is then an upper bound)."""
    its = result.iterations
    assert its is not None
    if its.pattern is not None and its.pattern.kind not in ENTER_TOGETHER:
        return []  # a pipeline stage sends once the stage before it has: a late first send is its turn
    late_ns = max(LATE_SHARE * period, LATE_BINS * _width(result))
    per = [(e.src, e.dst, _by_iteration(e)) for e in edges]
    lags: dict[str, list[float]] = {}
    waits: dict[str, list[list[int]]] = {}
    judged: dict[str, int] = {}  # host: iterations its entry was seen and judged against the others'
    rounds = 0  # iterations with enough hosts' edges to judge any
    for k in range(1, its.count):
        seen = {(src, dst): (x[k - 1], x[k]) for src, dst, x in per if k - 1 in x and k in x}
        if len({src for src, _ in seen}) < 3:
            continue
        to: dict[str, list[str]] = {}  # each sender's receivers this iteration
        for a, b in seen:
            to.setdefault(a, []).append(b)
        rounds += 1
        entry = _entries(seen, _width(result), pause_ns(int(_width(result)), period))
        late: dict[str, tuple[float, float]] = {}  # host: (its lag, the others' entry)
        for host, first, ref in _against_the_others(entry):
            judged[host] = judged.get(host, 0) + 1
            if first - ref >= late_ns:
                late[host] = (first - ref, ref)
        for host, (lag, ref) in late.items():
            # a sender waits for its receiver: a host whose every edge leads to a late host waits on it
            if all(b in late for b in to.get(host, ())):
                continue
            lags.setdefault(host, []).append(lag)
            waits.setdefault(host, []).append([k, int(ref), int(ref + lag)])
    out = []
    for host, found in sorted(lags.items()):
        share = len(found) / judged[host]
        if share < MOST or judged[host] < MIN_JUDGED:
            continue
        lost = float(np.median(found))
        clock = _clock_uncertainty(result, host)
        if clock is not None and lost < CLOCK_MARGIN * clock:
            continue  # as late as its clock is unsure: nothing to say
        quoted = ", ".join(f"{x / 1e6:.0f}" for x in found[:SHOWN_LATE])
        confidence = min(sure, float(np.clip((share - MOST) / (1 - MOST) * 0.5 + 0.5, 0.5, 1.0)))
        evidence = [
            f"{host} enters the collective {lost / 1e6:.0f} ms after the others (median) in {len(found)} of "
            f"{judged[host]} iterations ({quoted} ms ...): its first bytes of the iteration follow theirs, sent "
            f"while it was still computing (bins of {_width(result) / 1e6:g} ms on the reference clock): compute, "
            "not the network"
        ]
        if clock is None:
            confidence = min(confidence, 0.5)  # its clock against the others' is not known
        if judged[host] < 0.5 * rounds:
            confidence = min(confidence, 0.5)
            evidence.append(f"its entry shows in {judged[host]} of the {rounds} iterations judged: unsure")
        others_slow = [h for h in beside if h != host]
        if others_slow:
            confidence = min(confidence, 0.5)
            evidence.append(
                f"beside the slow link of {', '.join(others_slow)} the others' entries follow their waits on it: "
                f"{lost / 1e6:.0f} ms is how late {host} enters, at most what the ring loses to it"
            )
        out.append(_named(result, host, "compute", lost, len(found), evidence, confidence, waits[host]))
    return out


def _against_the_others(entry: dict[tuple[str, str], float]) -> list[tuple[str, float, float]]:
    """Per host that sends in ENTRY (edge: its first send), its own earliest entry and the median entry of the
    edges that do not touch it, where at least two do. All hosts at once: the median without a host's few edges
    is read off one sorted array (each removed rank shifts the positions after it), not recomputed per host, which
    cost 2.3 s of a 512-host analysis."""
    if not entry:
        return []
    names = sorted({h for pair in entry for h in pair})
    index = {h: i for i, h in enumerate(names)}
    src = np.array([index[a] for a, _ in entry], dtype=np.int64)
    dst = np.array([index[b] for _, b in entry], dtype=np.int64)
    t = np.fromiter(entry.values(), dtype=np.float64, count=len(entry))
    n, hosts = len(t), len(names)
    order = np.argsort(t, kind="stable")
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    ordered = t[order]
    # the ranks each host's own edges hold, ascending per host, padded past the end
    pairs = np.unique(np.concatenate([src * n + rank, dst * n + rank]))
    host_of, removed = pairs // n, pairs % n
    k = np.bincount(host_of, minlength=hosts)
    start = np.concatenate([[0], np.cumsum(k)[:-1]])
    table = np.full((hosts, max(int(k.max()), 1)), n, dtype=np.int64)
    table[host_of, np.arange(len(pairs)) - start[host_of]] = removed
    left = n - k

    def position(p: np.ndarray) -> np.ndarray:
        for j in range(table.shape[1]):
            p = p + (table[:, j] <= p)
        return p

    usable = left >= 2
    lo = position(np.where(usable, (left - 1) // 2, 0))
    hi = position(np.where(usable, left // 2, 0))
    median = (ordered[np.minimum(lo, n - 1)] + ordered[np.minimum(hi, n - 1)]) / 2
    first = np.full(hosts, np.inf)
    np.minimum.at(first, src, t)
    return [(names[i], float(first[i]), float(median[i])) for i in range(hosts) if usable[i] and np.isfinite(first[i])]


def _entries(
    seen: dict[tuple[str, str], tuple[tuple[Any, ...], tuple[Any, ...]]], bin_ns: float, gap_ns: float
) -> dict[tuple[str, str], float]:
    """Each edge's first send of an iteration, from its (previous, this) iteration's (start, end, last run after a
    pause), where it is seen: after a pause (an idle of GAP_NS, pause_ns). An on-time edge sends a first part,
    then waits for the late rank; the iterations are cut at the longest pause, which is often that wait, so its
    first part may end its previous window as a last run: that run counts where it began after the first edge
    finished the previous iteration (a last run before that is the previous iteration's own, resumed after a
    wait). An edge busy from one iteration into the next (a slow link's queue draining, the ring waiting on it)
    shows no entry and is left out."""
    first = min(before[1] for before, _ in seen.values()) - bin_ns
    entry = {}
    for pair, (before, now) in seen.items():
        if before[2] is not None and before[2] >= first:
            entry[pair] = float(before[2])
        elif now[0] - before[1] >= gap_ns:
            entry[pair] = float(now[0])
    return entry


def _by_iteration(edge: TransportEdge) -> dict[int, tuple[Any, ...]]:
    """An edge's (first busy bin, end of its last, start of its last run after a pause) by iteration."""
    x = edge.per_iteration
    return {k: (s, e, t) for k, s, e, t in zip(x.index, x.start_ns, x.end_ns, x.tail_ns)}


def _named(
    result: Result,
    host: str,
    kind: str,
    lost: float,
    affected: int,
    evidence: list[str],
    confidence: float,
    waits: Optional[list[list[int]]] = None,
) -> Straggler:
    """A finding, its numbers rounded as the JSON keeps them."""
    rank = _rank_of(result, host)
    return Straggler(host, rank, kind, round(float(lost), 1), affected, evidence, round(float(confidence), 3), waits)


def _width(result: Result) -> float:
    """The width of the bins the edges' per-iteration figures are in: the one chosen from the traffic, whatever
    --bin says (analyze.wire.transport.judged_rates), so that who is late and by how much does not move with it."""
    t = result.tables
    return float(t.judged_bin_ns if t is not None and t.judged_bin_ns else result.bin_ns)


def _span(edge: TransportEdge) -> float:
    """The edge's median time from its first to the end of its last busy bin per iteration."""
    x = edge.per_iteration
    return float(np.median([e - s for s, e in zip(x.start_ns, x.end_ns)]))


def _clock_uncertainty(result: Result, host: str) -> Optional[float]:
    """How unsure the host's clock against the reference is (ns; 0 for the reference itself), None where unknown."""
    if result.clock is None or host == result.clock.reference:
        return 0.0
    for h in result.clock.hosts:
        if h.name == host and h.offset_ns is not None:
            return float(h.uncertainty_ns or 0)
    return None


def _speeds(
    paced: list[TransportEdge], pace: dict[tuple[str, str], float]
) -> tuple[dict[tuple[str, str], float], float]:
    """Each edge's rate while it sends and the usual one (USUAL_PERCENTILE), from packet times where every edge has
    them (analyze.wire.send_rate: the same at any bin), else PACE, the bins'. Which edges are slow and how sure
    hang on these: on a real 200 Mbit/s link among 1 Gbit/s ones the bins' pace read the slow edge at 0.25-0.31 of
    the usual at 5, 10 and 20 ms bins (named at 0.92, then 0.67), the bursts 206 against 996 Mbit/s at each; the
    edge it feeds 473 in bins, 997 in bursts."""
    if any(e.burst_rate is None for e in paced):
        return pace, float(np.percentile(list(pace.values()), USUAL_PERCENTILE))
    speed = {(e.src, e.dst): float(e.burst_rate or 0.0) * e.link_speed_bps for e in paced}
    return speed, float(np.percentile(list(speed.values()), USUAL_PERCENTILE))


Through = dict[str, set[tuple[str, str]]]  # a slow link's host: the (src, dst) edges it slows


def _slow_links(
    result: Result, edges: list[TransportEdge], period: float, sure: float
) -> tuple[list[Straggler], list[LinkFix], Through]:
    """Edges whose pace is under SLOW of the usual one, named by the host they share (module doc); the
    per-host-link what-if; and the edges each named link slows."""
    its = result.iterations
    assert its is not None
    paced = [e for e in edges if e.pace_bps]
    if len(paced) < 2:
        return [], [], {}
    pace = {(e.src, e.dst): float(e.pace_bps or 0.0) for e in paced}
    link_bps = {(e.src, e.dst): e.link_speed_bps for e in paced}
    line = {(e.src, e.dst): 8e9 * e.payload_bytes / its.count / e.link_speed_bps for e in paced}
    usual = float(np.percentile(list(pace.values()), USUAL_PERCENTILE))
    speed, usual_speed = _speeds(paced, pace)
    # a ring runs at its slowest edge's pace: an edge much faster than that one waits on it (an edge fed by a slow
    # link forwards at its pace), slowed but not a cause
    slowest = min(speed.values())
    slow = {k for k in speed if speed[k] < SLOW * usual_speed and speed[k] <= FED * slowest}
    comm = float(np.median([r.comm_ns for r in its.per_iteration])) if its.per_iteration else period
    # what each edge needs per iteration: a slow edge sends through all of it (its span: first to last busy bin,
    # slow starts and queue included); the others wait on it between ring steps, their own need hidden: their
    # bytes at line rate (their bins, shorter than a burst, read a pace under it)
    need = {(e.src, e.dst): _span(e) if (e.src, e.dst) in slow else line[(e.src, e.dst)] for e in paced}
    bound = max(need.values())
    # at the others' pace instead: each edge's bytes at the usual pace (from packet times where every edge has
    # them, as the wire model's price of the same fix), never slower than it is now
    as_usual = {k: min(need[k], line[k] * link_bps[k] / usual_speed) for k in need}

    def saving(fixed: set[tuple[str, str]], to: dict[tuple[str, str], float] = line) -> float:
        """What the FIXED edges save per iteration sent in the time TO gives them (line rate, else the usual
        pace): the ring waits for its slowest edge, and no fix saves more than the communication time."""
        left = [to[k] if k in fixed else need[k] for k in need]
        return float(min(max(bound - max(left), 0.0), comm))

    hosts = sorted({h for k in pace for h in k})
    # a slow edge is slowed at an end all of whose edges are slow (its link), else at either end (one edge alone)
    culprits = {k: {h for h in k if all(x in slow for x in pace if h in x)} or {*k} for k in slow}

    by_speed = sorted(speed, key=lambda k: speed[k])

    def speedup(fixed: set[tuple[str, str]], to: dict[tuple[str, str], float]) -> float:
        """How much faster the ring's slowest edge runs with the FIXED edges at the speeds TO gives them (never
        slower than now): the what-if replays the ring at that pace (analyze.whatif.link_fixes). The slowest
        edge left unfixed is the first not fixed by speed: a few steps per host, not every edge (512 hosts)."""
        rest = next((speed[k] for k in by_speed if k not in fixed), float("inf"))
        return min(rest, *(max(speed[k], to[k]) for k in fixed)) / slowest

    fixes = []
    for h in hosts:
        mine = {k for k in pace if h in k and (k not in slow or h in culprits[k])}
        save, usual_save = saving(mine), saving(mine, as_usual)
        fixes.append(
            LinkFix(
                host=h,
                src=None,
                dst=None,
                iteration_ns_if_fixed=round(period - save, 1),
                saving_ns=round(save, 1),
                saving_share=round(save / period, 4),
                iteration_ns_if_usual=round(period - usual_save, 1),
                saving_ns_if_usual=round(usual_save, 1),
                usual_bps=round(usual_speed, 1),
                ring_speedup=round(speedup(mine, link_bps), 4),
                ring_speedup_if_usual=round(speedup(mine, dict.fromkeys(speed, usual_speed)), 4),
                priced_by="edge sums",
            )
        )
    fixes.sort(key=lambda f: (-f.saving_ns, f.host))
    if not slow:
        return [], fixes, {}
    shared = set.intersection(*({*k} for k in slow))
    out, through = [], {}
    if shared and (len(slow) > 1 or len(hosts) == 2):
        groups = [(sorted(shared)[0], slow)]
    else:
        groups = [(k[0], {k}) for k in sorted(slow)]
    for host, mine in groups:
        lost = saving(mine, as_usual)
        if lost < max(LATE_SHARE * period, LATE_BINS * _width(result)):
            continue  # slower, but the ring does not wait for it
        worst = min(mine, key=lambda k: speed[k])
        names = ", ".join(f"{s} → {d}" for s, d in sorted(mine))
        confidence = min(sure, float(np.clip((1 - speed[worst] / usual_speed) / (1 - SLOW) * 0.5, 0.5, 1.0)))
        out.append(
            _named(
                result,
                host,
                "link",
                lost,
                its.count,
                [
                    f"{names} send{'' if len(mine) > 1 else 's'} at {speed[worst] / 1e6:,.0f} Mbit/s "
                    f"{'from packet times' if speed is not pace else 'in its busy bins'} while the other edges "
                    f"run at {usual_speed / 1e6:,.0f} Mbit/s (75th percentile): "
                    f"{'its' if len(mine) > 1 else 'the'} link, not {host}'s compute",
                    f"each ring step at {pace[worst] / 1e6:,.0f} Mbit/s over its busy bins against the others' "
                    f"{usual / 1e6:,.0f} Mbit/s; the time lost is priced at the others' usual pace, "
                    f"{usual_speed / 1e6:,.0f} Mbit/s",
                ],
                confidence,
            )
        )
        through[host] = mine
    return out, fixes, through

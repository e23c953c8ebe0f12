"""Who holds the ring back: a rank late into the collective (compute) or a link slower than the others.

Why from the packets: a ring waits for its slowest member, so one slow server and one slow link look alike in any
single host's counters: everyone's step grows and every link idles part of it. The capture tells them apart.

* compute: a collective's sender waits until its receiver is ready (gloo's ready notice, NCCL's credits), so
  when one rank is late the others begin the step's first sends between themselves, and every edge to and from
  the late rank stays quiet until it enters. Per iteration (analyze.wire.transport gives each edge's busy span
  and where its last run after a pause began, on the reference clock): edges whose last run of the previous
  iteration's window starts after the others went quiet are on time; the quiet ones all touching one host point
  at it, late by the time from the on-time edges' first sends to its edges' first. A host so late (LATE_SHARE
  of the period or LATE_BINS bins, whichever is longer) in MOST of the iterations or more is a straggler; each
  iteration loses its median lag.
* link: edges whose pace (the 90th percentile of their bins' rates) is under SLOW of the usual one (the edges'
  75th percentile: one slow host slows two edges of a ring); where they all touch one host, its link.

The per-link what-if (at line rate, and at the others' usual pace): what each edge needs per iteration is its
span where it is slow (it sends through all of it) and its bytes at line rate elsewhere (the others wait on it
between ring steps; their bins, shorter than a burst, read a pace under line rate); the ring needs the most of
them. Fixing a host's link gives its slow edges line rate (or their bytes at the usual pace), where the slowness is
at its end (every edge of the host slow; one slow edge alone: either end), and saves what the ring then needs
less, never more than the communication time per iteration. A slow link's lost time is its fix's saving.
Unsure where the iterations or the clocks are.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from analyze.findings import LinkFix, Straggler, TransportEdge
from analyze.result import Result

__all__ = ["add_stragglers", "find_stragglers", "LATE_SHARE", "SLOW"]

LATE_SHARE = 0.05  # a host entering this share of the period after the others is late ...
LATE_BINS = 2  # ... and at least this many bins (what the bins resolve)
MOST = 0.6  # late in this share of the iterations or more: a straggler; fewer is noise
SLOW = 0.6  # an edge whose pace is under this share of the usual pace is slow
USUAL_PERCENTILE = 75  # the edges' usual pace: one slow host slows two edges of a ring, half of a ring of four
EDGE_SHARE = 0.1  # an edge carrying under this share of the heaviest edge's bytes is no ring edge
LATE_BESIDE_SLOW = (
    "while its edges stay busy through every iteration boundary, a rank late into the collective elsewhere would "
    "not stand out: none is ruled out"
)
SHOWN_LATE = 3  # iterations' lags quoted in the evidence
CLOCK_MARGIN = 2.0  # a lag under this many times the host's clock uncertainty is not told from clock error


def add_stragglers(result: Result) -> None:
    """Set result.stragglers (None where the capture cannot tell) and, beside the what-if (the ring model's or the
    link bounds), its per-link rows."""
    if result.transport is None or result.iterations is None or not result.iterations.count:
        return
    found, fixes = find_stragglers(result)
    result.stragglers = found
    if result.scaling is not None and fixes:
        result.scaling.per_edge = fixes
    elif result.link_bound is not None and fixes:  # a sharded or pipeline job: beside its link bounds
        result.link_bound.per_edge = fixes


def find_stragglers(result: Result) -> tuple[list[Straggler], list[LinkFix]]:
    """(who holds the ring back, each host's link what-if ranked by its saving); empty where the capture cannot say
    (no transport, no sure iterations, fewer than two hosts sending)."""
    its, transport = result.iterations, result.transport
    if its is None or transport is None or not its.count or not its.period_ns:
        return [], []
    heaviest = max((e.payload_bytes for e in transport.edges), default=0)
    edges = [  # the collective's own edges: data in most iterations, not the set-up's broadcast or a control mesh
        e
        for e in transport.edges
        if len(e.per_iteration.index) >= MOST * its.count and e.payload_bytes >= EDGE_SHARE * heaviest
    ]
    hosts = sorted({e.src for e in edges})
    if len(hosts) < 2:
        return [], []
    sure = its.confidence if its.source != "markers" else 1.0
    period = float(its.period_ns)
    out = _late(result, edges, hosts, period, sure)
    slow, fixes = _slow_links(result, edges, period, sure)
    return out + slow, fixes


def _rank_of(result: Result, host: str) -> Optional[int]:
    """The host's rank where it runs one and the launch order says which (run.json's hosts)."""
    order = (result.run or {}).get("hosts") or []
    per_host = (result.iterations.ranks_per_host if result.iterations is not None else None) or {}
    if host in order and all(per_host.get(h, 1) == 1 for h in order):
        return order.index(host)
    return None


def _late(result: Result, edges: list[TransportEdge], hosts: list[str], period: float, sure: float) -> list[Straggler]:
    """Hosts late into the collective in most iterations (module doc): compute stragglers."""
    its = result.iterations
    assert its is not None
    bin_ns = float(result.bin_ns)
    late_ns = max(LATE_SHARE * period, LATE_BINS * float(result.bin_ns))
    per = {(e.src, e.dst): _by_iteration(e) for e in edges}
    lags: dict[str, list[float]] = {}
    waits: dict[str, list[list[int]]] = {}
    judged = 0
    for k in range(1, its.count):
        seen = {pair: (x[k - 1], x[k]) for pair, x in per.items() if k - 1 in x and k in x}
        if len(seen) < 3:
            continue
        judged += 1
        early = {p: before[2] for p, (before, _) in seen.items() if before[2] is not None}
        if not early:
            continue
        # the others' first sends come once every edge to and from the late host has gone quiet (one bin of
        # rounding); a tail inside the collective (a pause between buckets, a wait on a slow edge) starts earlier.
        # An edge whose first sends follow its last ring step too closely for a pause between them is neither.
        began = min(early.values())
        quiet = [p for p, (before, _) in seen.items() if before[2] is None and before[1] <= began + bin_ns]
        if len(quiet) < 2 or began < max(seen[p][0][1] for p in quiet) - bin_ns:
            continue
        common = set.intersection(*({*p} for p in quiet))
        if len(common) != 1:
            continue
        host = common.pop()
        entered = float(np.median([seen[p][1][0] for p in quiet]))
        lag = entered - float(np.median(list(early.values())))
        if lag >= late_ns:
            lags.setdefault(host, []).append(lag)
            waits.setdefault(host, []).append([k, int(entered - lag), int(entered)])
    out = []
    for host, found in sorted(lags.items()):
        share = len(found) / max(judged, 1)
        if share < MOST:
            continue
        lost = float(np.median(found))
        clock = _clock_uncertainty(result, host)
        if clock is not None and lost < CLOCK_MARGIN * clock:
            continue  # as late as its clock is unsure: nothing to say
        quoted = ", ".join(f"{x / 1e6:.0f}" for x in found[:SHOWN_LATE])
        confidence = min(sure, float(np.clip((share - MOST) / (1 - MOST) * 0.5 + 0.5, 0.5, 1.0)))
        if clock is None:
            confidence = min(confidence, 0.5)  # its clock against the others' is not known
        out.append(
            _named(
                result,
                host,
                "compute",
                lost,
                len(found),
                [
                    f"{host} enters the collective {lost / 1e6:.0f} ms after the others (median) in {len(found)} "
                    f"of {judged} iterations ({quoted} ms ...): the others' edges begin the iteration's first "
                    f"sends while every edge to and from {host} waits until it is ready (bins of "
                    f"{result.bin_ns / 1e6:g} ms on the reference clock): compute, not the network"
                ],
                confidence,
                waits[host],
            )
        )
    return out


def _by_iteration(edge: TransportEdge) -> dict[int, tuple[int, int, Optional[int]]]:
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
    return Straggler(host, rank, kind, round(lost, 1), affected, evidence, round(confidence, 3), waits)


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


def _slow_links(
    result: Result, edges: list[TransportEdge], period: float, sure: float
) -> tuple[list[Straggler], list[LinkFix]]:
    """Edges whose pace is under SLOW of the usual one, named by the host they share (module doc); and the
    per-host-link what-if."""
    its = result.iterations
    assert its is not None
    paced = [e for e in edges if e.pace_bps]
    if len(paced) < 2:
        return [], []
    pace = {(e.src, e.dst): float(e.pace_bps or 0.0) for e in paced}
    line = {(e.src, e.dst): 8e9 * e.payload_bytes / its.count / e.link_speed_bps for e in paced}
    usual = float(np.percentile(list(pace.values()), USUAL_PERCENTILE))
    slow = {k for k in pace if pace[k] < SLOW * usual}
    comm = float(np.median([r.comm_ns for r in its.per_iteration])) if its.per_iteration else period
    # what each edge needs per iteration: a slow edge sends through all of it (its span: first to last busy bin,
    # slow starts and queue included); the others wait on it between ring steps, their own need hidden: their
    # bytes at line rate (their bins, shorter than a burst, read a pace under it)
    need = {(e.src, e.dst): _span(e) if (e.src, e.dst) in slow else line[(e.src, e.dst)] for e in paced}
    bound = max(need.values())

    # at the others' pace instead: each edge's bytes at the usual pace, never slower than it is now
    as_usual = {(e.src, e.dst): min(need[(e.src, e.dst)], 8e9 * e.payload_bytes / its.count / usual) for e in paced}

    def saving(fixed: set[tuple[str, str]], to: dict[tuple[str, str], float] = line) -> float:
        """What the FIXED edges save per iteration sent in the time TO gives them (line rate, else the usual
        pace): the ring waits for its slowest edge, and no fix saves more than the communication time."""
        left = [to[k] if k in fixed else need[k] for k in need]
        return float(min(max(bound - max(left), 0.0), comm))

    hosts = sorted({h for k in pace for h in k})
    # a slow edge is slowed at an end all of whose edges are slow (its link), else at either end (one edge alone)
    culprits = {k: {h for h in k if all(x in slow for x in pace if h in x)} or {*k} for k in slow}
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
                usual_bps=round(usual, 1),
            )
        )
    fixes.sort(key=lambda f: (-f.saving_ns, f.host))
    if not slow:
        return [], fixes
    shared = set.intersection(*({*k} for k in slow))
    out = []
    if shared and (len(slow) > 1 or len(hosts) == 2):
        groups = [(sorted(shared)[0], slow)]
    else:
        groups = [(k[0], {k}) for k in sorted(slow)]
    for host, mine in groups:
        lost = saving(mine)
        if lost < max(LATE_SHARE * period, LATE_BINS * float(result.bin_ns)):
            continue  # slower, but the ring does not wait for it
        worst = min(mine, key=lambda k: pace[k])
        names = ", ".join(f"{s} → {d}" for s, d in sorted(mine))
        confidence = min(sure, float(np.clip((1 - pace[worst] / usual) / (1 - SLOW) * 0.5, 0.5, 1.0)))
        out.append(
            _named(
                result,
                host,
                "link",
                lost,
                its.count,
                [
                    f"{names} carr{'y' if len(mine) > 1 else 'ies'} each ring step at "
                    f"{pace[worst] / 1e6:,.0f} Mbit/s while the other edges run at {usual / 1e6:,.0f} Mbit/s "
                    f"(75th percentile): {'its' if len(mine) > 1 else 'the'} link, not {host}'s compute",
                    LATE_BESIDE_SLOW,
                ],
                confidence,
            )
        )
    return out, fixes

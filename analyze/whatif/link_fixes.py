"""The per-link what-if priced by the wire model: what a host's iteration becomes when its slow link is fixed.

Why the wire model: the stragglers' own sums (analyze.wire.stragglers: each edge's need per iteration, the ring
waiting for the largest) price a fix from the communication alone, apart from the what-if users read beside it; a
prediction at another speed must come from one model (issue 44), the one checked by rerunning jobs at other link
speeds. A fix speeds the ring's slowest edge up by RING_SPEEDUP (the stragglers read it from packet times: the
slowest edge after the fix over the slowest now), so the ring's iterations are replayed at that many times the
rate they were captured at, capped at line rate.

Whose iterations: the fixed host's own. Its link paced the ring, so its windows show the ring's communication
with no waits inside them; the other hosts' windows idle between ring steps while the slow edge sends, which the
wire model reads as bytes not yet ready and keeps at any speed. On a real 4-host ring with one link shaped to a
fifth of the others' rate, rerun without the shaper 533 ms faster a step: the slow host's timeline priced its
fix at 536 ms, the four hosts' at 326 ms (tests/collective/test_stragglers.py checks it on every CI run).

What the capture cannot tell (the compute hidden under a link busy all through the step, the transport's
efficiency at the faster rate) is the saving's interval: the wire replays' bounds, each replayed at the captured
and the fixed rate. Where the wire cannot replay the host (no iteration sent, T not positive), the row keeps the
edge sums and says so (`priced_by`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import numpy as np

from analyze.model.findings import LinkFix, TimelineIteration, WireTimeline
from analyze.model.result import Result
from analyze.whatif.inputs import inputs_from_result
from analyze.whatif.wire_replay import EFFICIENCY_BAND, WireReplays, wire_replays

__all__ = ["fixes_of", "hosts_to_price", "price_link_fixes", "interval_words", "FASTER", "WHOLE"]

WHOLE = 0.1  # an iteration whose bytes are within this share of the host's median carries its own (_whole)
FASTER = 1.01  # a fix whose ring runs under this many times faster changes nothing the bins resolve: it saves 0


def fixes_of(result: Result) -> list[LinkFix]:
    """The per-link what-if's rows, beside the what-if or the link bounds: the record's own list (empty where
    there are none)."""
    holder = result.scaling if result.scaling is not None else result.link_bound
    return holder.per_edge if holder is not None and holder.per_edge is not None else []


def interval_words(fix: LinkFix) -> str:
    """The saving's interval as the summary and the verdict quote it ("" where the edges' sums priced FIX)."""
    if fix.saving_ns_low is None or fix.saving_ns_high is None:
        return ""
    return f"; {fix.saving_ns_low / 1e6:.0f}-{fix.saving_ns_high / 1e6:.0f} ms with what the capture cannot tell"


def hosts_to_price(fixes: list[LinkFix]) -> set[str]:
    """The hosts whose fix (of FIXES) runs the ring faster: the wire model replays their timelines."""
    return {f.host for f in fixes if f.host and (f.ring_speedup or 1.0) >= FASTER}


def price_link_fixes(result: Result, fixes: list[LinkFix], timeline: Optional[WireTimeline]) -> None:
    """Re-price the per-link rows FIXES (the stragglers', in place, then re-ranked by saving) by the wire model,
    each from TIMELINE's iterations of its host (wire_timeline of hosts_to_price), replayed as the job's what-if is
    (with chained readiness for sharded and pipeline jobs), and put them beside RESULT's what-if (the ring model's
    or the link bounds)."""
    holder = result.scaling if result.scaling is not None else result.link_bound
    if not fixes or holder is None:
        return
    holder.per_edge = fixes
    its = result.iterations
    if its is None or not its.period_ns:
        return
    measured = inputs_from_result(result)
    workers, period_s = measured.workers or 0, float(its.period_ns) / 1e9
    for fix in fixes:
        line, usual = fix.ring_speedup or 1.0, fix.ring_speedup_if_usual or 1.0
        if line < FASTER:
            _set(fix, period_s, (0.0, 0.0, 0.0), 0.0)
            continue
        if timeline is None:
            continue
        rows = _whole([it for it in timeline.iterations if it.host == fix.host])
        replays = wire_replays(replace(timeline, iterations=rows), workers, period_s, False, measured.chained)
        if rows and replays is not None:
            link = timeline.link_speed_bps
            _set(fix, period_s, _saving(replays, link, line), _saving(replays, link, usual)[0])
    fixes.sort(key=lambda f: (-f.saving_ns, f.host or ""))


def _whole(rows: list[TimelineIteration]) -> list[TimelineIteration]:
    """The host's iterations that carry their own bytes: within WHOLE of the median's. Where a cut between two
    iterations fell inside a busy run (the slow host's link never idles), one carries part of the next one's
    bytes: on a real slow link 19.0 and 10.5 MB beside 15.0, and the long one, replayed at the fixed rate, kept
    its extra bytes' time (the fix priced 512 ms against 542 measured, outside its interval)."""
    volume = np.array([sum(it.bytes_per_bin) for it in rows], dtype=np.float64)
    if not len(volume):
        return rows
    keep = np.abs(volume / max(float(np.median(volume)), 1.0) - 1) <= WHOLE
    return [it for it, k in zip(rows, keep.tolist()) if k]


def _saving(replays: WireReplays, link_bps: float, speedup: float) -> tuple[float, float, float]:
    """(the point's saving, the interval's low and high) in seconds: per iteration of the host, its window as
    captured less its window replayed at the ring's rate SPEEDUP times the captured one, within EFFICIENCY_BAND (the
    fast bound faster, the slow one slower), never faster than line rate; the median over the iterations. Each
    bound's rate is set here, not by its own efficiency: the fixed host's timeline caps the fast bound at the slow
    link's peak rate. The median, not the mean: where the slow link never idles, one idle bin inside a window pins
    the backward pass's end after it (the link waited for those bytes), and that iteration keeps its first part at
    any rate (a CI capture: one bin 345 ms into one of six windows; the mean priced the fix at 494 ms, 0-511, the
    median 536 ms, 0-555, against 552 measured by rerunning without the shaper)."""
    rate = replays.point.efficiency * speedup
    saved = []
    for r, band in ((replays.point, 1.0), (replays.fast, 1 + EFFICIENCY_BAND), (replays.slow, 1 - EFFICIENCY_BAND)):
        each = r.saving_each_s(r.workers, link_bps * min(rate * band, 1.0) / r.efficiency)
        saved.append(max(float(np.median(each)), 0.0))
    return saved[0], min(saved), max(saved)


def _set(fix: LinkFix, period_s: float, line: tuple[float, float, float], usual_s: float) -> None:
    """FIX's figures from the wire model's savings (seconds): at line rate with its interval, at the usual pace."""
    save, low, high = line
    fix.saving_ns, fix.saving_ns_low, fix.saving_ns_high = (
        round(save * 1e9, 1),
        round(low * 1e9, 1),
        round(high * 1e9, 1),
    )
    fix.iteration_ns_if_fixed = round((period_s - save) * 1e9, 1)
    fix.saving_share = round(save / period_s, 4)
    fix.saving_ns_if_usual = round(min(usual_s, save) * 1e9, 1)
    fix.iteration_ns_if_usual = round((period_s - min(usual_s, save)) * 1e9, 1)
    fix.priced_by = "wire model"

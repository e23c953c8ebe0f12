"""The per-link what-if's price of a fix (analyze.whatif.link_fixes), on timelines made by hand whose answer is
known: a host whose slow link never idles sends V bytes per iteration at its captured rate, so at SPEEDUP times
that rate its window shrinks by W (1 - 1/SPEEDUP)."""

from __future__ import annotations

import pytest

from analyze.model.findings import TimelineIteration, WireTimeline
from analyze.whatif.link_fixes import _saving
from analyze.whatif.wire_replay import wire_replays

BIN_NS = 5_000_000
BINS = 140  # a 700 ms window, the link busy all through it
PER_BIN = 125_000  # 200 Mbit/s on a 1 Gbit/s link
SPEEDUP = 4.0


def _timeline(stray: bool) -> WireTimeline:
    """Six iterations of the busy slow link; with STRAY, one has an idle bin 345 ms into its window (the ring's wait
    for a predecessor's chunk, which the wire cannot tell from the backward pass still running)."""
    rows = []
    for k in range(6):
        sent = [PER_BIN] * BINS
        idle = []
        if stray and k == 4:
            sent[69], idle = 0, [69]
        rows.append(TimelineIteration(k, "h3", BINS * BIN_NS + 5_000_000, 5_000_000, sent, idle))
    return WireTimeline(BIN_NS, 1, 1e9, 2e8, rows)


def test_one_stray_idle_bin_does_not_move_the_price() -> None:
    """Clean, the fix saves the window's 700 ms less its 175 ms at four times the rate (the interval's low end 0:
    with the link busy all through, the compute under it may be as long as the window). One stray idle bin in one
    of six windows pins that window's backward end after it: averaged, the price fell by a sixth of its first
    part's bytes; the median over the iterations keeps it."""
    period_s = (BINS * BIN_NS + 5_000_000) / 1e9
    prices = []
    for stray in (False, True):
        replays = wire_replays(_timeline(stray), 4, period_s)
        assert replays is not None
        prices.append(_saving(replays, 1e9, SPEEDUP))
    (clean, low, high), (moved, _, _) = prices
    assert clean == pytest.approx(0.7 * (1 - 1 / SPEEDUP), rel=0.03), clean
    assert low == 0.0 and high >= clean, (low, high)
    assert moved == pytest.approx(clean, rel=0.01), (moved, clean)

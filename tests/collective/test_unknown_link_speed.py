"""A judgment read against line rate is unsure where no one gave the line rate (issue 45: the same input, the same
judgment whatever the flags). The real 4-host DDP capture in fixtures/example-ddp (1 Gbit/s links, recorded in
each host's meta.json) read three ways: as captured, with meta.json's link speed removed (10 Gbit/s assumed), and
so with --link-speed 1Gbit. Ground truth: the links were shaped to 1 Gbit/s, and the job filled them."""

from __future__ import annotations

from pathlib import Path

from analyze.api import analyze
from analyze.wire.transport import LINE_RATE_LIMITERS, UNKNOWN_LINE_RATE_CONFIDENCE
from tests.support.link_speed import without_link_speed

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "example-ddp" / "run"


def test_an_assumed_line_rate_leaves_the_limiter_unsure(tmp_path: Path) -> None:
    captured = analyze([RUN], workers=1)
    assumed = analyze([without_link_speed(RUN, tmp_path / "assumed")], workers=1)
    told = analyze([without_link_speed(RUN, tmp_path / "told")], workers=1, link_speed_bps=1e9)
    assert {h.link_speed_source for h in assumed.hosts} == {"assumed"}
    assert captured.transport is not None and assumed.transport is not None and told.transport is not None
    assert captured.transport.limiter == "link"  # 1 Gbit/s, filled
    # told the truth on the command line: the same judgment as from meta.json
    assert (told.transport.limiter, told.transport.confidence) == (
        captured.transport.limiter,
        captured.transport.confidence,
    )
    # against 10 Gbit/s assumed the edges read 9 % of line rate: whatever it says, it is not sure of it
    assert assumed.transport.limiter in LINE_RATE_LIMITERS
    assert assumed.transport.confidence <= UNKNOWN_LINE_RATE_CONFIDENCE
    for edge in assumed.transport.edges:
        if edge.limiter in LINE_RATE_LIMITERS:
            assert edge.confidence <= UNKNOWN_LINE_RATE_CONFIDENCE, edge
            assert any("give --link-speed" in text for text in edge.evidence), edge.evidence
    # what rests on the packets alone does not move: the count, the ring, the stragglers
    assert assumed.iterations.count == captured.iterations.count
    assert assumed.topology.order == captured.topology.order
    assert [(s.host, s.kind, s.lost_ns_per_iteration) for s in assumed.stragglers or []] == [
        (s.host, s.kind, s.lost_ns_per_iteration) for s in captured.stragglers or []
    ]

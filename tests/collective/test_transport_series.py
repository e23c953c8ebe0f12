"""How many edges' series the transport writes (analyze.wire.transport.SERIES_EDGES): every edge's up to 64, then
the heaviest half, every edge judged otherwise than the job, and the rest by bytes. At 512 hosts every edge's series
made 17.7 of the JSON's 26 MB; the report draws the eight heaviest judged edges.

Ground truth: the synthetic ring (tests/benchmarks/synth.py) sends equal bytes on every edge, each host's own
capture; the count of edges is the ring's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from analyze.api import analyze
from analyze.wire import transport
from analyze.wire.transport import SERIES_EDGES, series_shown
from tests.benchmarks.many_hosts import ring_folder
from tests.support import rocegen as R


def test_a_ring_of_more_edges_keeps_the_series_of_sixty_four(tmp_path: Path) -> None:
    hosts = SERIES_EDGES + 8
    ring_folder(tmp_path, hosts, 1500)
    edges = analyze([tmp_path], workers=1).transport.edges  # type: ignore[union-attr]
    assert len(edges) == hosts
    drawn = [e for e in edges if e.series.t_ns]
    assert len(drawn) == SERIES_EDGES
    assert all(e.series.t_ns for e in edges[: SERIES_EDGES // 2])  # the heaviest: what the report draws


def test_an_odd_edge_keeps_its_series_among_many() -> None:
    rows: list[Any] = [SimpleNamespace(limiter="link") for _ in range(200)]
    rows[150].limiter = "loss"
    rows[199].limiter = None  # too light to judge: never odd
    shown = series_shown(rows, "link")
    assert len(shown) == SERIES_EDGES
    assert shown[: SERIES_EDGES // 2] == rows[: SERIES_EDGES // 2] and shown[SERIES_EDGES // 2] is rows[150]
    assert rows[199] not in shown
    few = rows[:10]
    assert series_shown(few, "link") == few  # up to SERIES_EDGES, every edge's


def test_rdma_edges_keep_as_many_series(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """RDMA edges' series are chosen the same way (every edge's was written): with room for two, the two heaviest
    judged edges of a generated RoCEv2 ring carry theirs and the rest none."""
    monkeypatch.setattr(transport, "SERIES_EDGES", 2)
    ring = R.RoceRing(hosts=4, iterations=8)
    rdma = analyze([R.write_run(tmp_path / "run", R.generate(ring))], workers=1).rdma
    drawn = [e for e in rdma.edges if e.series.t_ns]
    assert len(rdma.edges) == 8 and len(drawn) == 2 and all(e.limiter is not None for e in drawn), rdma.edges

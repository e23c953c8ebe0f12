"""S from the unique bytes (analyze.collective.resent): a 3-host ring whose every host sent 2(N-1)/N x S per
iteration plus what it re-sent; the bytes re-sent per edge and iteration are the transport's. S is known before
the numbers are made, so the implied S must come back exactly once the re-sent bytes are taken out."""

from __future__ import annotations

import pytest

from analyze.model.findings import (
    EdgeIterations,
    EdgeSeries,
    IterationRecord,
    Iterations,
    Percentiles,
    Topology,
    TopologyEdge,
    Transport,
    TransportEdge,
)
from analyze.collective.resent import leave_out_resent
from analyze.model.result import Result

S = 3_000_000
RING = ["a", "b", "c"]
PER_HOST = 2 * (len(RING) - 1) * S // len(RING)  # 4,000,000 B per host per iteration
# (sender, iteration in time order): bytes re-sent, on most host-iterations, so the median as sent is inflated
RESENT = {(h, k): 50_000 * (i + 1) * (k + 1) for i, h in enumerate(RING) for k in range(3) if (i, k) != (0, 0)}


def _edge(src: str, dst: str, iterations: int) -> TransportEdge:
    gone = [RESENT.get((src, k), 0) for k in range(iterations)]
    return TransportEdge(
        src, dst, 1, PER_HOST * iterations, sum(gone), sum(gone) / (PER_HOST * iterations), 0, 0, 0, 0, 0.0, 0.0,
        0, 0, False, None, None, 0, None, None, None, None, None, 1e9, None,
        EdgeIterations(index=list(range(iterations)), resent_bytes=gone), "loss", [], 0.9, EdgeSeries(),
    )  # fmt: skip


def _result(iterations: int = 3) -> Result:
    # listed out of time order: the transport numbers iterations by their start, the records keep their own index
    records = [
        IterationRecord(k, 1000 * (k + 1), 1000 * (k + 2), {h: PER_HOST + RESENT.get((h, k), 0) for h in RING}, {}, {},
                        0, 0, 0.0)
        for k in reversed(range(iterations))
    ]  # fmt: skip
    sent = sorted(b for r in records for b in r.bytes_by_host.values())
    its = Iterations(
        source="markers", count=iterations, per_iteration=records, confident=True, confidence=1.0, ring_size=3,
        bytes_per_iteration_per_host=Percentiles(median=float(sent[len(sent) // 2])),
        implied_gradient_bytes=sent[len(sent) // 2] * 3 / 4,
    )  # fmt: skip
    edges = [TopologyEdge(s, d, 0, 0, 1, 1 / 3, False) for s, d in zip(RING, RING[1:] + RING[:1])]
    result = Result("payload", 10_000_000, 0.5, [], [], [], [], [])
    result.topology = Topology("ring", order=RING, edges=edges, confidence=1.0)
    result.iterations = its
    result.transport = Transport("loss", 0.9, [], [_edge(s, d, iterations) for s, d in zip(RING, RING[1:] + RING[:1])])
    return result


def test_the_implied_gradient_is_the_unique_bytes_over_the_ring_factor() -> None:
    result = _result()
    assert result.iterations is not None and result.iterations.implied_gradient_bytes == pytest.approx(
        1.0375 * S
    )  # +3.75 %
    leave_out_resent(result)
    its = result.iterations
    assert its is not None and its.unique_bytes_per_iteration_per_host is not None
    unique = its.unique_bytes_per_iteration_per_host
    assert unique.median == unique.p5 == unique.p95 == PER_HOST
    assert its.implied_gradient_bytes == S and its.implied_params_fp32 == S / 4
    assert its.bytes_per_iteration_per_host.median == PER_HOST + 150_000  # as sent: untouched
    assert any(f"re-sent bytes left out of S: {sum(RESENT.values()):,} B" in n for n in its.notes)


def test_without_loss_nothing_changes_but_the_unique_bytes_are_given() -> None:
    result = _result()
    assert result.transport is not None
    for e in result.transport.edges:
        e.per_iteration.resent_bytes = [0] * len(e.per_iteration.index)
    assert result.iterations is not None
    before = (result.iterations.implied_gradient_bytes, list(result.iterations.notes))
    leave_out_resent(result)
    assert (result.iterations.implied_gradient_bytes, result.iterations.notes) == before
    assert result.iterations.unique_bytes_per_iteration_per_host == result.iterations.bytes_per_iteration_per_host

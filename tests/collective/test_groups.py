"""Data-parallel groups and pipeline links from a job's host edges (analyze/collective/groups.py), on edges built
by hand: two stages of two replicas, a ring all-reduce, a bidirectional ring, and near misses."""

from __future__ import annotations

import pandas as pd

from analyze.collective.groups import find_groups


def _edges(rows):
    return pd.DataFrame(rows, columns=["src", "dst", "payload_bytes"])


DP, PP, MESH = 4_000_000, 700_000, 2_000


def _pipeline(dp=DP, pp=PP):
    """Stage 0 on a, b and stage 1 on c, d (replicas a-c and b-d): each stage's pair all-reduces DP each way,
    each replica's boundary carries PP each way, and the gloo mesh's other pairs a little."""
    rows = []
    for x, y, b in (("a", "b", dp), ("c", "d", dp), ("a", "c", pp), ("b", "d", pp), ("a", "d", MESH), ("b", "c", MESH)):
        rows += [(x, y, b), (y, x, b)]
    return _edges(rows)


def test_two_stages_of_two_replicas():
    found = find_groups(_pipeline())
    assert found is not None and found["confidence"] == 1.0  # 8 MB against 1.4 MB: a drop of 5.7
    kinds = [(g.kind, g.hosts) for g in found["groups"]]
    assert kinds == [
        ("data_parallel", ["a", "b"]),
        ("data_parallel", ["c", "d"]),
        ("pipeline", ["a", "b", "c", "d"]),
    ]
    pipe = found["groups"][2]
    assert pipe.edges == [["a", "c"], ["b", "d"], ["c", "a"], ["d", "b"]] and pipe.bytes == 4 * PP
    assert found["groups"][0].bytes == 2 * DP


def test_the_drop_sets_the_confidence():
    assert find_groups(_pipeline(pp=DP // 3))["confidence"] == 0.75  # a drop of 3: half way from 2 to 4
    assert find_groups(_pipeline(pp=DP // 1.5)) is None  # under a drop of 2: one collective, not groups


def test_one_collective_is_no_groups():
    ring = _edges([(x, y, DP) for x, y in (("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"))])
    assert find_groups(ring) is None  # one way only: no pair exchanges both ways
    both = _edges(
        [(x, y, DP) for x, y in (("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"))]
        + [(y, x, DP) for x, y in (("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"))]
    )
    assert find_groups(both) is None  # a bidirectional ring: every pair alike


def test_a_partial_boundary_is_not_a_pipeline():
    edges = _pipeline()
    edges = edges[~edges["src"].isin(["b", "d"]) | ~edges["dst"].isin(["b", "d"])]  # b-d's link gone
    assert find_groups(edges) is None

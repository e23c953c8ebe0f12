"""Topology: generated captures of known collectives (ring 4/32/64, tree, star, mesh, a missing host) read
through the whole analyzer, and the pure classifier on tables built by hand."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]

from fixtures.collective import collective_synth as synth  # noqa: E402
from tests.support.requirements import require_module  # noqa: E402

from analyze.api import analyze  # noqa: E402
from analyze.collective.topology import classify, nccl_btree, nccl_dtree_pairs  # noqa: E402


def _topo(root: Path, **kw) -> dict:
    return analyze([root], workers=1, **kw).topology


@pytest.mark.parametrize("n", [4, 32, 64])
def test_ring_sizes_and_direction(tmp_path, n):
    topo = _topo(synth.build("ring", tmp_path / "r", n, iterations=3))
    names = [f"h{i}" for i in range(n)]
    assert topo.kind == "ring" and topo.confidence >= 0.95
    assert topo.order == [names[0]] + names[:0:-1]  # r sends to r-1: against the launch order
    assert topo.direction == "against_launch_order" and topo.matches_launch_order is True
    assert len(topo.edges) == n and all(not e.inferred for e in topo.edges)
    assert sum(e.flows for e in topo.edges) == 2 * n  # two sockets per pair, summed per host pair
    assert abs(sum(e.share for e in topo.edges) - 1) < 1e-3  # control traffic is ~0


def test_ring_with_launch_order_direction_and_mismatch(tmp_path):
    root = synth.build("ring", tmp_path / "r", 5, iterations=2, against=False)
    topo = _topo(root)
    assert topo.order == ["h0", "h1", "h2", "h3", "h4"] and topo.direction == "with_launch_order"
    topo = _topo(root, launch_order=["h2", "h0", "h1", "h3", "h4"])
    assert topo.matches_launch_order is False and topo.direction is None
    assert topo.order[0] == "h2" and any("launch order" in n for n in topo.notes)


def test_missing_host_edges_inferred(tmp_path):
    root = synth.build("ring", tmp_path / "r", 5, iterations=2, missing=2)
    topo = _topo(root)
    ghost = synth.host_ips(5)[2]
    assert topo.kind == "ring" and topo.order == ["h0", "h4", "h3", ghost, "h1"]
    inferred = {(e.src, e.dst) for e in topo.edges if e.inferred}
    assert inferred == {("h3", ghost), (ghost, "h1")}
    assert topo.matches_launch_order is True and any("not captured" in n for n in topo.notes)


@pytest.mark.parametrize("kind,n,expect", [("tree", 7, "tree"), ("star", 5, "star"), ("mesh", 6, "mesh")])
def test_other_shapes(tmp_path, kind, n, expect):
    topo = _topo(synth.build(kind, tmp_path / kind, n, iterations=2))
    assert topo.kind == expect and topo.confidence >= 0.9
    assert topo.direction is None and topo.matches_launch_order is None
    if kind == "star":
        assert topo.order[0] == "h0" and len(topo.edges) == 2 * (n - 1)
    if kind == "mesh":
        assert len(topo.edges) == n * (n - 1)


def _edges(pairs, nbytes=1000):
    return pd.DataFrame(
        {
            "src": [a for a, _ in pairs],
            "dst": [b for _, b in pairs],
            "bytes": nbytes,
            "payload_bytes": nbytes,
            "flows": 1,
            "start_ns": 0,
            "end_ns": 1,
            "inferred": False,
        }
    )


def test_bidirectional_ring_and_unknown():
    hosts = ["a", "b", "c", "d"]
    ring = [(hosts[i], hosts[(i + 1) % 4]) for i in range(4)]
    both = _edges(ring + [(b, a) for a, b in ring])
    topo = classify(both, hosts, {}, ["a", "b", "c", "d"])
    assert topo.kind == "bidirectional_ring" and topo.direction == "both"
    assert topo.order == ["a", "b", "c", "d"] and topo.matches_launch_order is True
    assert topo.confidence < 0.01 and any("control traffic" in n for n in topo.notes)  # 8 kB in all
    odd = _edges([("a", "b"), ("b", "c"), ("c", "a"), ("a", "d")])
    assert classify(odd, hosts, {}).kind == "unknown"
    assert classify(_edges([]), hosts, {}).kind == "unknown"


def test_light_edges_are_not_the_shape():
    pairs = [("a", "b"), ("b", "c"), ("c", "a")]
    e = pd.concat([_edges(pairs, 10_000_000), _edges([("b", "a"), ("c", "b"), ("a", "c")], 50_000)])
    topo = classify(e, ["a", "b", "c"], {})
    assert topo.kind == "ring" and topo.order == ["a", "b", "c"] and len(topo.edges) == 3


def test_nccl_double_binary_tree():
    # NCCL trees.cc, worked by hand for 4 ranks: tree 0 is 0-2, 2-1, 2-3; the mirror tree is 3-1, 1-2, 1-0
    assert [nccl_btree(4, r) for r in range(4)] == [(-1, -1, 2), (2, -1, -1), (0, 1, 3), (2, -1, -1)]
    pairs = {frozenset(p) for p in [(0, 2), (1, 2), (2, 3), (1, 3), (0, 1)]}
    assert nccl_dtree_pairs(4) == pairs
    hosts = ["w", "x", "y", "z"]
    e = _edges([(hosts[a], hosts[b]) for p in pairs for a, b in (tuple(p), tuple(p)[::-1])])
    topo = classify(e, hosts, {}, hosts)
    assert topo.kind == "double_binary_tree" and any("exactly NCCL" in n for n in topo.notes)


def test_address_hosts_from_result_hosts():
    from analyze.collective.topology import host_edges
    from analyze.tables.hosts import address_hosts

    hosts = [SimpleNamespace(name="a", addresses=["10.0.0.1"]), SimpleNamespace(name="b", addresses=["10.0.0.2"])]
    amap = address_hosts(hosts)
    flows = pd.DataFrame(
        {
            "flow_id": [0, 1, 2, 3],
            "src": ["10.0.0.1", "10.0.0.1", "10.0.0.9", "10.0.0.1"],
            "dst": ["10.0.0.2", "10.0.0.2", "10.0.0.8", "10.0.0.1"],
            "bytes": [5, 7, 100, 3],
            "payload_bytes": [1, 2, 3, 4],
            "start_ns": [3, 1, 0, 0],
            "end_ns": [4, 9, 1, 1],
        }
    )
    e = host_edges(flows, amap)
    # both sockets summed into one host pair; uncaptured-to-uncaptured and host-internal flows left out
    assert e.to_dict("records") == [
        {
            "src": "a",
            "dst": "b",
            "bytes": 12,
            "payload_bytes": 3,
            "flows": 2,
            "start_ns": 1,
            "end_ns": 9,
            "inferred": False,
        }
    ]


@pytest.mark.parametrize("kind,n,missing", [("ring", 5, 2), ("star", 4, None), ("tree", 5, None)])
def test_keys_match_result_schema(tmp_path, kind, n, missing):
    jsonschema = require_module("jsonschema")
    from analyze.model.result import SCHEMA_PATH

    assert SCHEMA_PATH.is_file(), SCHEMA_PATH
    import json

    res = analyze([synth.build(kind, tmp_path / kind, n, iterations=2, missing=missing)], workers=1, gradient_bytes=1e6)
    jsonschema.validate(json.loads(json.dumps(res.to_json(), allow_nan=False)), json.loads(SCHEMA_PATH.read_text()))

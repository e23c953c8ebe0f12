"""Recursive halving: gloo's ReduceScatterHalvingDoubling, which Horovod's hvd.reducescatter runs over gloo
(analyze/collective/halving.py). The shape from host pairs' bytes (worked by hand), and live: Horovod on 8 hosts in
network namespaces reduce-scattering its gradients each step (capture/workloads/horovod_train.py --collective
reducescatter), the ranks' own records as truth, no markers given to the analyzer."""

from __future__ import annotations


import pandas as pd

from analyze.api import analyze
from analyze.collective.halving import hypercube, settled, halving_pattern
from analyze.collective.topology import classify
from analyze.confidence.thresholds import CONFIDENT
from reports.text import summary_text
from tests.collective.test_horovod_e2e import require_horovod
from tests.support.netns import netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.pcap_bytes import worst_host_bytes_error
from tests.support.training_capture import Job, sure_in_one_of_two

S = 8_000_000


def _halving(n: int, s: float = S, skew: float = 1.0, swaps: bool = True) -> dict[tuple[str, str], float]:
    """Each of N ranks' sends (rank r on host h{r}) as gloo's ReduceScatterHalvingDoubling makes them: at step k
    S/2^(k+1) to the rank differing in bit k (SKEW: the first step's bytes times this), then, with SWAPS, S/N to
    the rank whose number is r's bits reversed, where that is another rank."""
    bits = n.bit_length() - 1
    out = {}
    for r in range(n):
        for bit in range(bits):
            out[(f"h{r}", f"h{r ^ (1 << bit)}")] = s / 2 ** (bit + 1) * (skew if bit == 0 else 1.0)
        mirror = int(format(r, f"0{bits}b")[::-1], 2)
        if swaps and mirror != r:
            out[(f"h{r}", f"h{mirror}")] = s / n
    return out


def _edges(pairs: dict[tuple[str, str], float]) -> pd.DataFrame:
    rows = [(s, d, int(b), int(b), 1, 0, 1, False) for (s, d), b in pairs.items()]
    cols = ["src", "dst", "bytes", "payload_bytes", "flows", "start_ns", "end_ns", "inferred"]
    return pd.DataFrame(rows, columns=cols).sort_values("bytes", ascending=False, ignore_index=True)


def test_the_halving_shape_from_the_pairs_bytes():
    cube = hypercube(_halving(8))
    assert cube is not None and cube["confidence"] == 1.0 and cube["ratios"] == [2.0, 2.0]
    # the swaps after the halving (rank 1 with 4, 3 with 6) say which host is rank 0: the order is the ranks'
    assert cube["order"] == [f"h{r}" for r in range(8)] and cube["swaps"] == [("h1", "h4"), ("h3", "h6")]
    for bit, pairs in enumerate(cube["classes"]):  # each step pairs ranks differing in its bit
        assert sorted(pairs) == sorted({tuple(sorted((f"h{r}", f"h{r ^ (1 << bit)}"))) for r in range(8)}), bit
    assert hypercube(_halving(16))["order"] == [f"h{r}" for r in range(16)]
    assert len(hypercube(_halving(16))["swaps"]) == 6 and hypercube(_halving(16))["ratios"] == [2.0, 2.0, 2.0]
    plain = hypercube(_halving(8, swaps=False), start="h5")  # no swaps: numbered from the first launched
    assert plain is not None and plain["order"][0] == "h5" and plain["swaps"] == []
    assert hypercube(_halving(8, skew=1.2))["confidence"] < CONFIDENT  # 2.4:1 then 2:1: fits, unsure
    assert hypercube(_halving(8, skew=3.0)) is None  # 6:1 is no halving
    assert hypercube(_halving(4)) is None  # a cycle of four: also two pipeline stages (module docstring)
    assert hypercube({p: S / 4 for p in _halving(8)}) is None  # the same pairs carrying alike: no steps
    assert hypercube({p: b for p, b in _halving(8).items() if p[0] < p[1]}) is None  # one way only
    wrong = dict(_halving(8))
    wrong[("h0", "h7")] = wrong[("h7", "h0")] = S / 8  # a pair beyond the swaps
    assert hypercube(wrong) is None


def test_the_shape_is_named_and_its_theory_settled_by_s():
    topo = classify(_edges(_halving(8)), [f"h{r}" for r in range(8)], {})
    assert topo.kind == "halving_doubling" and topo.confidence >= CONFIDENT, topo
    assert topo.order == [f"h{r}" for r in range(8)] and len(topo.edges) == 28  # 24 cube edges, 2 swaps each way
    assert any("2 pairs then swap blocks into rank order" in n for n in topo.notes), topo.notes
    pattern = halving_pattern(8)
    assert pattern.kind == "reduce_scatter" and pattern.factor == 7 / 8 and pattern.confidence < CONFIDENT
    assert settled(pattern, 1.002, 8).confidence == 1.0 and settled(pattern, 1.002, 8).kind == "reduce_scatter"
    doubled = settled(pattern, 2.004, 8)  # an all-reduce that doubles back over the same pairs
    assert doubled.kind == "halving_doubling_allreduce" and doubled.factor == 2 * 7 / 8 and doubled.confidence == 1.0
    assert settled(pattern, 1.5, 8) is pattern and settled(pattern, None, 8) is pattern


def test_horovod_reduce_scatter_on_eight_hosts(tmp_path, netns_cluster):  # noqa: F811
    """Eight ranks on eight hosts reduce-scatter 4 MB of gradients a step: three steps of halving, each pairing
    every host once, then the swaps. The shape is named, sure, in the ranks' order; without S the pattern is half
    sure (an all-reduce that doubles back would carry twice) and so is S; with the ranks' S given, the pattern is
    settled and S read within 3 %. The count comes out right, but on these two cores unsure (0.0-0.07 on three
    captures): eight ranks' Horovod threads share them, and the independent pairs of a step start up to a whole
    step apart, where the count's check expects the same offset between edges every iteration; each host's bytes
    per iteration are checked against dpkt's where the windows are sure. One CI run of the whole suite read a
    capture as an unsure tree (not NCCL's), another the right shape at 0.6: an unsure shape, right or not, gets another
    capture, a sure wrong one fails."""
    require_horovod()
    job = Job(workload="horovod", hosts=8, iters=12, params=1_000_000, batch=8, collective="reducescatter")
    sure_in_one_of_two(tmp_path, netns_cluster, job, _reduce_scatter)


def _reduce_scatter(run, truth) -> bool | str:
    """True where the shape was sure and every check held; why not, where the shape was unsure."""
    assert {s.get("collective") for s in truth["steps"]} == {"reducescatter"}
    s = truth["gradient_bytes"]
    for given in (None, s):
        r = analyze([run], workers=1, byte_mode="payload", gradient_bytes=given)
        topo, its = r.topology, r.iterations
        pairs = {(e.src, e.dst): e.bytes for e in topo.edges}
        if topo.kind != "halving_doubling":
            assert topo.confidence < CONFIDENT, (topo.kind, topo.confidence, topo.notes, pairs)
            return f"{topo.kind} at {topo.confidence:.2f}: {topo.notes}; pairs {pairs}"
        if topo.confidence < CONFIDENT:  # named right but unsure (0.6 in a CI run): another capture
            return f"{topo.kind} at {topo.confidence:.2f}: {topo.notes}"
        assert topo.order == truth["launch_order"], topo.order  # rank r on the r-th host horovodrun was given
        assert its.count == 12 or not its.confident, (its.count, its.confidence, its.evidence)
        assert its.ring_size == 8 and its.pattern.kind == "reduce_scatter", its.pattern
        assert its.pattern.confidence == (1.0 if given else 0.5), its.pattern
        assert abs(its.implied_gradient_bytes / s - 1) <= 0.03, (its.implied_gradient_bytes, s)
        sure = (its.implied_gradient_bytes_confidence or 0.0) >= CONFIDENT
        assert given or not sure, its.notes  # a reduce-scatter or an all-reduce: S unsure until given
        assert r.scaling is None and r.link_bound is not None  # not the ring model: the link bounds
        assert r.verdict.answer == "unclear" or (its.confident and sure), r.verdict
        assert "reduce-scatter by recursive halving" in summary_text(r)
    if its.confident:  # each host's bytes per iteration against dpkt's count over the windows it is sure of
        worst, per_host = worst_host_bytes_error(run, its, truth)
        assert worst <= 0.02, per_host
    return True

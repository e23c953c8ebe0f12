"""Iterations found in the bytes (analyze.collective.staircase), on synthetic ring traffic whose iteration count is
fixed before the series is made: forward-pass pauses, bucket all-reduces with waits between them, step-time
jitter, chatter, a long rendezvous and a parameter broadcast before training, teardown after it, re-sent
bytes, and per-host clock offsets. The property that matters: every answer given with confidence at or above
CONFIDENT is right. A second test keeps that from holding vacuously: clean cases must come out confident."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from analyze.confidence.thresholds import CONFIDENT
from analyze.collective.staircase import EdgeSeries, _untested_longer, infer, pauses

BIN = 10_000_000
LINE = 1_250_000.0  # bytes per 10 ms bin at 1 Gbit/s


@dataclass
class Job:
    iters: int = 12
    edges: int = 4
    bytes_per_iteration: float = 15e6
    buckets: tuple[float, ...] = (0.5, 0.5)  # shares of an iteration's bytes, in all-reduce order
    forward_bins: int = 20  # the pause between iterations
    bucket_wait_bins: int = 6  # the pause before every bucket but the first
    jitter: float = 0.2  # pauses vary by up to this share
    resent: float = 0.0  # mean share of bytes sent twice (a lossy link), varying per iteration
    chatter: float = 0.0  # bytes per idle bin (control traffic) as a share of the line rate
    rendezvous_bins: int = 0  # a long idle start with a trickle
    setup: float = 0.0  # bytes before iteration 0 on the first edge (a parameter broadcast), share of B
    teardown_bins: int = 5
    seed: int = 0


def make(job: Job) -> list[EdgeSeries]:
    """Every edge carries the same iterations (ring steps are lockstep), each on its own capture clock."""
    rng = np.random.default_rng(job.seed)
    shape: list[tuple[str, float]] = []  # ("pause", bins) or ("send", bytes) shared by all edges
    for k in range(job.iters):
        shape.append(("pause", job.forward_bins * (1 + job.jitter * rng.uniform(-1, 1))))
        extra = 1 + max(0.0, job.resent * rng.uniform(0, 2))
        for i, share in enumerate(job.buckets):
            if i:
                shape.append(("pause", job.bucket_wait_bins * (1 + job.jitter * rng.uniform(-1, 1))))
            shape.append(("send", share * job.bytes_per_iteration * extra))
    out = []
    for e in range(job.edges):
        parts: list[np.ndarray] = []
        if job.rendezvous_bins:
            parts.append(np.where(rng.random(job.rendezvous_bins) < 0.3, 400.0, 0.0))
        if job.setup and e == 0:
            parts += [_send(job.setup * job.bytes_per_iteration, rng), np.zeros(3)]
        for kind, amount in shape:
            if kind == "pause":
                n = int(round(amount))
                parts.append(np.where(rng.random(n) < 0.5, job.chatter * LINE, 0.0))
            else:
                parts.append(_send(amount, rng))
        parts += [np.zeros(job.teardown_bins), np.array([300.0])]
        dense = np.concatenate(parts)
        t = np.nonzero(dense > 0)[0]
        offset = int(rng.integers(-10, 11)) * BIN + 1_000_000_000_000  # this host's clock
        out.append(EdgeSeries(f"h{e}", f"h{(e + 1) % job.edges}", f"h{e}", offset + t * BIN, dense[t].astype(np.int64)))
    return out


def _send(nbytes: float, rng: np.random.Generator) -> np.ndarray:
    """Bytes at near line rate, the last bin partly filled."""
    full = int(nbytes // LINE)
    rate = LINE * rng.uniform(0.9, 1.0, full)
    return np.concatenate([rate, [nbytes - rate.sum()]]) if nbytes > rate.sum() else rate


def test_ddp_like_two_equal_buckets_is_not_two_iterations():
    """Two equal buckets put a pause at half an iteration's bytes: the comb lines up at B/2 as well as at B.
    The forward pass is longer than the bucket wait, so the teeth at B/2 alternate and B wins."""
    st_ = infer(make(Job()), BIN)
    assert st_.count == 12 and st_.confidence >= CONFIDENT
    assert st_.period_bytes == pytest.approx(15e6, rel=0.01)


def test_horovod_like_many_fused_buckets():
    st_ = infer(
        make(
            Job(
                buckets=(0.1, 0.15, 0.05, 0.2, 0.1, 0.1, 0.3),
                bucket_wait_bins=3,
                chatter=0.002,
                rendezvous_bins=1500,
                iters=15,
            )
        ),
        BIN,
    )
    assert st_.count == 15 and st_.confidence >= CONFIDENT


def test_setup_and_teardown_are_no_iterations():
    st_ = infer(make(Job(setup=0.67, rendezvous_bins=300)), BIN)
    assert st_.count == 12
    assert all(len(e.cut_ns) == 13 for e in st_.edges)


def test_each_edge_is_cut_on_its_own_clock():
    edges = make(Job(seed=3))
    shifted = [EdgeSeries(e.src, e.dst, e.view, e.t_ns + k * 37_000_000, e.nbytes) for k, e in enumerate(edges)]
    a, b = infer(edges, BIN), infer(shifted, BIN)
    assert a.count == b.count == 12
    for k, (ea, eb) in enumerate(zip(a.edges, b.edges)):
        # the same teeth, each edge's boundaries moved with its own clock (to the bin the shift rounds to)
        assert np.array_equal(ea.bytes_per_iteration, eb.bytes_per_iteration)


def test_network_bound_without_bucket_waits():
    """Communication fills nearly the whole step: one bucket queue, a 2-bin forward pass."""
    st_ = infer(make(Job(buckets=(1.0,), forward_bins=2, jitter=0.4, iters=8)), BIN)
    assert st_.count == 8 and st_.confidence >= CONFIDENT


def test_lossy_link_is_right_or_says_it_is_unsure():
    st_ = infer(make(Job(resent=0.07, seed=5)), BIN)
    assert st_.count == 12 or st_.confidence < CONFIDENT


def test_count_anchor_and_bytes_anchor():
    edges = make(Job(seed=7))
    assert infer(edges, BIN, count_hint=12).count == 12
    assert infer(edges, BIN, bytes_hint=(14.7e6, 18.75e6)).count == 12


def test_one_long_stall_is_not_a_period_as_long_as_the_run():
    """An edge whose set-up added steps (13 teeth where the count is 12) and one stall 100 times the others
    after its second (Horovod on loaded cores: 376 and 506 bins, its first step 8 s long): at m = 12 that tooth
    is a class seen once, standing out by hundreds of spreads. A period as long as the run cannot repeat in it:
    not weighed (it left three of five right readings of 12 at 0.00)."""
    rng = np.random.default_rng(0)
    parts = [np.array([500.0])]
    for k in range(14):
        parts += [np.zeros(500 if k == 2 else 4 + int(rng.integers(0, 2))), _send(15e6, rng)]
    dense = np.concatenate([*parts, np.zeros(5), np.array([500.0])])
    t = np.nonzero(dense > 0)[0]
    p = pauses(EdgeSeries("a", "b", "a", 10**12 + t * BIN, dense[t].astype(np.int64)), BIN)
    assert p is not None
    assert _untested_longer([p], 15e6, 12) == 0.0
    assert _untested_longer([p], 15e6, 6) == 0.0  # of six: m = 6 the whole run again, m = 2, 3 one tooth of many


def test_a_pause_a_little_longer_is_no_longer_period():
    """Six steps of gloo on a loaded machine: five 300 ms pauses alike to a bin and one 1.5 % longer, read at 0.5 ms
    bins (600 bins a pause). At m = 3 that tooth is a class of its own, 18 half-bin spreads above the rest: a longer
    period not ruled out, the count 0.00 at 0.5 and 1 ms and sure at 2 ms. Measured against 2 % of the tooth, it is
    under one spread at every bin, and the synthetic longer periods (15 % and more) still stand out."""
    rng = np.random.default_rng(0)
    parts = [np.array([500.0])]
    for k in range(6):
        parts += [np.zeros(609 if k == 3 else 600), _send(15e6, rng)]
    dense = np.concatenate([*parts, np.zeros(5), np.array([500.0])])
    t = np.nonzero(dense > 0)[0]
    p = pauses(EdgeSeries("a", "b", "a", 10**12 + t * BIN, dense[t].astype(np.int64)), BIN)
    assert p is not None
    assert _untested_longer([p], 15e6, 6) == 0.0


def test_no_pauses_no_answer():
    flat = [EdgeSeries("a", "b", "a", np.arange(500) * BIN, np.full(500, 1_000_000))]
    st_ = infer(flat, BIN)
    assert st_.count == 0 and st_.confidence == 0.0


def test_absurd_span_is_read_on_coarser_bins():
    """A stray timestamp decades away must not size a dense array by the span."""
    e = make(Job(iters=4, edges=1))[0]
    far = EdgeSeries(
        e.src, e.dst, e.view, np.append(e.t_ns, e.t_ns[-1] + 40 * 365 * 86_400 * 10**9), np.append(e.nbytes, 100)
    )
    p = pauses(far, BIN)
    assert p is not None and len(p.cum) <= (1 << 22) + 1


JOBS = st.builds(
    Job,
    iters=st.integers(2, 30),
    edges=st.integers(2, 6),  # a ring has at least two; the set-up below rides on one of them
    bytes_per_iteration=st.floats(2e6, 40e6),
    buckets=st.lists(st.floats(0.05, 1.0), min_size=1, max_size=9).map(lambda v: tuple(x / sum(v) for x in v)),
    forward_bins=st.integers(1, 60),
    bucket_wait_bins=st.integers(0, 40),
    jitter=st.floats(0.0, 0.8),
    resent=st.sampled_from([0.0, 0.0, 0.01, 0.07]),
    chatter=st.sampled_from([0.0, 0.001, 0.02]),
    rendezvous_bins=st.sampled_from([0, 0, 200, 1500]),
    setup=st.sampled_from([0.0, 0.3, 0.67, 1.0]),
    teardown_bins=st.integers(1, 30),
    seed=st.integers(0, 10**6),
)


def _found(iters: int, buckets: list[float], forward: int, wait: int, nbytes: float = 2e6) -> Job:
    """A job the property once caught (a confident, wrong count), kept as a fixed example."""
    return Job(
        iters=iters,
        edges=2,
        bytes_per_iteration=nbytes,
        buckets=tuple(x / sum(buckets) for x in buckets),
        forward_bins=forward,
        bucket_wait_bins=wait,
        jitter=0.0,
        resent=0.0,
        chatter=0.0,
        rendezvous_bins=0,
        setup=0.0,
        teardown_bins=1,
        seed=0,
    )


# derandomized: the same 200 jobs on every run, so a red run is a regression, not a draw (1,500 random jobs found
# the one left below, a known limit, now and then; run with more examples when changing the staircase)
@settings(max_examples=200, deadline=None, derandomize=True)
@given(JOBS)
@example(_found(2, [1, 1, 1], 1, 5))  # a light class of pauses, two rounds: too few to test the classes
@example(_found(2, [1, 1], 22, 19))  # a heavier class by 3 bins in 3 teeth
@example(_found(8, [1, 1], 9, 6))  # 9 vs 6 bins: no 1.5x, yet clear
@example(_found(6, [0.25, 0.25, 1.0, 0.5625, 0.25, 0.4375, 0.25, 0.3125, 0.875], 1, 1, 37947195.0))  # a pause half way
@example(_found(2, [4, 7, 11], 4, 4))  # pauses at 0.18, 0.5 and 1 of the iteration: a comb at half fits two
@example(_found(2, [0.59375, 0.1875, 0.75, 0.0625], 1, 1, 8116958.0))  # halves of 0.49 and 0.51: read as four
@example(_found(2, [0.75, 0.578125, 0.1875, 0.125], 1, 1, 7094595.0))  # the same family
@example(_found(2, [0.365, 0.114, 0.487, 0.033], 1, 0, 33777294.0))  # halves 0.48 and 0.52 on one edge only
def test_every_confident_answer_is_right(job):
    """Random jobs, harmonics and pathologies included (bucket waits longer than the forward pass, a setup
    broadcast of exactly one iteration's bytes, few iterations): a confident count is the true count. Left
    out: jobs whose iteration is m identical parts (equal buckets, the bucket wait as long as the forward
    pass), which no observer of the traffic can tell from m times as many iterations. With one edge only, a
    set-up transfer of exactly one iteration's bytes could not be told from an iteration either: the set-up
    rides on the first edge alone, and the others disagree."""
    equal_parts = len(job.buckets) > 1 and max(job.buckets) - min(job.buckets) <= 0.05 * max(job.buckets)
    assume(not (equal_parts and abs(job.forward_bins - job.bucket_wait_bins) <= job.jitter * job.forward_bins + 2))
    st_ = infer(make(job), BIN)
    if st_.confidence >= CONFIDENT:
        assert st_.count == job.iters, (st_.count, st_.confidence, st_.evidence)


@pytest.mark.xfail(strict=True, reason="a known limit: three iterations whose pauses split them in like halves")
def test_three_iterations_of_like_halves_are_not_told_from_six():
    """Three iterations of nine buckets whose pauses, at this bin width, fall at 0.12, 0.37, 0.47, 0.62, 0.74 and
    0.97 of the iteration, the heavy ones (merged with a short bucket) at 0.12, 0.47 and 0.97: a period of half
    an iteration brings back all but the two light pauses at 0.37 and 0.74, and the whole one only does a little
    better (0.83 against 0.88 of the pause weight), too little to tell from the noise of real runs' pauses. Read
    as six at 0.97 (0.94 before the halves were asked of the same pauses). Kept here so a fix shows."""
    job = _found(3, [0.5, 0.0625, 1.0, 0.4375, 0.125, 0.5, 0.5, 1.0, 0.125], 1, 1)
    st_ = infer(make(job), BIN)
    assert st_.count == job.iters or st_.confidence < CONFIDENT, (st_.count, st_.confidence)


def test_clean_jobs_are_confident():
    """The property above would hold for a tool that is never sure: on jobs whose forward pass stands out,
    at least 90 % of answers must be confident (and so right)."""
    rng = np.random.default_rng(1)
    sure = 0
    for seed in range(60):
        job = Job(
            iters=int(rng.integers(5, 30)),
            edges=int(rng.integers(2, 6)),
            forward_bins=int(rng.integers(8, 40)),
            bucket_wait_bins=int(rng.integers(0, 5)),
            buckets=(0.3, 0.7),
            jitter=0.3,
            seed=seed,
        )
        st_ = infer(make(job), BIN)
        sure += st_.confidence >= CONFIDENT and st_.count == job.iters
    assert sure >= 54, f"{sure} of 60"


def test_two_byte_classes_are_read_apart():
    """SHARD_GRAD_OP-like: two edges carry twice the bytes per iteration of the other two (one all-gather one way,
    the all-reduce the other). One period in bytes cannot fit both; read class by class, each finds the 12."""
    light = make(Job(edges=2, bytes_per_iteration=5e6, buckets=(1.0,), seed=11))
    heavy = [
        EdgeSeries(f"g{k}", f"g{k + 1}", f"g{k}", e.t_ns, e.nbytes)
        for k, e in enumerate(make(Job(edges=2, bytes_per_iteration=10e6, buckets=(1.0,), seed=12)))
    ]
    st_ = infer(light + heavy, BIN)
    assert st_.count == 12 and st_.confidence >= CONFIDENT, (st_.count, st_.confidence, st_.notes)
    assert "2 byte classes" in st_.notes[0] and len(st_.edges) == 4
    assert sorted(round(float(np.median(c.bytes_per_iteration)) / 1e6) for c in st_.edges) == [5, 5, 10, 10]


def test_one_heavier_edge_is_no_class_of_its_own():
    """A copy beside the job makes one edge heavier: no class of one edge; the edges are read together."""
    from analyze.collective.staircase import _byte_classes

    ring = make(Job(seed=4))
    copied = [EdgeSeries(e.src, e.dst, e.view, e.t_ns, e.nbytes * (3 if k == 0 else 1)) for k, e in enumerate(ring)]
    assert _byte_classes(copied) == [copied]
    halves = [EdgeSeries(e.src, e.dst, e.view, e.t_ns, e.nbytes * (2 if k >= 2 else 1)) for k, e in enumerate(ring)]
    assert [len(c) for c in _byte_classes(halves)] == [2, 2]

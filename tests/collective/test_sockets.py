"""Ring edges over several TCP connections, as NCCL's socket transport runs them (capture/workloads/socket_allreduce.py:
k data sockets plus one control socket per edge, pieces of 128 KiB dealt round-robin), captured live in network
namespaces; the truth is each rank's own record (its ring payload, its right edge's sockets by local port) and the
pacing the test applies to one socket."""

from __future__ import annotations

import pytest

from analyze.api import analyze
from analyze.confidence.thresholds import CONFIDENT
from capture.workloads.socket_allreduce import HEADER, deal
from reports.text import summary_text
from tests.support.netns import netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.pcap_bytes import worst_host_bytes_error
from tests.support.training_capture import Job, live_capture, sure_in_one_of_two


PIECE = 128 * 1024  # the workload's default


def test_pieces_are_dealt_round_robin():
    assert deal(1_000_000, 4, 131072) == [262144, 262144, 262144, 213568]  # 7 whole pieces and 82,496 bytes
    assert sum(deal(2_000_000, 3, 65536)) == 2_000_000


def _ring(run, truth, job):
    """Everything a multi-socket ring must get right: one edge per rank pair with its sockets listed, the
    ring, W, the pattern, S and each host's bytes per iteration; returns the analysis and the edges by sender."""
    alone = analyze([run], workers=1, byte_mode="payload").iterations
    # no rank-pair mesh (NCCL's way): the traffic cannot count ranks, so W is assumed and S said to be unsure
    assert not alone.ring_size_sure and alone.implied_gradient_bytes_confidence < CONFIDENT, alone.notes
    assert any("assumed one rank per host" in n for n in alone.notes), alone.notes
    r = analyze([run], workers=1, byte_mode="payload", world_size=job.hosts)  # as a user of NCCL would say
    hosts = truth["launch_order"]
    t, its = r.topology, r.iterations
    assert t.kind == "ring" and t.order[0] == hosts[0] and t.order == hosts, (t.kind, t.order, t.notes)
    assert its.ring_size == job.hosts and its.ring_size_sure, (its.ring_size, its.notes)
    assert its.count == job.iters, (its.count, its.confidence, its.evidence)  # right, sure or not (the caller)
    assert its.pattern.kind == "ring_allreduce"
    s = truth["gradient_bytes"]
    right = abs(its.implied_gradient_bytes / s - 1) <= 0.03
    assert right or its.implied_gradient_bytes_confidence < CONFIDENT, (its.implied_gradient_bytes / s, its.notes)
    for rank, host in enumerate(hosts):  # each host's bytes per iteration against what its rank sent
        mean = sum(x.bytes_by_host[host] for x in its.per_iteration[1:-1]) / (len(its.per_iteration) - 2)
        assert abs(mean / truth["bytes_sent"][rank] - 1) <= 0.02, (host, mean, truth["bytes_sent"][rank])
    edges = {e.src: e for e in r.transport.edges}
    for rank, host in enumerate(hosts):
        e = edges[host]
        assert e.dst == hosts[(rank + 1) % len(hosts)] and e.flows == job.sockets + 1
        ports = truth["right_ports"][rank]
        assert sorted(x.sport for x in e.sockets) == sorted(ports)  # every connection of the edge, listed
        step = s // job.hosts
        dealt = dict(zip(ports[1:], deal(step, job.sockets, PIECE)))
        for x in e.sockets:  # round-robin: each data socket carries its dealt share, the control socket 8 B a step
            assert abs(x.share - dealt.get(x.sport, HEADER) / (step + HEADER)) <= 0.002, (dealt, e.sockets)
    return r, edges


@pytest.mark.parametrize("sockets", [2, 4])
def test_a_ring_over_several_sockets_is_one_ring(tmp_path, netns_cluster, sockets):  # noqa: F811
    job = Job(workload="sockets", hosts=4, iters=12, params=2_000_000, sockets=sockets, order=[2, 4, 1, 3])

    def check(run, truth):
        r, edges = _ring(run, truth, job)
        assert not any(x.lags for e in edges.values() for x in e.sockets), [e.sockets for e in edges.values()]
        assert r.transport.limiter != "socket", r.transport.evidence
        worst, pairs = worst_host_bytes_error(run, r.iterations, truth)  # and against each host's capture (dpkt)
        assert worst <= 0.02, pairs
        return r.iterations.confident

    sure_in_one_of_two(tmp_path, netns_cluster, job, check)


def test_the_socket_an_edge_waits_for_is_named(tmp_path, netns_cluster):  # noqa: F811
    """Rank 1's data socket 1 paced to 50 Mbit/s (the others share 1 Gbit/s): that edge, and so the ring, waits
    for it every step. The paced socket drains its send buffer through the compute phase, so its edge shows no
    pause to cut iterations on: the count is right, sure or not (0.75 for that edge's disagreement while writing
    this; in CI 0.76, 0.77 and 0.75 in three captures of two runs): this test asks for the lagging socket, sure."""
    job = Job(
        workload="sockets",
        hosts=4,
        iters=10,
        params=2_000_000,
        sockets=4,
        slow_socket=1,
        slow_rank=1,
        order=[3, 1, 4, 2],
    )
    run, truth = live_capture(tmp_path, netns_cluster, job)
    # bytes per host against the ranks' records only: the paced host's sends lag its steps by up to its send
    # buffer, so its capture's bytes between two of the tool's cuts differed from its rank's by 2.4 % once
    r, edges = _ring(run, truth, job)
    slow_host = truth["launch_order"][1]
    slow_port = truth["right_ports"][1][1 + job.slow_socket]
    e = edges[slow_host]
    assert [x.sport for x in e.sockets if x.lags] == [slow_port], e.sockets
    assert e.limiter == "socket" and e.confidence >= 0.8, (e.limiter, e.confidence, e.evidence)
    lagging = next(x for x in e.sockets if x.lags)
    assert lagging.rate_while_busy <= 0.06  # 50 Mbit/s of 1 Gbit/s while it sends, and no faster
    for host, other in edges.items():
        if host != slow_host:
            assert not any(x.lags for x in other.sockets), (host, other.sockets)
    assert r.transport.limiter == "socket" and r.transport.confidence >= 0.8, r.transport.evidence
    assert f":{slow_port} -> " in r.transport.evidence[1]
    assert f"lagging :{slow_port} -> " in summary_text(r)


def test_nccl_fsdp_over_sockets_is_told_from_ddp_by_the_s_given(tmp_path, netns_cluster):  # noqa: F811
    """The workload run as NCCL runs FSDP's full shard: two all-gathers and a reduce-scatter per step, all one way
    round (3(W-1) ring steps), over 2 sockets per edge. Without gloo's mesh a one-way ring is DDP or this: read as
    a ring all-reduce, S (1.5 x the ranks') is unsure. With the ranks' S given (--gradient-bytes) the bytes read
    1.5 x DDP's theory: sharded data parallel over NCCL, sure, S within 3 %, and no ring what-if (the link
    bounds and the chained wire replay instead)."""
    job = Job(workload="sockets", hosts=4, iters=10, params=2_000_000, sockets=2, collective="fsdp", order=[2, 4, 1, 3])

    def check(run, truth):
        s = truth["gradient_bytes"]
        alone = analyze([run], workers=1, byte_mode="payload", world_size=job.hosts).iterations
        assert alone.pattern.kind == "ring_allreduce" and alone.pattern.confidence < CONFIDENT, alone.pattern
        assert (alone.implied_gradient_bytes_confidence or 0.0) < CONFIDENT, alone.notes
        r = analyze([run], workers=1, byte_mode="payload", world_size=job.hosts, gradient_bytes=s)
        its = r.iterations
        assert its.count == job.iters or not its.confident, (its.count, its.confidence, its.notes)
        assert its.pattern.kind == "sharded_data_parallel" and its.pattern.confidence >= CONFIDENT, its.pattern
        assert its.pattern.factor == 3 * (job.hosts - 1) / job.hosts
        assert abs(its.implied_gradient_bytes / s - 1) <= 0.03, (its.implied_gradient_bytes / s, its.notes)
        # never the ring's what-if: the link bounds, and the wire model with chained readiness beside them
        assert r.link_bound is not None and r.scaling is not None and r.scaling.wire.readiness == "chained", r.scaling
        assert "sharded data parallel over NCCL" in summary_text(r)
        return its.confident or f"{its.count} at {its.confidence}: {its.notes}"

    sure_in_one_of_two(tmp_path, netns_cluster, job, check)

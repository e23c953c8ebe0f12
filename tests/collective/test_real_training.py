"""Iterations found in real, continuous training traffic, with no markers: the shipped DDP and Horovod
workloads training without pauses, captured with tcpdump in network namespaces (tests/support/training_capture.py).

Ground truth comes from the job, not the analyzer: each rank wrote its own step start/end times and its
gradient bytes to a file outside the capture (truth.json), and the launch order was fixed before the run.
Two kinds of case:
- committed captures (fixtures/real-training/, made once by the commands in its README.md): Horovod with its
  rendezvous and continuous negotiation, a 100 Mbit link where communication fills the step, 8 hosts (and a
  partial capture of them), a lossy link with TSO off;
- live captures made here in every CI run: DDP on 4 hosts at 1 Gbit with TSO, and on 3 hosts at 500 Mbit with
  MTU 9000 and offloads off, each launched in an order that is not address order.
Each is also analyzed with its hosts' clocks moved apart (offsets up to +-100 ms, drift up to +-50 ppm,
rewritten into the pcaps): the answer must not change.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from analyze.confidence.doubt import pacing_link
from analyze.confidence.thresholds import CONFIDENT
from reports.text import summary_text
from tests.support.netns import netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.pcap_bytes import edge_data_times, packet_times
from tests.support.pcap_clock import reclocked
from tests.support.training_capture import live_capture

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "real-training"


def analyze_run(run: Path, **options):
    from analyze.api import analyze

    return analyze([run], workers=1, **options)


def steady_period(starts: list[int]) -> float:
    """The job's mean step from the second iteration on (the first carries the warm-up): the slope of a
    least-squares line through the ranks' own step starts, the definition the analyzer's period follows."""
    s = np.array(starts[1:], dtype=np.float64)
    return float(np.polyfit(np.arange(len(s)), s - s[0], 1)[0])


def check_against_truth(
    run: Path,
    truth: dict,
    *,
    confident: bool = True,
    boundary_misses: int = 0,
    period_tolerance: float = 0.02,
    edge_ends: bool = False,
) -> dict:
    """The analyzer's iterations (payload bytes) against the ranks' own record; returns the iterations key.
    boundary_misses: boundaries allowed further than a bin from the ranks' step ends (a lossy link: a
    retransmission timeout just before an iteration's last segments is a pause as long as its end's).
    edge_ends: a boundary that misses them is also allowed where one edge's data ended in its bin and stayed quiet
    up to the first rank's end, which dpkt reads from the packets: the windows are the first edge's teeth
    (analyze.collective.inference._stair_windows), and on a lossy link the other edges' resends trailed that
    edge's end by 5-11 ms at three boundaries of one CI run (2026-11-29), a limit of the windows, not the count."""
    res = analyze_run(run, byte_mode="payload")
    its, topo = res.iterations, res.topology
    n, s, steps = truth["world_size"], truth["gradient_bytes"], truth["iterations"]
    assert topo.kind == "ring", topo
    assert its.source == "inferred" and its.count == len(steps), (its.count, its.notes)
    if confident:
        assert its.confident and its.confidence >= 0.8, its.evidence
        # the what-if is sure where S is: S may be unsure on a sure count (unique and as-sent bytes disagree), and
        # then the what-if says so; so it does where one slow link paces the ring (its compute hidden)
        s_sure = (its.implied_gradient_bytes_confidence or 0.0) >= 0.8
        paced = pacing_link(res) is not None
        assert not paced or truth["job"].get("slow_host"), res.stragglers  # a slow link only where one was shaped
        assert res.scaling is None or (res.scaling.unsure is None) == (s_sure and not paced), res.scaling.unsure
    # bytes per iteration per host: the ring's 2(N-1)/N x S plus what rides on it, measured here: gloo's
    # message framing and Horovod's negotiation (0.1-0.4 %), and on a lossy link the payload re-sent
    theory = 2 * (n - 1) / n * s
    flows = res.tables.flows
    resent = flows["retransmitted_bytes"].sum() / len(res.hosts) / len(steps)
    median = its.bytes_per_iteration_per_host.median
    assert theory <= median <= 1.015 * theory + resent, (median / theory, resent / theory)
    # S from the unique bytes: what was re-sent on a lossy link is not gradient (it was +4.2 % as sent). Where the
    # unique and the as-sent bytes disagree (a sender's queue dropped first sendings before its capture saw them,
    # so not every re-sent byte went twice) S is unsure, and the truth lies between the two
    assert its.unique_bytes_per_iteration_per_host is not None
    implied = its.implied_gradient_bytes
    if its.implied_gradient_bytes_confidence >= 0.8:
        assert abs(implied / s - 1) <= 0.02, (implied / s, resent / theory)
    else:
        as_sent = median / (2 * (n - 1) / n)
        assert 0.98 * min(implied, as_sent) <= s <= 1.02 * max(implied, as_sent), (implied / s, as_sent / s)
        if its.confident:  # a sure count: S is unsure for the re-sent bytes alone, and says so
            assert any(note.startswith("S from the unique bytes") for note in its.notes), its.notes
    # boundaries: iteration k starts when iteration k-1's communication ended, i.e. between the network's last
    # packet before the first rank's own end of step k-1 and the last rank's end (the ranks share the test
    # machine's clock), within one bin: the boundary is a bin edge, so the span is taken out to its bins' edges
    # first. The span opens at that packet, not at the rank's end: a rank records its end after the reduction's
    # last copy, which on a loaded 2-core machine trailed the last packet by up to 7 ms (CI, 2026-11-28, a lossy
    # link whose retransmission timeout left the network quiet between two ranks' ends and the other two's)
    bin_ns = res.bin_ns
    ends: dict[int, list[int]] = {}
    for st in truth["steps"]:
        ends.setdefault(st["iteration"], []).append(st["end_ns"])
    packets = packet_times(run)

    def near_ends(k: int, t: int) -> bool:
        first = min(ends[k])
        before = packets[: np.searchsorted(packets, first, side="right")]
        quiet_from = int(before[-1]) if len(before) else first
        lo, hi = quiet_from // bin_ns * bin_ns, -(-max(ends[k]) // bin_ns) * bin_ns
        return lo - bin_ns <= t <= hi + bin_ns

    edge_data = edge_data_times(run) if edge_ends else {}

    def at_an_edge_end(k: int, t: int) -> bool:
        first = min(ends[k])
        for times in edge_data.values():
            before = times[: np.searchsorted(times, first, side="right")]
            if len(before) and t - bin_ns <= before[-1] <= t + bin_ns:
                return True
        return False

    missed = [
        (it.index, it.start_ns, ends[it.index - 1])
        for it in its.per_iteration[1:]
        if not near_ends(it.index - 1, it.start_ns)
    ]
    if not near_ends(len(steps) - 1, its.per_iteration[-1].end_ns):
        missed.append(("end", its.per_iteration[-1].end_ns, ends[len(steps) - 1]))

    at_edge_ends = [m for m in missed if m[0] != "end" and at_an_edge_end(m[0] - 1, m[1])]
    if at_edge_ends:
        print(json.dumps({"boundaries at an edge's end, before the ranks' ends": [m[:2] for m in at_edge_ends]}))
    assert len(missed) - len(at_edge_ends) <= boundary_misses, missed
    # the period within 2 % of the ranks' mean step. A boundary allowed to miss (a retransmission timeout's stall,
    # 0.2 s) moves the fitted period by up to 2 % over 10 iterations, two at opposite ends by 4 %: with misses, the
    # period is fitted through the boundaries that did land on the ranks' step ends, the ranks' through the same
    # iterations' starts, and held to the same tolerance (against every step's, the ranks' longer first steps were
    # held against boundaries left out: a CI run's kept ones fitted 425 ms, the same steps' ranks 422, all 454)
    truth_period = steady_period([it["start_ns"] for it in steps])
    period = its.period_ns
    if missed:
        away = {m[0] for m in missed}
        kept = [(it.index, it.start_ns) for it in its.per_iteration[1:] if it.index not in away]
        period = float(np.polyfit([k for k, _ in kept], [t - kept[0][1] for _, t in kept], 1)[0])
        ranks = [(k, steps[k]["start_ns"]) for k, _ in kept]
        truth_period = float(np.polyfit([k for k, _ in ranks], [t - ranks[0][1] for _, t in ranks], 1)[0])
    assert abs(period / truth_period - 1) <= period_tolerance, (its.period_ns, period, truth_period, missed)
    return its


def check_clock_independence(run: Path, tmp_path: Path) -> None:
    """Ring, count, bytes per iteration per host, communication time per iteration and the transport's verdict
    and counters: the same when every
    host's clock is offset and drifts. The packets land in other bins when the clock moves (37 ms is not a
    whole number of 10 ms bins), so bytes at a boundary can change sides: the median bytes per iteration per
    host must agree within 0.1 %, each iteration's within 1 % (iteration 0, which borders the set-up
    traffic, within 2 %), and the communication times within one bin."""
    a = analyze_run(run)
    b = analyze_run(reclocked(run, tmp_path / "reclocked"))
    ia, ib = a.iterations, b.iterations
    assert a.topology.order == b.topology.order
    assert ia.count == ib.count and ib.confident == ia.confident
    median = ia.bytes_per_iteration_per_host.median
    assert ib.bytes_per_iteration_per_host.median == pytest.approx(median, rel=0.001)
    for x, y in zip(ia.per_iteration, ib.per_iteration):
        for host, nbytes in x.bytes_by_host.items():
            rel = 0.02 if x.index == 0 else 0.01
            assert y.bytes_by_host[host] == pytest.approx(nbytes, rel=rel), (x.index, host)
        assert abs(x.comm_ns - y.comm_ns) <= a.bin_ns
    assert abs(ia.comm_ns_median - ib.comm_ns_median) <= a.bin_ns
    # the transport is read from each sender's own capture: its TCP counters do not move. An edge's rate while
    # sending may, by a bin's edge effects, so a verdict that sits at a threshold (an edge's confidence under
    # 0.6, the job's under 0.5, which the summary calls UNSURE) may flip between two limiters
    ta, tb = a.transport, b.transport
    assert ta.limiter == tb.limiter or max(ta.confidence, tb.confidence) < 0.5, (ta, tb)
    counters = ("src", "dst", "retransmitted_bytes", "dup_acks", "sack_acks", "window_full_fraction")
    assert [[getattr(e, k) for k in counters] for e in ta.edges] == [
        [getattr(e, k) for k in counters] for e in tb.edges
    ]
    for x, y in zip(ta.edges, tb.edges):
        assert x.limiter == y.limiter or min(x.confidence, y.confidence) < 0.6, (x, y)


CASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "truth.json").is_file()) if FIXTURES.is_dir() else []
# the analyzer must not be sure of these, and say so (their README says why)
UNSURE = {"ddp-lossy-rto": "retransmission timeouts as long as the forward pass inside most steps"}


@pytest.mark.parametrize("case", [c for c in CASES if c not in UNSURE])
def test_committed_capture(case):
    truth = json.loads((FIXTURES / case / "truth.json").read_text())
    check_against_truth(FIXTURES / case / "run", truth)


@pytest.mark.parametrize("case", sorted(UNSURE))
def test_committed_capture_it_cannot_be_sure_of(case):
    """Its what-if stays unsure (S as sent and as unique differ by its re-sent share). Its count is right or
    unsure: at the bin chosen from its traffic (1 ms) and at twice that it reads 14, sure; at 4 ms bins the
    timeouts split every step in two, and at 10 ms (the old default) it read 28, unsure."""
    res = analyze_run(FIXTURES / case / "run")
    its = res.iterations
    truth = json.loads((FIXTURES / case / "truth.json").read_text())
    assert its.count == len(truth["iterations"]) or not its.confident, (its.count, its.evidence)
    assert res.scaling.unsure.because and res.scaling.verdict.startswith("UNSURE")


# a known limit, kept visible: where a slow link keeps the ring busy through the whole step, an iteration's
# communication time is its window, whose two bin-quantized ends each move a bin with the clocks (iteration 4 of
# ddp-slow-rank-slow-link: 720 against 750 ms at 10 ms bins); count, bytes and verdicts hold
BUSY_THROUGH = {"ddp-slow-rank-slow-link": "communication time is the window: its ends move a bin with the clocks"}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.xfail(reason=BUSY_THROUGH[c], strict=True)) if c in BUSY_THROUGH else c
        for c in CASES
        if c not in UNSURE
    ],
)
def test_committed_capture_with_other_clocks(case, tmp_path):
    check_clock_independence(FIXTURES / case / "run", tmp_path)


@pytest.mark.parametrize("case", sorted(UNSURE))
def test_unsure_capture_stays_unsure_with_other_clocks(case, tmp_path):
    """Right or unsure, never confidently wrong: with its clocks moved, ddp-lossy-rto's teeth land on real pauses
    at the right count (14, confidence 0.99) since a longer period is weighed against the period in the same
    window; on its own clocks the count is 28 and unsure."""
    its = analyze_run(reclocked(FIXTURES / case / "run", tmp_path / "reclocked")).iterations
    truth = json.loads((FIXTURES / case / "truth.json").read_text())
    assert not its.confident or its.count == len(truth["iterations"]), (its.count, its.evidence)


def test_the_fixtures_are_there():
    assert {"horovod-3h", "ddp-100mbit", "ddp-8h", "ddp-lossy-rto"} <= set(CASES)


def test_partial_capture_of_eight_hosts(tmp_path):
    """One host's capture missing: its edges are seen from the other side only; the count still holds."""
    truth = json.loads((FIXTURES / "ddp-8h" / "truth.json").read_text())
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "ddp-8h" / "run", run)
    shutil.rmtree(run / truth["launch_order"][3])
    its = analyze_run(run).iterations
    assert its.count == len(truth["iterations"]) and its.confident, its.notes


@pytest.mark.parametrize("dropped", [("h1", "h3"), ("h6", "h3")])
def test_peers_without_a_capture_are_still_peers(tmp_path, dropped):
    """Two of eight hosts' captures lost (issue 45): the ring is still a ring of eight, its uncaptured peers in
    their launch-order places, W = 8 from the connections the others hold, and the count as sure as before. h1 and
    h3 are not neighbours in the ring, so every edge has a captured end; h6 sends to h3, an edge no capture holds:
    the ring is closed over it by inference, and says so at a lower confidence."""
    truth = json.loads((FIXTURES / "ddp-8h" / "truth.json").read_text())
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "ddp-8h" / "run", run)
    address = {}
    for host in dropped:
        address[json.loads((run / host / "meta.json").read_text())["addresses"][0]] = host
        shutil.rmtree(run / host)
    r = analyze_run(run)
    topo, its = r.topology, r.iterations
    assert topo.kind == "ring" and len(topo.order) == 8 and topo.confidence >= CONFIDENT, topo.notes
    assert topo.matches_launch_order is True and topo.direction == "against_launch_order"
    launch = truth["launch_order"]  # gloo's ring: rank r sends to rank r - 1
    assert [address.get(h, h) for h in topo.order] == [launch[0], *launch[:0:-1]], topo.order
    placed = next(n for n in topo.notes if n.startswith("uncaptured peers in the launch order's places"))
    assert all(f"{a} is {h}" in placed for a, h in address.items()), placed
    closed = [n for n in topo.notes if "closed there by inference" in n]
    assert bool(closed) is (dropped == ("h6", "h3"))
    assert topo.confidence <= 0.91 if closed else topo.confidence == 1.0  # UNSEEN_EDGE: 0.9 of what it was
    assert its.ring_size == 8 and its.ring_size_source != "assumed", (its.ring_size, its.ring_size_source)
    assert its.count == len(truth["iterations"]) and its.confident, its.notes
    assert any("2 of 8 launched host(s) have no capture" in w for w in r.warnings), r.warnings
    assert "2 peer(s) not captured" in summary_text(r)


def test_anchors_are_checked_not_obeyed():
    truth = json.loads((FIXTURES / "ddp-100mbit" / "truth.json").read_text())
    run, count, s = FIXTURES / "ddp-100mbit" / "run", len(truth["iterations"]), truth["gradient_bytes"]
    agree = analyze_run(run, iterations=count, gradient_bytes=s).iterations
    assert agree.count == count and agree.confidence >= 0.95
    wrong = analyze_run(run, iterations=count + 3)
    its = wrong.iterations
    assert its.count == count and its.confidence <= 0.5
    assert any(n.startswith("DISAGREEMENT: --iterations") for n in its.notes)
    assert wrong.scaling.unsure.because
    # twice the gradient: every other step would fit it, and the traffic's own count disagrees
    bad_s = analyze_run(run, gradient_bytes=2 * s).iterations
    assert any(n.startswith("DISAGREEMENT") for n in bad_s.notes) and not bad_s.confident
    assert bad_s.count == count


def test_unsure_summary_says_so_first(tmp_path):
    """The terminal summary of an unsure case: the what-if's first line says UNSURE and why, no conclusion
    follows as fact, and what would make it sure is named."""
    from tests.support.clirun import ringscope

    run = FIXTURES / "ddp-100mbit" / "run"
    done = ringscope("analyze", run, "--iterations", "11", "--workers", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("what-if"))
    assert "UNSURE" in lines[start] and "confidence" in lines[start]
    block = "\n".join(lines[start : lines.index("", start)])
    assert "network is the bottleneck" not in block and "compression would reach" not in block
    assert "--iterations N" in block and "--gradient-bytes S" in block and "markers" in block
    assert "UNSURE, a guess" in next(line for line in lines if line.startswith("iterations:"))


def test_whatif_on_an_unsure_result_says_so_first(tmp_path):
    """`ringscope whatif RESULT.json` obeys the same doubt as analyze: UNSURE on the line after its header."""
    from tests.support.clirun import ringscope

    out = tmp_path / "unsure.json"
    assert ringscope("analyze", FIXTURES / "ddp-lossy-rto" / "run", "--json", out, "--workers", "1").returncode == 0
    done = ringscope("whatif", out)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("UNSURE: ")  # its S: the re-sent share (its count is sure at the chosen bin)
    assert lines[-1].startswith("UNSURE: ") and "--iterations N" in lines[-1]


# ---- live: real DDP training in namespaces, in every CI run ------------------------------------------


def check_lossy(run: Path, truth: dict) -> None:
    """A lossy link: how often a retransmission timeout (as long as a forward pass) stalls it differs run to
    run. A confident answer must pass every check, with two boundaries allowed on such a stall (which also
    moves the fitted period by up to 3 % over 10 iterations); an unsure answer must say so (seen: the DDP
    case unsure in 2 runs of 3, the gloo loop right in 5 of 6 and once unsure-or-wrong at half the period)."""
    res = analyze_run(run)
    its = res.iterations
    resent = int(res.tables.flows["retransmitted_bytes"].sum())
    print(
        json.dumps(
            {
                "count": its.count,
                "truth": len(truth["iterations"]),
                "confidence": its.confidence,
                "evidence": its.evidence,
                "resent": resent,
            }
        )
    )
    if its.confident:
        assert its.count == len(truth["iterations"]), its.count
        # the payload-mode reading the checks use may be less sure (0.76 once; 0.0 and 122 counted once in CI,
        # where the unique bytes lost the pauses' rhythm): checked against the truth where it is sure itself
        if analyze_run(run, byte_mode="payload").iterations.confident:
            # where the stalls outnumber the steps, every step holds pauses as long as its own and which one the
            # staircase cuts at is not fixed by the bytes (21 and 27 stalls in two 10-step CI runs, 2026-11-29, four
            # boundaries a stall away in the second): the boundaries are then not held one by one, the count and the
            # period are
            stalled = stalls(run, truth)
            misses = 2 if stalled <= len(truth["iterations"]) else len(truth["iterations"])
            print(json.dumps({"stalls": stalled, "boundary misses allowed": misses}))
            check_against_truth(
                run, truth, confident=False, boundary_misses=misses, period_tolerance=0.03, edge_ends=True
            )
    else:
        assert res.scaling.unsure.because
    assert res.transport.limiter == "loss", res.transport.evidence


# a network-wide silence this long, not at the ranks' step ends, is a retransmission timeout's stall (Linux's RTO is
# 200 ms at least), as long as the gloo loop's own pause
STALL_NS = 100_000_000


def stalls(run: Path, truth: dict) -> int:
    """How many network-wide silences of STALL_NS or more began away from every step's ends (dpkt, all hosts'
    pcaps): retransmission timeouts' stalls. The loop's own pause begins between a step's first and last rank's end."""
    packets = packet_times(run)
    ends: dict[int, list[int]] = {}
    for st in truth["steps"]:
        ends.setdefault(st["iteration"], []).append(st["end_ns"])
    first = np.array([min(v) for v in ends.values()]) - 20_000_000
    last = np.array([max(v) for v in ends.values()]) + 20_000_000
    starts = packets[:-1][np.diff(packets) >= STALL_NS]
    return int(sum(not ((t >= first) & (t <= last)).any() for t in starts))


# a tbf queue of 0.5 ms with a 16 kB burst, offloads off: it overflows under the ring's bursts
LOSSY = {"rate": "1gbit", "qdisc": "tbf", "latency": "0.5ms", "burst": "16kb", "offloads": False}


def test_live_ddp_four_hosts_gigabit(tmp_path, netns_cluster):  # noqa: F811
    from tests.support.training_capture import Job

    job = Job(workload="ddp", hosts=4, rate="1gbit", iters=15, batch=128, order=[3, 1, 4, 2])
    run, truth = live_capture(tmp_path, netns_cluster, job)
    its = check_against_truth(run, truth, confident=False)
    print(json.dumps({"count": its.count, "confidence": its.confidence, "evidence": its.evidence}))
    check_clock_independence(run, tmp_path)


def test_live_ddp_lossy_link(tmp_path, netns_cluster):  # noqa: F811
    """A tbf queue of 0.5 ms with a 16 kB burst overflows under the ring's bursts: segments are dropped and
    re-sent (10-20 % of the bytes): a confident count must be the job's, else the answer says it is unsure."""
    from tests.support.training_capture import Job

    job = Job(
        workload="ddp",
        hosts=4,
        **LOSSY,
        iters=10,
        batch=256,
        order=[1, 3, 2, 4],
    )
    run, truth = live_capture(tmp_path, netns_cluster, job)
    check_lossy(run, truth)


def test_live_gloo_loop_on_a_lossy_link(tmp_path, netns_cluster):  # noqa: F811
    """The issue's lossy case: a gloo all_reduce loop with 0.2 s pauses (as long as a retransmission timeout)
    over a tbf queue of 0.5 ms that overflows under ring bursts (10-20 % of bytes re-sent): confident and right,
    or unsure and saying so."""
    from tests.support.training_capture import Job

    job = Job(
        workload="gloo",
        hosts=4,
        **LOSSY,
        iters=10,
        params=1_000_000,
        pause_s=0.2,
        order=[3, 1, 4, 2],
    )
    run, truth = live_capture(tmp_path, netns_cluster, job)
    check_lossy(run, truth)


def test_live_ddp_three_hosts_jumbo_no_offloads(tmp_path, netns_cluster):  # noqa: F811
    from tests.support.training_capture import Job

    job = Job(workload="ddp", hosts=3, rate="500mbit", mtu=9000, offloads=False, iters=12, batch=256, order=[2, 3, 1])
    run, truth = live_capture(tmp_path, netns_cluster, job)
    its = check_against_truth(run, truth, confident=False)
    print(json.dumps({"count": its.count, "confidence": its.confidence, "evidence": its.evidence}))


# print how the analyzer does on captures made by tests.support.training_capture, from the repository root:
#     python -m tests.collective.test_real_training OUT...
if __name__ == "__main__":
    for folder in sys.argv[1:]:
        t = json.loads((Path(folder) / "truth.json").read_text())
        i = analyze_run(Path(folder) / "run").iterations
        print(folder, len(t.iterations), i.count, i.confidence, np.round(i.period_ns / 1e6, 1))

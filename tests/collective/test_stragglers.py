"""Who holds the ring back (analyze/wire/stragglers.py), on real DDP jobs over gloo in network namespaces, 4 hosts
at 1 Gbit/s, continuous training, no markers given to the analyzer. The truth is outside it: the slow rank's own
record of its extra compute per step (extra_compute_ns), the link shaping applied, and the same job's step time
rerun without the slow link (each rank's own step records)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analyze.api import analyze, run_whatif
from analyze.confidence.doubt import doubt
from analyze.wire.stragglers import MIN_JUDGED, _link_limited, find_stragglers
from reports.html import render_html
from reports.text import summary_text
from reports.trace import trace_events
from tests.support.link_speed import without_link_speed
from tests.support.netns import netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.pcap_clock import reclocked
from tests.support.training_capture import Job, live_capture, sure_in_one_of_two

BASE = dict(hosts=4, iters=14, params=2_500_000, batch=64)


ROOT = Path(__file__).resolve().parents[2]


def _step_ns(truth: dict) -> float:
    """The job's mean step as its ranks recorded it: the slope of their iterations' starts from the second on (the
    first carries the warm-up), a least-squares line through all of them."""
    starts = np.array(sorted(it["start_ns"] for it in truth["iterations"])[1:], dtype=np.float64)
    return float(np.polyfit(np.arange(len(starts)), starts - starts[0], 1)[0])


def _extra_ns(truth: dict, rank: int) -> float:
    """The slow rank's extra compute per step, as it timed it."""
    return float(np.median([s["extra_compute_ns"] for s in truth["steps"] if s["rank"] == rank]))


def _found(run: Path):
    r = analyze([run], workers=1)
    assert r.iterations.confident, (r.iterations.count, r.iterations.confidence)
    assert r.stragglers is not None
    return r


def test_a_clean_job_names_no_straggler(tmp_path, netns_cluster):  # noqa: F811
    sure_in_one_of_two(tmp_path, netns_cluster, Job(**BASE), lambda run, truth: _clean(run))


def _clean(run: Path) -> bool | str:
    r = analyze([run], workers=1)
    assert all(s.confidence < 0.8 for s in r.stragglers), r.stragglers  # never a confident false straggler
    if not r.iterations.confident:
        return f"{r.iterations.count} at {r.iterations.confidence}"
    assert r.stragglers == [], r.stragglers
    assert all(f.saving_share < 0.05 for f in r.scaling.per_edge), r.scaling.per_edge
    return True


def test_a_rank_slowed_by_compute_is_named(tmp_path, netns_cluster):  # noqa: F811
    """Rank 0, the rendezvous host (an earlier reading of quiet edges named no one there), 150 ms more per step;
    rank 1 is the profile test's below."""
    job = Job(**BASE, slow_rank=0, extra_compute_ms=150)
    try:
        sure_in_one_of_two(tmp_path, netns_cluster, job, lambda run, truth: _late_rank(run, truth))
    except AssertionError as e:
        # every capture was checked right (the late rank, compute, its lost time within 20 %) and only its
        # sureness missed: a known limit of issue 45, reported as such and never as a pass. On 4 hosts only two
        # ring edges do not touch the late host, and the ring's waits hide one of their entries in about half the
        # iterations (2026-11-27: 4 of 4 captures "named right at 0.5", entry shown in 6 of 13 iterations)
        if "right but unsure in two captures" not in str(e):
            raise
        pytest.xfail(f"named right but unsure in two captures: {e}")


def _late_rank(run: Path, truth: dict) -> bool | str:
    r = analyze([run], workers=1)
    if not r.iterations.confident:
        assert all(s.confidence < 0.8 or s.host == truth["launch_order"][0] for s in r.stragglers), r.stragglers
        return f"{r.iterations.count} at {r.iterations.confidence}"
    (found,) = r.stragglers
    assert found.kind == "compute" and found.host == truth["launch_order"][0] and found.rank == 0, found
    extra = _extra_ns(truth, 0)
    assert abs(found.lost_ns_per_iteration / extra - 1) <= 0.2, (found.lost_ns_per_iteration / 1e6, extra / 1e6)
    # sure where its entry shows in half the iterations and it is late in most of those (7 of 14 seen in a run
    # where the others' waits hid its entry in the rest): how many it shows in is the wire's, not the rank's
    assert found.iterations_affected >= MIN_JUDGED, found
    if found.confidence < 0.8:  # right but unsure (its entry showed in under half the iterations): recapture
        return f"named right at {found.confidence} from {found.iterations_affected} iterations"
    assert f"{found.host} enters the collective" in summary_text(r)
    # the report draws each late iteration's wait, the trace puts it on the host's own track
    html = render_html(r)
    assert '<tr data-kind="compute">' in html and 'id="fig-waits"' in html and 'id="fig-edge-pace"' in html
    waits = [e for e in trace_events(r)["traceEvents"] if e.get("name") == f"ring waits for {found.host}"]
    assert len(waits) == found.iterations_affected and all(e["pid"] == waits[0]["pid"] for e in waits)
    assert abs(np.median([e["dur"] for e in waits]) * 1e3 / extra - 1) <= 0.2
    # the hosts' clocks moved apart by up to 100 ms and 50 ppm: read on the reference clock, the same answer
    (skewed,) = _found(reclocked(run, run.parent / "reclocked")).stragglers
    assert (skewed.host, skewed.kind) == (found.host, found.kind), skewed
    assert abs(skewed.lost_ns_per_iteration / extra - 1) <= 0.2, (skewed.lost_ns_per_iteration / 1e6, extra / 1e6)
    _same_without_link_speed(run, r)
    return True


def _same_without_link_speed(run: Path, r) -> None:
    """Who holds the ring back, and what it costs, read from the packets alone: the same with the line rate
    unknown (issue 45: without --link-speed, once, the compute straggler was named; with it, no one)."""
    unknown = analyze([without_link_speed(run, run.parent / "no-link-speed")], workers=1)
    assert [(s.host, s.kind) for s in unknown.stragglers] == [(s.host, s.kind) for s in r.stragglers], unknown
    for a, b in zip(unknown.stragglers, r.stragglers):
        # the bins an edge sends in follow its own pace, not the line rate (CI runs read 155 against 145 ms, and
        # 142.5 against 130 from 8 and 7 iterations, while they followed the line rate): the same iterations
        assert a.iterations_affected == b.iterations_affected, (a, b)
        assert abs(a.lost_ns_per_iteration - b.lost_ns_per_iteration) <= 1e6, (a, b)


def test_a_slow_link_is_named_and_its_fix_priced(tmp_path, netns_cluster):  # noqa: F811
    """h3's link at a fifth of the others' rate. The per-link what-if's saving for it, against the step the same
    job takes with no slow link (within 15 %)."""
    _, clean = live_capture(tmp_path / "clean", netns_cluster, Job(**BASE))
    sure_in_one_of_two(
        tmp_path, netns_cluster, Job(**BASE, slow_host=3, slow_host_rate="200mbit"), lambda *a: _slow_link(*a, clean)
    )


def _slow_link(run: Path, truth: dict, clean: dict) -> bool | str:
    """True where the iterations were sure and the slow link named and priced right; else why they were unsure
    (0.77 once in CI, 14 of 14 counted), having checked that nothing unsure is named with confidence."""
    r = analyze([run], workers=1)
    slow_host = truth["launch_order"][2]  # rank r on cluster host r + 1
    if not r.iterations.confident:
        assert all(s.confidence < 0.8 or s.host == slow_host for s in r.stragglers), r.stragglers
        return f"{r.iterations.count} at {r.iterations.confidence}"
    (found,) = r.stragglers
    assert found.kind == "link" and found.host == slow_host, found
    assert found.confidence >= 0.8
    fixes = r.scaling.per_edge
    assert fixes[0].host == slow_host and all(f.saving_share < 0.05 for f in fixes[1:]), fixes
    measured = _step_ns(truth) - _step_ns(clean)
    # priced by the what-if's wire model from h3's own timeline (analyze.whatif.link_fixes): 532 ms against 533
    # measured by rerunning without the shaper, the interval 0-550 ms (the compute under the slow link is hidden);
    # the edges' own sums read 552 ms, the four hosts' mean timeline 326 ms
    best = fixes[0]
    low, high = best.saving_ns_low, best.saving_ns_high
    print(f"per-link what-if: {best.saving_ns / 1e6:.0f} ms ({low / 1e6:.0f}-{high / 1e6:.0f}), the ring "
          f"{best.ring_speedup:.2f}x; rerun without it: {measured / 1e6:.0f} ms")  # fmt: skip
    assert best.priced_by == "wire model" and best.ring_speedup > 3, best
    assert abs(best.saving_ns / measured - 1) <= 0.15, (best.saving_ns / 1e6, measured / 1e6)
    assert low <= measured <= high, (low / 1e6, measured / 1e6, high / 1e6)
    # at the others' pace (what the rerun's links really do): no more than at line rate
    usual = best.saving_ns_if_usual
    assert usual is not None and usual <= best.saving_ns and abs(usual / measured - 1) <= 0.15, usual / 1e6
    assert abs(found.lost_ns_per_iteration / measured - 1) <= 0.2
    assert f"{slow_host}'s link" in summary_text(r) or slow_host in summary_text(r)
    _link_limited_through(r, slow_host)
    _answered_by_the_link(r, slow_host)
    # the hosts' clocks moved apart by up to 100 ms and 50 ppm: the same link, its lost time within a bin a step
    skewed = _found(reclocked(run, run.parent / "reclocked"))
    assert [(s.host, s.kind) for s in skewed.stragglers] == [(slow_host, "link")], skewed.stragglers
    # the edge sums' lost time is read per edge and moves within a bin a step; the wire model's price reads the
    # slow host's iterations cut on the reference clock, where one bin idle or not inside a window moves the
    # compute it reads (a CI run, 2026-11-29: 527 ms, 555 ms with the clocks moved, 541 measured): each held
    # against the rerun, as the capture's own
    lost = skewed.stragglers[0].lost_ns_per_iteration
    assert abs(lost - found.lost_ns_per_iteration) <= 0.05 * measured, (lost / 1e6, found.lost_ns_per_iteration / 1e6)
    moved = skewed.scaling.per_edge[0]
    assert moved.host == slow_host and abs(moved.saving_ns / measured - 1) <= 0.15, (moved.saving_ns / 1e6, measured)
    assert moved.saving_ns_low <= measured <= moved.saving_ns_high, (
        moved.saving_ns_low,
        measured,
        moved.saving_ns_high,
    )
    _same_without_link_speed(run, r)
    return True


def test_a_slow_rank_beside_a_slow_link_is_named_unsure(tmp_path, netns_cluster):  # noqa: F811
    """Rank 0 computes 150 ms more per step while h3's link runs at a fifth of the others', on 6 hosts (on 4, the
    edges behind the slow link leave too few entries to judge by). The link is named, sure; the late rank, where
    named, unsure, as late as it enters (210 ms on a capture), at least its extra compute. No one else is named
    with confidence. A capture whose link reads unsure (a CI run loaded beside it left it at 0.0 once) or that
    names another host late, unsure (once in CI), gets another, up to two, one of which must be right and sure.
    Silence on the late rank is not wrong here: on two captures of 2026-11-29 its first sends of each iteration led
    the others' by 22 ms (median): the ring's tail through the slow link hid its 150 ms; the committed capture
    where it showed is held by the test below."""
    job = Job(**{**BASE, "hosts": 6}, slow_rank=0, extra_compute_ms=150, slow_host=3, slow_host_rate="200mbit")

    def check(run: Path, truth: dict) -> bool | str:
        r = analyze([run], workers=1)
        slow, late_host = truth["launch_order"][2], truth["launch_order"][0]
        assert all(s.host in (slow, late_host) or s.confidence < 0.8 for s in r.stragglers), r.stragglers
        links = [s for s in r.stragglers if s.kind == "link"]
        assert [s.host for s in links] in ([], [slow]), r.stragglers  # never another host's link
        late = [s for s in r.stragglers if s.kind == "compute"]
        assert all(s.confidence <= 0.5 for s in late), r.stragglers  # beside a slow link, never stated as fact
        if not links or links[0].confidence < 0.8:
            return f"the slow link unsure: {r.stragglers}"
        if [s.host for s in late] not in ([], [late_host]):  # unsure (held to 0.5 above), and wrong: not a pass
            return f"another host named late, unsure: {r.stragglers}"  # once in CI (2026-11-28): h6 for h1
        if late:
            assert any("at most what the ring loses" in e for e in late[0].evidence)
            assert late[0].lost_ns_per_iteration >= 0.8 * _extra_ns(truth, 0), late[0]
        return True

    sure_in_one_of_two(tmp_path, netns_cluster, job, check)


def test_a_link_fed_by_the_slow_one_does_not_hide_it():
    """A committed capture of the test above (fixtures/real-training/ddp-slow-rank-slow-link) where the slow link
    was not named: the edge after it in the ring forwards what it brings and read 473 Mbit/s, under SLOW of the
    usual 793 too, so the slow edges shared no host and no one edge alone held the ring. The edge runs at over
    twice the slow ones' pace (209, 238 Mbit/s): it waits on them, and h3's link is named, sure. The late rank
    entered 210 ms after the others there: named, unsure, beside the link (both findings)."""
    case = ROOT / "fixtures" / "real-training" / "ddp-slow-rank-slow-link"
    truth = json.loads((case / "truth.json").read_text())
    slow, late_host = truth["launch_order"][truth["job"]["slow_host"] - 1], truth["launch_order"][0]
    r = analyze([case / "run"], workers=1)
    (link,) = [s for s in r.stragglers if s.kind == "link"]
    assert (link.host, link.confidence >= 0.8) == (slow, True), r.stragglers
    (late,) = [s for s in r.stragglers if s.kind == "compute"]
    assert (late.host, late.confidence <= 0.5) == (late_host, True), r.stragglers
    assert late.lost_ns_per_iteration >= 0.8 * _extra_ns(truth, truth["job"]["slow_rank"]), late
    _link_limited_through(r, slow)
    _answered_by_the_link(r, slow)


def _answered_by_the_link(r, slow_host: str) -> None:
    """The verdict names the slow link and what its fix saves (analyze.verdict: a sure slow link answers first);
    the what-if below it, which scales every link, is unsure: the link hid the compute T it scales (the hosts'
    timelines read 437 ms and the slow host's 21 ms on the committed capture, for a 184 ms step once fixed). Its
    replay is still shown, and so is what would make it sure."""
    fix = next(f for f in r.scaling.per_edge if f.host == slow_host)
    assert r.verdict.answer == "yes" and r.verdict.headline.endswith(f"{slow_host}'s."), r.verdict
    assert f"saves {fix.saving_ns / 1e6:.0f} ms per iteration" in r.verdict.text, r.verdict.text
    unsure = r.scaling.unsure
    assert unsure is not None and unsure.confidence <= 0.5, r.scaling.unsure
    assert any(b.startswith(f"one link paces the ring ({slow_host}'s") for b in unsure.because), unsure.because
    assert unsure.would_make_sure[0].startswith(f"a capture with {slow_host}'s link fixed"), unsure.would_make_sure
    assert "replay of the measured iteration" in summary_text(r)


def test_the_what_if_is_unsure_only_where_a_sure_link_paces_the_ring(tmp_path) -> None:
    """`ringscope whatif RESULT.json` reads the same doubt back from the JSON. Where the link is named unsure, or
    costs under SLOW_LINK_SHARE of the step, the what-if carries no such doubt."""
    case = ROOT / "fixtures" / "real-training" / "ddp-slow-rank-slow-link"
    r = analyze([case / "run"], workers=1)
    saved = tmp_path / "result.json"
    r.write_json(saved)
    again = run_whatif(saved)
    assert again.unsure is not None and again.unsure.because == r.scaling.unsure.because, again.unsure
    (link,) = [s for s in r.stragglers if s.kind == "link"]
    paced = [b for b in doubt(r).because if b.startswith("one link paces the ring")]
    assert paced, doubt(r)
    for confidence, lost in ((0.5, link.lost_ns_per_iteration), (link.confidence, 0.04 * r.iterations.period_ns)):
        link.confidence, link.lost_ns_per_iteration = confidence, lost
        left = doubt(r)
        assert left is None or not any(b.startswith("one link paces the ring") for b in left.because), left


def test_a_slow_link_leaves_what_the_edges_own_counters_show() -> None:
    """Only `sender` and `latency` readings (judged against a line rate the slow link does not reach) become the
    link: an edge through it that lost packets stays `loss`, and so does a job read as loss."""
    case = ROOT / "fixtures" / "real-training" / "ddp-slow-rank-slow-link"
    r = analyze([case / "run"], workers=1)
    found, _, through = find_stragglers(r)
    (host,) = [s.host for s in found if s.kind == "link"]
    lossy, other = sorted((e for e in r.transport.edges if (e.src, e.dst) in through[host]), key=lambda e: e.src)
    lossy.limiter, lossy.confidence, other.limiter, other.confidence = "loss", 0.9, "sender", 1.0
    r.transport.limiter, r.transport.confidence = "loss", 0.9
    _link_limited(r.transport, found, through)
    assert (lossy.limiter, other.limiter, r.transport.limiter) == ("loss", "link", "loss"), r.transport


def _link_limited_through(r, slow: str) -> None:  # type: ignore[no-untyped-def]
    """The ring edges through the slow link are link-limited as surely as the link is named, and so is the job: the
    transport alone, judging them against the 1 Gbit/s their hosts state, read `sender, 1.00` on both."""
    (link,) = [s for s in r.stragglers if s.kind == "link"]
    through = [e for e in r.transport.edges if e.limiter is not None and slow in (e.src, e.dst)]
    ring = [e for e in through if e.payload_bytes >= 0.5 * max(x.payload_bytes for x in r.transport.edges)]
    assert len(ring) == 2 and all((e.limiter, e.confidence) == ("link", link.confidence) for e in ring), ring
    assert (r.transport.limiter, r.transport.confidence) == ("link", link.confidence), r.transport.evidence


def test_the_ranks_profiles_check_the_split(tmp_path, netns_cluster):  # noqa: F811
    """Each rank's torch.profiler trace given beside the captures: the late rank's first collective call of each
    step comes after the others' by about the time the packets say it was late."""
    job = Job(**BASE, slow_rank=1, extra_compute_ms=150, profile=True)
    sure_in_one_of_two(tmp_path, netns_cluster, job, _profiled)


def _profiled(run: Path, truth: dict) -> bool | str:
    """The late rank named with the profiles' agreement where the count is sure; else nothing false named."""
    assert len(truth["profiles"]) == len(truth["launch_order"])
    r = analyze([run], workers=1, profiles=[Path(p) for p in truth["profiles"]])
    late = truth["launch_order"][1]
    if not r.iterations.confident:
        assert all(s.confidence < 0.8 or s.host == late for s in r.stragglers), r.stragglers
        return f"{r.iterations.count} at {r.iterations.confidence}"
    assert all(s.host == late for s in r.stragglers), r.stragglers  # never a punctual rank named
    if not r.stragglers:  # silent, not wrong (as beside a slow link): two captures of 2026-11-27 read no late entry
        return f"the late rank not named: {r.stragglers}"
    (found,) = r.stragglers
    assert any("profiles agree" in e for e in found.evidence), found.evidence
    return True

"""Theory in ranks, not hosts: real PyTorch DDP with two ranks per host (network namespace), placed host by host
and round-robin, on four hosts at 1 Gbit/s, and with four per host on three. Each rank records its own host, rank,
steps and gradient bytes; the implied gradient size S must come back within 2 % of the ranks' own, for the world
of W ranks, whichever placement (round-robin: every rank's ring successor is on another host, so each host sends
2(W-1)/W x S once per rank).
Without markers the connections count the ranks (torch over gloo: a store connection per rank, a connection per
rank pair) and the heavy ring sends per host give the placement; the launch command run.json records (torchrun
--nproc-per-node) is the next source, and with nothing, one rank per host is an assumption that leaves S unsure."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from analyze.api import analyze
from analyze.collective.ranks import TrafficRanks, launch_ranks_per_host, ring_ranks
from tests.support.netns import netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.pcap_bytes import worst_host_bytes_error
from tests.support.training_capture import Job, sure_in_one_of_two

ROOT = Path(__file__).resolve().parents[2]


def _markers(hosts: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"rank": range(len(hosts)), "host": hosts, "iteration": 0})


def test_placement_from_the_markers() -> None:
    contiguous = ring_ranks(_markers(["a", "a", "b", "b", "c", "c"]), None, 3, None)
    assert (contiguous.world_size, contiguous.sends) == (6, None)  # one boundary rank per host: the usual factor
    interleaved = ring_ranks(_markers(["a", "b", "c", "a", "b", "c"]), None, 3, None)
    assert (interleaved.world_size, interleaved.sends) == (6, {"a": 2, "b": 2, "c": 2})
    mixed = ring_ranks(_markers(["a", "a", "b", "a", "b", "b"]), None, 2, None)
    assert mixed.sends == {"a": 2, "b": 2}


def test_ranks_per_host_from_the_launch_command() -> None:
    assert launch_ranks_per_host({"command": ["torchrun", "--nnodes=4", "--nproc-per-node=2", "train.py"]}) == 2
    assert launch_ranks_per_host({"command": ["torchrun", "--nproc_per_node", "8", "train.py"]}) == 8
    assert launch_ranks_per_host({"command": ["horovodrun", "-np", "8", "-H", "h1:4,h2:4", "python", "t.py"]}) == 4
    assert launch_ranks_per_host({"command": ["horovodrun", "-H", "h1:4,h2:2", "python", "t.py"]}) is None
    assert launch_ranks_per_host({"command": ["python", "train.py"]}) is None
    assert launch_ranks_per_host(None) is None
    told = ring_ranks(pd.DataFrame(), None, 4, {"command": ["torchrun", "--nproc-per-node", "2", "t.py"]})
    assert (told.world_size, told.note) == (8, "")
    assumed = ring_ranks(pd.DataFrame(), None, 4, None)
    assert assumed.world_size == 4 and assumed.note.startswith("assumed one rank per host") and not assumed.sure


def test_the_users_world_size_is_checked_against_the_connections() -> None:
    seen = TrafficRanks({"a": 2, "b": 2}, {"a": 1, "b": 1}, True, "2 store connections, 4 rank-pair connections")
    agree = ring_ranks(pd.DataFrame(), None, 2, None, traffic=seen, world_size=4)
    assert (agree.world_size, agree.sure) == (4, True) and "as the connections show" in agree.source
    differ = ring_ranks(pd.DataFrame(), None, 2, None, traffic=seen, ranks_per_host=4)
    assert (differ.world_size, differ.sure) == (4, False) and differ.note.startswith("DISAGREEMENT")
    told = ring_ranks(pd.DataFrame(), None, 2, None, world_size=16)  # nothing to check it against: taken
    assert (told.world_size, told.sure, told.source) == (16, True, "--world-size")
    broken = TrafficRanks({"a": 2, "b": 3}, {}, False, "")
    assert ring_ranks(pd.DataFrame(), None, 2, None, traffic=broken).source == "assumed"


@pytest.mark.parametrize(
    "hosts, per_host, placement", [(4, 2, "contiguous"), (4, 2, "interleaved"), (3, 4, "contiguous")]
)
def test_ddp_ranks_per_host(tmp_path, netns_cluster, hosts, per_host, placement):  # noqa: F811
    job = Job(hosts=hosts, ranks_per_host=per_host, placement=placement, iters=16, params=1_000_000, batch=32)
    sure_in_one_of_two(tmp_path, netns_cluster, job, lambda run, truth: _check_ranks(run, truth, job))


def _check_ranks(run, truth, job: Job):
    """Markers first, then without them; True where the inferred count is stated as fact, else its evidence."""
    hosts, per_host, placement = job.hosts, job.ranks_per_host, job.placement
    s, world = truth["gradient_bytes"], truth["world_size"]
    assert world == hosts * per_host and s
    for host in truth["launch_order"]:  # the ranks' own records, as `capture run` gathers them beside the capture
        shutil.copy(run.parent / "truth" / host / "steps.jsonl", run / host / "markers.jsonl")
    its = analyze([run], workers=1, byte_mode="payload").iterations
    assert its is not None and its.source == "markers" and its.count == job.iters, its
    assert its.ring_size == world
    want = {h: per_host for h in truth["launch_order"]} if placement == "interleaved" else None
    assert its.ring_sends_per_host == want
    assert abs(its.implied_gradient_bytes / s - 1) <= 0.02, (its.implied_gradient_bytes / s, its.notes)
    # no markers: the connections count the ranks (a store connection per rank, one per rank pair) and the heavy
    # ring sends per host give the placement, so S comes back the same without anything told
    for host in truth["launch_order"]:
        (run / host / "markers.jsonl").unlink()
    inferred = analyze([run], workers=1, byte_mode="payload").iterations
    assert inferred is not None and inferred.source == "inferred" and inferred.count == job.iters, inferred.notes
    assert inferred.pattern is not None and inferred.pattern.kind == "ring_allreduce", inferred.pattern
    # each host's iterations against what its own capture (dpkt) shows it sending while its ranks ran those steps
    # (within 1 % on four layouts); S itself within 2 % below
    worst, pairs = worst_host_bytes_error(run, inferred, truth, ring=True)
    assert worst <= 0.02, pairs
    assert inferred.ring_size == world and inferred.ring_size_sure
    assert inferred.ring_size_source.startswith("the connections"), inferred.ring_size_source
    assert inferred.ranks_per_host == {h: per_host for h in truth["launch_order"]}
    assert inferred.ring_sends_per_host == want
    assert abs(inferred.implied_gradient_bytes / s - 1) <= 0.02, (inferred.implied_gradient_bytes / s, inferred.notes)
    if placement == "interleaved":  # the 2(W-1)/W theory per host: a rank stream per rank, each 2(W-1)/W x S
        sent = inferred.unique_bytes_per_iteration_per_host or inferred.bytes_per_iteration_per_host
        assert abs(sent.median / (per_host * 2 * (world - 1) / world * s) - 1) <= 0.02
    return True if inferred.confident else f"{inferred.confidence} {inferred.evidence}"


def test_the_options_against_a_real_capture() -> None:
    """DDP on 4 hosts, one rank each (a committed capture): --world-size 4 agrees with its connections and is
    sure; --ranks-per-host 2 does not, and the what-if says it is unsure because of it, first."""
    run = [ROOT / "fixtures" / "real-training" / "ddp-100mbit" / "run"]
    agree = analyze(run, workers=1, world_size=4)
    assert agree.iterations.ring_size == 4 and agree.iterations.ring_size_sure
    assert agree.iterations.ring_size_source == "--world-size, as the connections show"
    differ = analyze(run, workers=1, ranks_per_host=2)
    assert differ.iterations.ring_size == 4 and differ.iterations.ring_size_sure is False
    assert differ.scaling is not None and differ.scaling.unsure is not None
    assert differ.scaling.unsure.because[0].startswith("DISAGREEMENT: --ranks-per-host gives W = 8")
    assert differ.verdict.answer == "unclear"

"""A host whose capture missed the job: said first, and the verdict obeys it. Built from a real 4-host DDP
capture in which one host's file is swapped for a capture of unrelated traffic (what an agent on the
management NIC or on `lo` leaves), so which host missed the job is known before the analysis."""

from __future__ import annotations

import shutil
from pathlib import Path

from analyze.api import analyze
from analyze.confidence.coverage import CAPTURE_PROBLEMS
from analyze.verdict import judge
from reports.text import summary_text

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "fixtures" / "real-training" / "ddp-100mbit" / "run"
UNRELATED = ROOT / "fixtures" / "accounting" / "retransmissions.pcap"


def test_a_real_run_has_no_capture_problem():
    result = analyze([RUN])
    assert result.capture_problems is None and CAPTURE_PROBLEMS not in result.to_json()


def test_a_host_that_captured_the_wrong_network_is_said_first(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "h3" / "eth0.pcap.gz").unlink()
    shutil.copy(UNRELATED, run / "h3" / "eth0.pcap")
    result = analyze([run])
    problems = result.capture_problems
    assert problems is not None and result.to_json()[CAPTURE_PROBLEMS] == problems
    assert len(problems) == 1 and problems[0].startswith("h3: its capture holds no traffic with the other")
    assert summary_text(result).splitlines()[1] == f"CAPTURE PROBLEM: {problems[0]}"
    v = result.verdict
    assert v is not None and v == judge(result)  # the one answer, judged once by the analysis
    assert v.answer == "unclear" and "missed the job's traffic" in v.headline
    scaling = result.scaling  # the what-if is unsure for the same reason, and says so first
    assert scaling is not None and scaling.unsure is not None
    assert scaling.unsure.because[0] == problems[0] and scaling.unsure.confidence == 0.0
    assert scaling.verdict.startswith("UNSURE: h3:") and "--iface NAME" in scaling.unsure.would_make_sure[0]

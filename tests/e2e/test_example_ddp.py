"""The README's first command on the bundled real capture (fixtures/example-ddp): a 4-host PyTorch DDP job
recorded in network namespaces. Every number checked here comes from the job itself (truth.json: its ranks'
own step times, its launch order, its gradient size), never from the analyzer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.clirun import ringscope
from tests.support.expect import ROOT

EXAMPLE = ROOT / "fixtures/example-ddp"


def test_the_readme_command_on_the_real_example_agrees_with_the_job(tmp_path: Path) -> None:
    truth = json.loads((EXAMPLE / "truth.json").read_text())
    report = tmp_path / "example-report.html"
    proc = ringscope("analyze", EXAMPLE / "run", "--html", report, "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    assert report.stat().st_size > 100_000 and "Traceback" not in proc.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["warnings"] == []
    topo = doc["topology"]
    assert topo["kind"] == "ring" and topo["matches_launch_order"] is True
    assert topo["launch_order"] == truth["launch_order"] == ["h3", "h1", "h4", "h2"]
    its = doc["iterations"]
    assert its["source"] == "markers" and its["confident"]
    assert its["count"] == len(truth["iterations"]) == 16
    got = [(i["start_ns"], i["end_ns"]) for i in its["per_iteration"]]
    assert got == [(i["start_ns"], i["end_ns"]) for i in truth["iterations"]]
    n = truth["world_size"]  # a ring all-reduce sends 2(N-1)/N x S per host and iteration
    spread = its["bytes_per_iteration_per_host"]
    assert sorted(spread["by_host"]) == sorted(truth["launch_order"])  # every host's own figure
    for host, sent in [*spread["by_host"].items(), *((k, spread[k]) for k in ("median", "p5", "p95"))]:
        assert abs(sent / (2 * (n - 1) / n * truth["gradient_bytes"]) - 1) < 0.01, host
    assert abs(its["implied_gradient_bytes"] / truth["gradient_bytes"] - 1) < 0.01


@pytest.mark.parametrize("real", [EXAMPLE / "run", ROOT / "fixtures/real-training/ddp-100mbit/run"])
def test_a_wrong_link_speed_is_questioned_and_the_right_one_is_not(tmp_path: Path, real: Path) -> None:
    """Real rings at their shaped line rate (1 Gbit/s: 1.00-1.01x per 10 ms bin; 100 Mbit/s: 1.46x, TSO segments
    stamped whole before the shaper paces them) raise nothing; the same capture with h1's meta.json claiming a
    tenth of its link speed is questioned, for h1 alone."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(real, run_dir)
    proc = ringscope("analyze", run_dir, "--json", tmp_path / "right.json")
    assert proc.returncode == 0, proc.stderr
    assert not [w for w in json.loads((tmp_path / "right.json").read_text())["warnings"] if "link speed" in w]
    meta = json.loads((run_dir / "h1/meta.json").read_text())
    (run_dir / "h1/meta.json").write_text(json.dumps({**meta, "link_speed_bps": meta["link_speed_bps"] / 10}))
    proc = ringscope("analyze", run_dir, "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    warnings = json.loads((tmp_path / "r.json").read_text())["warnings"]
    questioned = [w for w in warnings if "is the link speed right?" in w]
    assert questioned and all(w.startswith("h1: ") and "over 100 ms" in w for w in questioned), warnings

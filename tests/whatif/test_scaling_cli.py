"""`ringscope whatif` from the command line: the interface scripts rely on (issue 5, item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from tests.support.requirements import require

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "training-bottleneck"
T_RESNET50 = "0.12808580219559176"


@pytest.fixture(scope="module")
def paper_files() -> dict[str, Path]:
    files = {"profile": FIXTURES / "resnet50.bk.log", "cost": FIXTURES / "cuda_vec_add.log"}
    require(all(p.is_file() for p in files.values()), "fixtures/training-bottleneck/ is missing the paper's inputs")
    return files


def _paper_args(files: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "whatif",
        "--model",
        "paper",
        "--profile",
        str(files["profile"]),
        "--single-iteration-time",
        T_RESNET50,
        "--reduce-cost",
        str(files["cost"]),
        "--json",
        str(out),
        *extra,
    ]


def test_whatif_paper_json_contract(paper_files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    res = CliRunner().invoke(
        app,
        _paper_args(
            paper_files,
            out,
            "--workers",
            "8",
            "--workers",
            "64",
            "--bandwidth",
            "10G,25Gbit",
            "--bandwidth",
            "100Gbps",
            "--compression",
            "1,2",
        ),
    )
    assert res.exit_code == 0, res.output
    s = json.loads(out.read_text())["scaling"]
    assert s["model"] == "paper" and s["single_iteration_time_ns"] / 1e9 == pytest.approx(float(T_RESNET50))
    keys = {"workers", "bandwidth_bps", "compression", "backward_ns", "overhead_ns", "scaling_factor"}
    assert all(keys <= set(p) for p in s["points"])
    combos = {(p["workers"], p["bandwidth_bps"], p["compression"]) for p in s["points"]}
    assert combos == {(n, b, c) for n in (8, 64) for b in (10e9, 25e9, 100e9) for c in (1.0, 2.0)}
    assert len(s["points"]) == 12
    for p in s["points"]:
        assert p["scaling_factor"] == pytest.approx(
            s["single_iteration_time_ns"] / (s["single_iteration_time_ns"] + p["overhead_ns"]), rel=1e-6
        )
    sf = {(p["workers"], p["bandwidth_bps"], p["compression"]): p["scaling_factor"] for p in s["points"]}
    assert sf[(64, 100e9, 1.0)] >= 0.99 and sf[(64, 10e9, 1.0)] < sf[(64, 10e9, 2.0)]
    assert {(r["workers"], r["bandwidth_bps"], r["target"]) for r in s["needed_compression"]} == {
        (n, b, t) for n in (8, 64) for b in (10e9, 25e9, 100e9) for t in (0.9, 0.95, 0.99)
    }
    assert 20e9 < s["hide_bandwidth_bps"] < 40e9
    assert "bottleneck" in s["verdict"]
    assert "scaling" in res.output and "compression needed" in res.output


def test_whatif_json_to_stdout(paper_files: dict[str, Path]) -> None:
    res = CliRunner().invoke(app, _paper_args(paper_files, Path("-"), "--workers", "16", "--bandwidth", "40G"))
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["scaling"]["points"]) == 1


def test_ringscope_model_switches_from_the_cli(paper_files: dict[str, Path], tmp_path: Path) -> None:
    base = [
        "whatif",
        "--profile",
        str(paper_files["profile"]),
        "--single-iteration-time",
        "128ms",
        "--workers",
        "64",
        "--bandwidth",
        "10G",
    ]
    sf = {}
    for label, extra in {
        "plain": [],
        "fp16": ["--fp16"],
        "ddp": ["--buckets", "ddp"],
        "slow": ["--efficiency", "0.5"],
        "hier": ["--gpus-per-server", "8", "--intra-bandwidth", "1Tbit"],
    }.items():
        out = tmp_path / f"{label}.json"
        res = CliRunner().invoke(app, [*base, *extra, "--json", str(out)])
        assert res.exit_code == 0, res.output
        sf[label] = json.loads(out.read_text())["scaling"]["points"][0]["scaling_factor"]
    assert sf["fp16"] > sf["plain"] > sf["slow"]
    assert sf["hier"] > sf["plain"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bandwidth", "10Q"], "bad bandwidth '10Q'"),
        (["--bandwidth", "0"], "bad bandwidth '0'"),
        (["--bandwidth=-1G"], "bad bandwidth '-1G'"),
        (["--workers", "0"], "bad worker count '0'"),
        (["--compression", "0.5"], "bad compression ratio '0.5'"),
        (["--model", "magic"], "unknown model 'magic'"),
        (["--buckets", "nccl"], "bucket rule"),
        (["--single-iteration-time", "soon"], "bad duration 'soon'"),
    ],
)
def test_user_errors_are_one_line(paper_files: dict[str, Path], tmp_path: Path, args: list[str], message: str) -> None:
    full = [
        "whatif",
        "--profile",
        str(paper_files["profile"]),
        "--single-iteration-time",
        "0.128",
        "--workers",
        "8",
        "--bandwidth",
        "10G",
        *args,
    ]
    res = CliRunner().invoke(app, full)
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ringscope: error:") and message in lines[0], res.output


def test_missing_profile_file_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "whatif",
            "--profile",
            str(tmp_path / "nope.bk.log"),
            "--single-iteration-time",
            "1",
            "--workers",
            "2",
            "--bandwidth",
            "1G",
        ],
    )
    assert res.exit_code == 2 and "nope.bk.log: no such profile file" in res.output


def test_console_script_end_to_end(paper_files: dict[str, Path], tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("ringscope")
    require(script.exists(), f"{script} missing: run `pip install -e .`")
    out = tmp_path / "s.json"
    proc = subprocess.run(
        [str(script), *_paper_args(paper_files, out, "--workers", "4,8", "--bandwidth", "25G")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert [p["workers"] for p in json.loads(out.read_text())["scaling"]["points"]] == [4, 8]


def test_cli_import_stays_light() -> None:
    """`ringscope --help` must stay fast: importing cli pulls in neither numpy-heavy analysis nor torch."""
    heavy = "('torch', 'analyze.whatif.calculation', 'analyze.whatif.torch_profile')"
    code = f"import sys, cli; bad = [m for m in {heavy} if m in sys.modules]; print(bad)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr

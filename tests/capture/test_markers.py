"""Iteration markers: no-op without a capture, one intact JSON line per iteration under one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import timeit
from pathlib import Path

import pytest

from capture import markers
from tests.support.requirements import require_module

ROOT = Path(__file__).resolve().parents[2]
_ENV = (
    "RINGSCOPE_MARKERS",
    "RINGSCOPE_MARKERS_DIR",
    "RINGSCOPE_HOST",
    "HOROVOD_RANK",
    "HOROVOD_LOCAL_RANK",
    "RANK",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    markers.configure()
    yield
    monkeypatch.undo()
    markers.configure()


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_no_capture_is_a_shared_noop(tmp_path):
    assert markers.iteration(0) is markers.iteration(1, gradient_bytes=4)
    with markers.iteration(0):
        pass
    markers.record(0, 1, 2)
    assert not markers.enabled()
    assert list(tmp_path.iterdir()) == []


def test_noop_overhead_is_tiny():
    per_block = (
        min(timeit.repeat("with it(1): pass", globals={"it": markers.iteration}, number=20000, repeat=5)) / 20000
    )
    assert per_block < 2e-6  # measured ~0.2 µs; generous for slow CI machines


def test_lines_carry_ranks_times_and_metadata(tmp_path, monkeypatch):
    path = tmp_path / "m" / "markers.jsonl"
    monkeypatch.setenv("RINGSCOPE_MARKERS", str(path))
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert markers.configure()
    for i in range(3):
        with markers.iteration(i, gradient_bytes=4000, model="mlp"):
            pass
    got = lines(path)
    assert [r["iteration"] for r in got] == [0, 1, 2]
    assert all(
        r["rank"] == 5 and r["local_rank"] == 1 and r["gradient_bytes"] == 4000 and r["model"] == "mlp" for r in got
    )
    assert all(0 < r["start_ns"] <= r["end_ns"] for r in got)
    assert got[0]["end_ns"] <= got[1]["start_ns"]


def test_markers_dir_uses_the_host_name(tmp_path, monkeypatch):
    monkeypatch.setenv("RINGSCOPE_MARKERS_DIR", str(tmp_path / "stage-{host}"))
    monkeypatch.setenv("RINGSCOPE_HOST", "h7")
    monkeypatch.setenv("HOROVOD_RANK", "3")
    monkeypatch.setenv("RANK", "9")  # Horovod's own variable wins
    markers.configure()
    with markers.iteration(0):
        pass
    assert lines(tmp_path / "stage-h7" / "markers.jsonl")[0]["rank"] == 3


def test_ranks_appending_to_one_file_never_interleave(tmp_path):
    """Four processes write 500 long lines each at once: every line must parse."""
    path = tmp_path / "markers.jsonl"
    script = (
        "import os; from capture import markers\n"
        "for i in range(500):\n"
        "    with markers.iteration(i, pad='x' * 5000): pass\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env=dict(os.environ, RINGSCOPE_MARKERS=str(path), RANK=str(rank), PYTHONPATH=str(ROOT)),
        )
        for rank in range(4)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0] * 4
    got = lines(path)
    assert len(got) == 2000
    for rank in range(4):
        assert sorted(r["iteration"] for r in got if r["rank"] == rank) == list(range(500))


def test_hook_optimizer_makes_each_step_an_iteration(tmp_path, monkeypatch):
    torch = require_module("torch")
    monkeypatch.setenv("RINGSCOPE_MARKERS", str(tmp_path / "markers.jsonl"))
    markers.configure()
    model = torch.nn.Linear(10, 3)
    optimizer = markers.hook_optimizer(torch.optim.SGD(model.parameters(), lr=0.1), model="linear")
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 10)).sum().backward()
        optimizer.step()
    got = lines(tmp_path / "markers.jsonl")
    assert [r["iteration"] for r in got] == [0, 1, 2]
    assert all(r["gradient_bytes"] == (10 * 3 + 3) * 4 and r["model"] == "linear" for r in got)
    assert got[0]["end_ns"] == got[1]["start_ns"] and got[1]["end_ns"] == got[2]["start_ns"]


def test_hook_model_counts_training_forwards(tmp_path, monkeypatch):
    torch = require_module("torch")
    monkeypatch.setenv("RINGSCOPE_MARKERS", str(tmp_path / "markers.jsonl"))
    markers.configure()
    model = markers.hook_model(torch.nn.Linear(10, 3))
    for _ in range(3):
        model(torch.randn(4, 10)).sum().backward()
    model.eval()
    model(torch.randn(4, 10))  # evaluation: not an iteration
    markers.close()
    got = lines(tmp_path / "markers.jsonl")
    assert [r["iteration"] for r in got] == [0, 1, 2]
    assert got[0]["gradient_bytes"] == (10 * 3 + 3) * 4


def test_import_stays_light():
    """Training scripts import markers: it must not pull in json, typing or anything heavy."""
    code = "import sys, capture.markers; print(sorted({'json', 'typing', 'torch', 'numpy'} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT)},
        timeout=30,
    ).stdout
    assert out.strip() == "[]"

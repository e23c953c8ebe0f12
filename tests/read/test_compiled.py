"""The two ways the packet kernel is compiled (ahead of time for this CPU, numba's JIT) give one answer,
a built run never imports numba, and a machine that cannot build falls back to the JIT once, saying so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import analyze.read.scan as scan_mod
from analyze.read import compiled as K
from analyze.read.formats import is_capture
from tests.support.expect import FIXTURES, ROOT
from tests.support.requirements import require
from tests.benchmarks.synth import ring_capture

FILES = sorted(
    p for d in ("formats", "linktypes", "accounting", "bad") for p in (FIXTURES / d).iterdir() if is_capture(p)
)  # bad/corrupt.pcap has no capture magic: it never reaches a kernel


@pytest.fixture(scope="module")
def both() -> tuple[K.Kernels, K.Kernels]:
    """The extension (built here if this machine has not built it yet) and the JIT kernel."""
    mod = K._load_or_build()
    require(mod is not None, "needs a C compiler to build the ahead-of-time kernel (apt-get install gcc)")
    return K._from_module(mod, "aot"), K._jit()


def _scan(monkeypatch: pytest.MonkeyPatch, walkers: K.Kernels, paths: list[Path]) -> scan_mod.StreamScan:
    monkeypatch.setattr(scan_mod, "kernels", lambda: walkers)
    return scan_mod.scan_stream(paths, bin_ns=1_000_000, byte_mode=0)


def test_fixtures_give_identical_tables_either_way(monkeypatch: pytest.MonkeyPatch, both, tmp_path: Path) -> None:
    """Every table of every fixture (all formats, link types, damaged files) and of a ring capture read
    with tiny tables (so the flow table grows, cells flush and windows end mid-file) is bit-identical."""
    big = tmp_path / "ring.pcapng"
    truth = ring_capture(big, packets=200_000, fmt="pcapng", conns=16)
    assert len(FILES) >= 15
    for paths in [[p] for p in FILES]:
        _same(monkeypatch, both, paths)
    monkeypatch.setattr(scan_mod, "INITIAL_FLOWS", 4)
    monkeypatch.setattr(scan_mod, "CELLS_PER_FLUSH", 64)
    monkeypatch.setattr(scan_mod, "RECORDS_PER_CALL", 999)
    aot = _same(monkeypatch, both, [big])
    assert aot.keys.shape[0] == len(truth.packets) and aot.records == int(truth.packets.sum())
    # one signature each: a writable buffer (an inflated window was one) makes the JIT compile the kernel again
    jit = both[1]
    assert [len(getattr(jit, n).signatures) for n in ("scan_pcap", "scan_pcapng", "rehash")] == [1, 1, 1]


def _same(monkeypatch: pytest.MonkeyPatch, both: tuple[K.Kernels, K.Kernels], paths: list[Path]) -> scan_mod.StreamScan:
    aot, jit = (_scan(monkeypatch, w, paths) for w in both)
    for field in ("keys", "agg", "cell_flow", "cell_bin", "cell_bytes"):
        assert np.array_equal(getattr(aot, field), getattr(jit, field)), f"{paths[0].name}: {field} differs"
    assert [f.warnings for f in aot.files] == [f.warnings for f in jit.files]
    assert [f.kinds.tolist() for f in aot.files] == [f.kinds.tolist() for f in jit.files]
    return aot


def test_the_extension_refuses_arrays_it_was_not_compiled_for(both) -> None:
    """A wrong dtype would be read as raw memory by compiled code; the wrapper stops it with a TypeError."""
    aot, _ = both
    keys = np.zeros((4, 5), dtype=np.uint64)
    with pytest.raises(TypeError, match="argument 2 must be a C-contiguous 1-d int64 array"):
        aot.rehash(keys, 0, np.zeros(16, dtype=np.int32))
    with pytest.raises(TypeError, match="argument 0"):
        aot.rehash(np.asfortranarray(np.zeros((4, 5), dtype=np.uint64))[:, :2], 0, np.zeros(16, dtype=np.int64))
    slots = np.full(16, -1, dtype=np.int64)
    aot.rehash(keys, 4, slots)
    assert sorted(slots[slots >= 0].tolist()) == [0, 1, 2, 3]


def test_a_built_run_never_imports_numba(both) -> None:
    """The point of the extension: analysis without numba's ~0.6 s import and ~100 MB."""
    code = (
        "import sys; from analyze.api import analyze; from analyze.read.compiled import kernels; "
        f"r = analyze([{str(FIXTURES / 'example')!r}], workers=1); "
        "print(kernels().origin, 'numba' in sys.modules, len(r.flows))"
    )
    env = {k: v for k, v in os.environ.items() if k != "RINGSCOPE_KERNEL"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True, timeout=300
    )
    origin, numba_loaded, flows = out.stdout.split()
    assert (origin, numba_loaded) == ("aot", "False")
    assert int(flows) > 0


def test_without_a_compiler_the_run_says_so_once_and_uses_the_jit(tmp_path: Path) -> None:
    """CC=/bin/false: the first run reports the failed build in one line and still analyzes; the next
    run does not try again; both results equal a normal run's."""
    example = str(FIXTURES / "example")
    env = dict(os.environ, RINGSCOPE_CACHE_DIR=str(tmp_path / "cache"), CC="/bin/false")
    env.pop("RINGSCOPE_KERNEL", None)
    cli = [str(Path(sys.executable).with_name("ringscope")), "analyze", example, "--json"]
    first = subprocess.run(
        cli + [str(tmp_path / "a.json")], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert first.returncode == 0, first.stderr
    notes = [ln for ln in first.stderr.splitlines() if "could not compile the packet kernel" in ln]
    assert len(notes) == 1 and "using numba's JIT" in notes[0] and "Traceback" not in first.stderr
    second = subprocess.run(
        cli + [str(tmp_path / "b.json")], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert second.returncode == 0 and "compil" not in second.stderr, second.stderr
    normal = subprocess.run(
        cli + [str(tmp_path / "c.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in env.items() if k not in ("RINGSCOPE_CACHE_DIR", "CC")},
        timeout=300,
    )
    assert normal.returncode == 0, normal.stderr
    flows = [json.loads((tmp_path / f"{n}.json").read_text())["flows"] for n in "abc"]
    assert flows[0] == flows[1] == flows[2] and len(flows[0]) > 0


def test_an_unwritable_cache_is_one_line_and_the_jit(tmp_path: Path) -> None:
    """A kernel cache that cannot be created (a read-only home in a container) costs start-up, not the run."""
    env = dict(os.environ, RINGSCOPE_CACHE_DIR="/proc/ringscope-cannot-exist")
    env.pop("RINGSCOPE_KERNEL", None)
    cli = [
        str(Path(sys.executable).with_name("ringscope")),
        "analyze",
        str(FIXTURES / "example"),
        "--json",
        str(tmp_path / "r.json"),
    ]
    out = subprocess.run(cli, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("\n") == 1 and "cannot keep a compiled kernel in /proc/ringscope-cannot-exist" in out.stderr
    assert json.loads((tmp_path / "r.json").read_text())["flows"]


def test_another_numba_builds_into_another_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The cache key reads numba's version file without importing numba; upgrading numba changes it, so an
    extension built by another numba is never loaded."""
    import importlib.machinery
    import importlib.util

    pkg = tmp_path / "numba"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    spec = importlib.machinery.ModuleSpec("numba", None, origin=str(pkg / "__init__.py"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec if name == "numba" else None)
    dirs = []
    for version in ("0.68.1", "0.69.0"):
        (pkg / "_version.py").write_text(f'version_json = \'{{"version": "{version}"}}\'\n')
        dirs.append(K.build_dir())
    assert dirs[0] != dirs[1] and dirs[0].parent == dirs[1].parent
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert K.build_dir() not in dirs  # no numba at all: a key of its own


def test_a_new_build_removes_builds_unused_for_a_month(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every upgrade makes a new ~0.6 MB build: the one made now prunes builds (and their lock, log and
    failure marks) that no run has loaded for 30 days, and keeps recent ones (another CPU sharing the home)."""
    monkeypatch.setenv("RINGSCOPE_CACHE_DIR", str(tmp_path))
    root = K.build_dir().parent
    root.mkdir(parents=True)
    month_ago = time.time() - K.STALE_S - 60
    for name in ("old", "old.tmp123"):  # a build, and the work directory of one that was killed
        (root / name).mkdir()
    for name in ("old.lock", "old.log", "failed.failed"):
        (root / name).write_text("x")
    for p in root.iterdir():
        os.utime(p, (month_ago, month_ago))
    (root / "recent").mkdir()
    real = K.build_dir()
    monkeypatch.setattr(K, "_build_in_subprocess", lambda dest: dest.mkdir() or True)  # a build that succeeds
    monkeypatch.setattr(K, "_import", lambda dest: None)
    K._load_or_build()
    assert sorted(p.name for p in root.iterdir()) == sorted(["recent", real.name, real.name + ".lock"])
    assert real.is_dir()


def test_loading_a_build_marks_it_used_at_most_daily(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    dest = tmp_path / "build"
    dest.mkdir()
    day_ago = time.time() - K.USED_EVERY_S - 60
    os.utime(dest, (day_ago, day_ago))
    K._note_use(dest)
    fresh = dest.stat().st_mtime
    assert time.time() - fresh < 60
    K._note_use(dest)
    assert dest.stat().st_mtime == fresh

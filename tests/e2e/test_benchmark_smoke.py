"""The on-demand benchmark still runs end to end (at toy size), so its figures can be re-measured.

Not a timing test: what it asserts is the benchmark's own agreement checks, which stop it with an error
when ringscope, scapy or pyshark disagree with the generator's ground truth (or with dpkt on the prefix),
when 1 and 2 workers disagree, or when the ring is not reconstructed in launch order.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from analyze.read.compiled import cache_root
from tests.support.requirements import have, require


@pytest.mark.slow  # the whole benchmark at toy size (about 25 s): left out of the quick tier
def test_benchmark_runs_and_every_tool_agrees(tmp_path: Path) -> None:
    require(Path("/usr/bin/time").exists(), "needs GNU time (apt-get install time)")
    require(have("tshark"), "needs tshark for pyshark (apt-get install tshark)")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.benchmarks.run_benchmark",
            "--packets",
            "20000",
            "--skip-slow",
            "--repeat",
            "1",
            "--prefix",
            "2000",
            "--parallel",
            "20000",
            "--hosts",
            "3",
            "--compressed",
            "--convert",
            "--roce",
            "--dir",
            str(tmp_path),
            "--kernel-cache",  # built by the tests before: neither built nor JIT-compiled twice (3 minutes)
            str(cache_root()),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    for row in (
        "cat",
        "ringscope analyze ",
        "numba JIT kernel",
        "read+aggregate core, 1 worker",
        "mapping the file's pages",
        "scapy (first 2,000 packets",
        "pyshark (first",
        "convert: ringscope convert --workers 1",
        "convert: ringscope analyze (the dataset)",
        "compressed: igzip alone",
        "compressed: analyze .gz = ",
        "compressed: 2 hosts' .gz",
        "roce: ringscope analyze, 20,000 RoCEv2 packets",
    ):
        assert row in out, f"no {row!r} row:\n{out}"
    assert "skipped" not in out, out
    ratio = re.search(r"core takes ([\d.]+)x as long", out)
    assert ratio and float(ratio.group(1)) > 0, out
    assert re.search(r"parallel: 3 hosts' files x 20,000 packets: whole process 1 worker [\d.]+ s", out), out
    for suffix in (".gz", ".zst"):
        assert re.search(rf"ringscope analyze {suffix} +--workers 1 +[\d.]+ s .* the plain file", out), out
    assert "zcat alone" in out, out
    assert not list(tmp_path.glob("*.pcap")), "the generated captures were left behind"

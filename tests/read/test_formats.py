"""Capture containers: classic pcap (µs/ns, both byte orders), pcapng (sections, interfaces, blocks), gzip.

Every committed fixture is analyzed and compared with the ground truth written beside it by
fixtures/generate.py; the generator itself must reproduce the committed files byte for byte.
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from expect import FIXTURES, ROOT, capture_mismatches, flow_mismatches, run
from scenarios import SCENARIOS, load_truth, write_scenarios

FORMAT_FIXTURES = [n for n in SCENARIOS if n.startswith("formats/")]


@pytest.mark.parametrize("name", FORMAT_FIXTURES)
def test_fixture_matches_its_ground_truth(name: str) -> None:
    """Flows (packets, bytes, payload, first/last ns), record count, times and kinds are exact."""
    path = FIXTURES / name
    truth = load_truth(path)
    result = run([path])
    assert flow_mismatches(result, truth["flows"]) == []
    assert len(result.captures) == 1
    assert capture_mismatches(result.captures[0], truth) == []
    assert result.warnings == []


def test_pcapng_reads_every_interface_with_its_own_clock_and_link_type() -> None:
    """Five interfaces in two sections (LE then BE), 10^-9 / 2^-20 + if_tsoffset / µs clocks, odd blocks skipped."""
    path = FIXTURES / "formats/multi.pcapng"
    truth = load_truth(path)
    result = run([path])
    cap = result.captures[0]
    assert cap.linktypes == ["ethernet", "linux_sll", "linux_sll2", "raw"]
    assert cap.packets == truth["records"] == 96  # the NRB, ISB, unknown and custom blocks are not records
    # the 2^-20 interface's timestamps are not whole µs; the µs interface's are
    by_net = {f.src: f.start_ns for f in result.flows}
    assert by_net["10.2.0.1"] % 1000 != 0 and by_net["10.3.0.1"] % 1000 == 0


def test_microsecond_files_keep_microseconds_and_nanosecond_files_keep_nanoseconds() -> None:
    """The same traffic written at both resolutions: ns survive only in the ns file."""
    us = {(f.src, f.sport): f.start_ns for f in run([FIXTURES / "formats/pcap-us-le.pcap"]).flows}
    ns = {(f.src, f.sport): f.start_ns for f in run([FIXTURES / "formats/pcap-ns-be.pcap"]).flows}
    assert us.keys() == ns.keys()
    assert all(us[k] == ns[k] // 1000 * 1000 for k in us)
    assert any(ns[k] % 1000 for k in ns)


@pytest.mark.parametrize(
    "source,new_name",
    [
        ("formats/multi.pcapng", "capture.pcap0"),
        ("formats/gzip-pcapng.pcapng.gz", "trace"),
        ("formats/pcap-ns-be.pcap", "eth0.pcapng"),
    ],
)
def test_format_comes_from_magic_bytes_not_the_name(tmp_path: Path, source: str, new_name: str) -> None:
    """A misleading or missing extension changes nothing."""
    target = tmp_path / new_name
    shutil.copy(FIXTURES / source, target)
    truth = load_truth(FIXTURES / source)
    result = run([target])
    assert flow_mismatches(result, truth["flows"]) == []
    assert result.captures[0].format == truth["format"]


def test_folder_is_searched_by_content(tmp_path: Path) -> None:
    """A folder of captures beside JSON and text files: only the captures are read, each once."""
    names = ["formats/pcap-us-le.pcap", "linktypes/raw-ip.pcap", "formats/gzip-pcapng.pcapng.gz"]
    write_scenarios(tmp_path, names)  # also writes each .truth.json beside its capture
    (tmp_path / "notes.txt").write_text("not a capture\n")
    result = run([tmp_path])
    assert sorted(Path(c.path).name for c in result.captures) == sorted(Path(n).name for n in names)
    assert sum(c.packets for c in result.captures) == sum(load_truth(tmp_path / n)["records"] for n in names)


def test_generator_reproduces_the_committed_fixtures(tmp_path: Path) -> None:
    """fixtures/generate.py is deterministic and the committed captures and truth files are current."""
    subprocess.run(
        [sys.executable, str(ROOT / "fixtures/generate.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert len(generated) > 40
    differ = [str(rel) for rel in generated if not filecmp.cmp(tmp_path / rel, FIXTURES / rel, shallow=False)]
    assert differ == []

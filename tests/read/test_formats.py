"""Capture containers: classic pcap (µs/ns, both byte orders), pcapng (sections, interfaces, blocks), gzip, zstd.

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

from tests.support.expect import FIXTURES, ROOT, capture_mismatches, flow_mismatches, run
from tests.support.pcapgen import record_offsets
from tests.support.scenarios import SCENARIOS, load_truth, write_scenarios

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
        [sys.executable, "-m", "fixtures.generate", "--out", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert len(generated) > 40
    differ = [str(rel) for rel in generated if not filecmp.cmp(tmp_path / rel, FIXTURES / rel, shallow=False)]
    assert differ == []


def test_raw_gzip_zstd_and_rotated_zstd_give_the_same_flows(tmp_path: Path) -> None:
    """A real capture (one host of the committed 100 Mbit/s DDP run) as the plain pcap, gzip -6, zstd -3 and a
    rotated set of three .zst files cut at record boundaries (tcpdump -C with zstd afterwards): every flow and
    series cell the same, the TCP state carried across the rotated files (no byte counted as re-sent)."""
    import gzip

    import pyzstd

    plain = gzip.decompress((ROOT / "fixtures/real-training/ddp-100mbit/run/h2/eth0.pcap.gz").read_bytes())
    header, starts = plain[:24], record_offsets(plain)
    cuts = [starts[len(starts) // 3], starts[2 * len(starts) // 3]]
    files = {
        "raw": [tmp_path / "raw" / "eth0.pcap"],
        "gzip": [tmp_path / "gz" / "eth0.pcap.gz"],
        "zstd": [tmp_path / "zst" / "eth0.pcap.zst"],
        "rotated": [tmp_path / "rot" / f"eth0.pcap{i}.zst" for i in range(3)],
    }
    for paths in files.values():
        paths[0].parent.mkdir()
    files["raw"][0].write_bytes(plain)
    files["gzip"][0].write_bytes(gzip.compress(plain, 6))
    files["zstd"][0].write_bytes(pyzstd.compress(plain, 3))
    for path, (a, b) in zip(files["rotated"], [(24, cuts[0]), (cuts[0], cuts[1]), (cuts[1], len(plain))]):
        path.write_bytes(pyzstd.compress(header + plain[a:b], 3))
    results = {name: run([paths[0].parent]) for name, paths in files.items()}
    want = results["raw"]
    assert len(want.flows) > 4 and sum(f.retransmitted_bytes for f in want.flows) == 0
    for name, got in results.items():
        assert [f.__dict__ | {"seen_by": None, "view": None} for f in got.flows] == [
            f.__dict__ | {"seen_by": None, "view": None} for f in want.flows
        ], name
        assert got.tables.flow_series.equals(want.tables.flow_series), name
        assert got.warnings == [], (name, got.warnings)
    assert {c.format for c in results["zstd"].captures} == {"pcap-us-le+zstd"}
    assert len(results["rotated"].captures) == 3

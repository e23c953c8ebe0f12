"""Bad input ends in one clear line and exit code 2, or in a counted warning with the valid part analyzed.

Never a traceback, never a hang (every run has a timeout).
"""

from __future__ import annotations

import gzip
import random
import struct
import zlib
from pathlib import Path

import pytest

from tests.support.clirun import one_line_error, ringscope
from tests.support.expect import FIXTURES, FLOW_FIELDS, flow_mismatches, run
from tests.support.oracles import dpkt_flows
from tests.support.pcapgen import (
    BASE_NS,
    ETHERNET,
    Block,
    Frame,
    Section,
    gzip_bytes,
    pcap_bytes,
    pcapng_bytes,
    truth,
    write,
)
from tests.support.requirements import is_root
from tests.support.scenarios import load_truth, mixed, multi_pcapng


def test_truncated_last_record_warns_and_keeps_the_rest() -> None:
    """tcpdump killed mid-write: the cut record is ignored with a warning naming file and offset."""
    path = FIXTURES / "bad/truncated.pcap"
    t = load_truth(path)
    result = run([path])
    assert flow_mismatches(result, t["flows"]) == []
    assert result.captures[0].packets == t["records"]
    assert result.warnings == [
        f"{path}: offset {t['truncated_at']}: last record truncated "
        f"({t['ignored_bytes']} bytes ignored; capture was cut short)"
    ]
    proc = ringscope("analyze", path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert f"warning: {path}: offset {t['truncated_at']}" in proc.stdout


def test_corrupt_magic_is_one_line_error() -> None:
    """Not a capture at all: the line names the file, offset 0 and the bytes found."""
    path = FIXTURES / "bad/corrupt.pcap"
    line = one_line_error(ringscope("analyze", path))
    assert f"{path}: offset 0: not a pcap, pcapng, gzip or zstd file (magic bytes deadbeef)" in line


def _unreadable(tmp_path: Path) -> tuple[Path, str]:
    if is_root():  # root reads any file; /proc/self/mem exists but fails on the first read (EIO)
        return Path("/proc/self/mem"), "cannot open"
    path = write(tmp_path / "secret.pcap", pcap_bytes([], linktype=1)[0])
    path.chmod(0)
    return path, "cannot open (Permission denied)"


CASES = {
    "empty": (lambda d: write(d / "empty.pcap", b""), "offset 0: empty file"),
    "not a capture": (lambda d: write(d / "notes.pcap", b"hello, I am text\n" * 4), "offset 0: not a pcap"),
    "header cut short": (
        lambda d: write(d / "short.pcap", b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00"),
        "offset 8: pcap file header cut short",
    ),
    # fixed bytes: random ones after the magic can read as a header or a Huffman block that inflates a few bytes
    "gzip of garbage": (
        lambda d: write(d / "x.pcap.gz", b"\x1f\x8b" + bytes(range(64))),
        "offset 0: not a readable gzip",
    ),
    "gzip header alone": (
        lambda d: write(d / "x.pcap.gz", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"),
        "offset 0: not a readable gzip file (it ends before its first inflated byte)",
    ),
    "zstd frame header alone": (
        lambda d: write(d / "x.pcap.zst", b"\x28\xb5\x2f\xfd\x04\x58"),
        "offset 0: not a readable zstd file (it ends before its first inflated byte)",
    ),
    "gzip of text": (lambda d: write(d / "log.gz", gzip_bytes(b"INFO all good\n" * 10)), "offset 0: not a pcap"),
    "missing": (lambda d: d / "nowhere.pcap", "offset 0: no such file or directory"),
    "folder without captures": (
        lambda d: write(d / "empty" / "README.txt", b"x").parent,
        "no pcap, pcapng, gzip or zstd capture found",
    ),
    "unreadable": (None, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_unusable_input_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    """Each way a file can be unusable gives one line naming it, the offset and the cause."""
    make, fragment = CASES[case]
    path, fragment = _unreadable(tmp_path) if make is None else (make(tmp_path), fragment)
    line = one_line_error(ringscope("analyze", path))
    assert str(path) in line and fragment in line


def test_no_path_at_all_says_so() -> None:
    """The Python API called with no paths: the error says what is missing (it once began with ': ')."""
    from analyze.api import analyze
    from analyze.read.formats import FileError

    with pytest.raises(FileError, match=r"^no capture path given"):
        analyze([])


def test_one_bad_file_among_good_ones_is_named(tmp_path: Path) -> None:
    """The error names the file at fault, not the run."""
    bad = write(tmp_path / "b.pcap", b"")
    line = one_line_error(ringscope("analyze", FIXTURES / "formats/pcap-us-le.pcap", bad))
    assert f"{bad}: offset 0: empty file" in line


def _counted(result) -> dict:  # noqa: ANN001
    """Packets, IP and payload bytes per flow, as the dpkt oracle counts them."""
    return {
        (f.src, f.dst, f.sport, f.dport, f.proto): {
            "packets": f.packets,
            "ip_bytes": f.bytes,
            "payload_bytes": f.payload_bytes,
        }
        for f in result.flows
    }


def test_gzip_cut_short_warns_and_keeps_what_was_inflated(tmp_path: Path) -> None:
    """A .gz copied while tcpdump -z gzip was still writing: every complete record inflated is analyzed."""
    whole = gzip_bytes((FIXTURES / "example/h1/eth0.pcap").read_bytes())
    cut = write(tmp_path / "eth0.pcap1.gz", whole[: len(whole) * 3 // 5])
    prefix = zlib.decompressobj(wbits=31).decompress(cut.read_bytes())
    oracle = dpkt_flows(write(tmp_path / "prefix" / "eth0.pcap", prefix))
    result = run([cut])
    got = _counted(result)
    assert got == dict(oracle) and sum(v["packets"] for v in got.values()) > 1000
    assert any("gzip stream ends early" in w for w in result.warnings)
    assert all(str(cut) in w for w in result.warnings)
    proc = ringscope("analyze", cut)
    assert proc.returncode == 0 and "gzip stream ends early" in proc.stdout


def test_zstd_cut_short_warns_and_keeps_what_was_inflated(tmp_path: Path) -> None:
    """The same for a .zst cut mid-frame (zstd -3 in 64 KiB frames, as a streaming compressor writes them): the
    complete frames are analyzed, with a warning naming the file."""
    import pyzstd

    plain = (FIXTURES / "example/h1/eth0.pcap").read_bytes()
    step = 1 << 16
    frames = [pyzstd.compress(plain[i : i + step], 3) for i in range(0, len(plain), step)]
    keep = len(frames) * 3 // 5
    cut = write(tmp_path / "eth0.pcap1.zst", b"".join(frames[:keep]) + frames[keep][: len(frames[keep]) // 2])
    oracle = dpkt_flows(write(tmp_path / "prefix" / "eth0.pcap", plain[: keep * step]))
    result = run([cut])
    got = _counted(result)
    assert got == dict(oracle) and sum(v["packets"] for v in got.values()) > 1000
    assert any("zstd stream ends early" in w and str(cut) in w for w in result.warnings), result.warnings


def _corrupt_caplen(frames: list[Frame], k: int) -> tuple[bytes, list[Frame], int]:
    """A classic pcap whose k-th record claims a 2 GB capture length: (bytes, frames written, that record's offset)."""
    data, written = pcap_bytes(frames, linktype=1, nano=True)
    offset = 24 + sum(16 + len(f.data) for f in written[:k])
    damaged = bytearray(data)
    struct.pack_into("<I", damaged, offset + 8, 0x7FFFFFFF)
    return bytes(damaged), written, offset


def test_corrupt_record_header_skips_only_that_record(tmp_path: Path) -> None:
    """A record claiming a 2 GB capture length: reading resumes at the next record, every other frame is analyzed."""
    k = 9
    data, written, offset = _corrupt_caplen(mixed(ETHERNET, 30, BASE_NS), k)
    path = write(tmp_path / "bad.pcap", data)
    result = run([path])
    assert flow_mismatches(result, truth(written[:k] + written[k + 1 :])["flows"]) == []
    assert result.captures[0].packets == len(written) - 1
    skipped = 16 + len(written[k].data)
    assert result.warnings == [
        f"{path}: offset {offset}: corrupt record header; skipped {skipped} bytes "
        f"to the next valid record at offset {offset + skipped}"
    ]


def test_corrupt_last_record_header_skips_the_rest(tmp_path: Path) -> None:
    """No valid record after the damage: the records before it are analyzed, the rest is skipped with a warning."""
    frames = mixed(ETHERNET, 31, BASE_NS)
    data, written, offset = _corrupt_caplen(frames, len(frames) - 1)
    path = write(tmp_path / "bad.pcap", data)
    result = run([path])
    assert flow_mismatches(result, truth(written[:-1])["flows"]) == []
    assert result.warnings == [
        f"{path}: offset {offset}: corrupt record header; the remaining {len(data) - offset} bytes were skipped"
    ]


def test_garbage_between_two_records_is_skipped(tmp_path: Path) -> None:
    """1000 random bytes spliced in at a record boundary: every frame is recovered, the warning counts the 1000."""
    frames = mixed(ETHERNET, 32, BASE_NS)
    data, written = pcap_bytes(frames, linktype=1, nano=True)
    at = 24 + sum(16 + len(f.data) for f in written[:12])
    junk = random.Random(1000).randbytes(1000)
    path = write(tmp_path / "junk.pcap", data[:at] + junk + data[at:])
    result = run([path])
    assert flow_mismatches(result, truth(written)["flows"]) == []
    assert result.captures[0].packets == len(written)
    assert result.warnings == [
        f"{path}: offset {at}: corrupt record header; skipped 1000 bytes to the next valid record at offset {at + 1000}"
    ]


def test_pcapng_corrupt_block_length_skips_only_that_block(tmp_path: Path) -> None:
    """An Enhanced Packet Block in the middle of a two-section pcapng with a length that cannot be: every
    other packet, in both sections and both byte orders, is analyzed."""
    sections, _ = multi_pcapng()
    data, written = pcapng_bytes(sections)
    first = sections[0]
    j = [n for n, it in enumerate(first.items) if isinstance(it, tuple)][15]  # the 16th packet of section 1
    epb = len(pcapng_bytes([Section(first.interfaces, first.items[:j])])[0])
    blen = len(pcapng_bytes([Section(first.interfaces, first.items[: j + 1])])[0]) - epb
    body = bytearray(data)
    struct.pack_into("<I", body, epb + 4, 0x7FFFFFF3)
    path = write(tmp_path / "blen.pcapng", bytes(body))
    result = run([path])
    assert flow_mismatches(result, truth(written[:15] + written[16:])["flows"]) == []
    assert result.captures[0].packets == len(written) - 1
    assert result.warnings == [
        f"{path}: offset {epb}: corrupt record header; skipped {blen} bytes "
        f"to the next valid record at offset {epb + blen}"
    ]


def test_pcapng_packet_on_an_undeclared_interface(tmp_path: Path) -> None:
    """An Enhanced Packet Block naming interface 7 of a 1-interface section is corrupt; it is the last block,
    so nothing valid follows: warning, rest skipped."""
    sections, _ = multi_pcapng()
    packets = [it for it in sections[0].items if isinstance(it, tuple) and it[0] == 0]
    data, written = pcapng_bytes([Section(sections[0].interfaces[:1], packets)])
    epb = len(pcapng_bytes([Section(sections[0].interfaces[:1], packets[:-1])])[0])  # where the last block starts
    body = bytearray(data)
    struct.pack_into("<I", body, epb + 8, 7)
    path = write(tmp_path / "iface.pcapng", bytes(body))
    result = run([path])
    assert flow_mismatches(result, truth(written[:-1])["flows"]) == []
    assert result.warnings == [
        f"{path}: offset {epb}: corrupt record header; the remaining {len(data) - epb} bytes were skipped"
    ]


def test_pcapng_simple_packet_block_too_short_for_its_length_field(tmp_path: Path) -> None:
    """A 12-byte Simple Packet Block has no original-length field: it is corrupt, not a packet of -4 bytes;
    the packets on either side of it count, and nothing else does."""
    sections, _ = multi_pcapng()
    packets = [it for it in sections[0].items if isinstance(it, tuple) and it[0] == 0][:6]
    itfs = sections[0].interfaces[:1]
    data, written = pcapng_bytes([Section(itfs, [*packets[:3], Block(3, b""), *packets[3:]])])
    spb = len(pcapng_bytes([Section(itfs, packets[:3])])[0])
    path = write(tmp_path / "spb.pcapng", data)
    result = run([path])
    assert flow_mismatches(result, truth(written)["flows"]) == []
    assert result.captures[0].packets == len(written) == 6
    assert result.warnings == [
        f"{path}: offset {spb}: corrupt record header; skipped 12 bytes to the next valid record at offset {spb + 12}"
    ]


def test_pcapng_cut_mid_block(tmp_path: Path) -> None:
    """A pcapng cut inside a block: every complete block is read, one warning."""
    data = gzip.decompress((FIXTURES / "formats/gzip-pcapng.pcapng.gz").read_bytes())
    path = write(tmp_path / "cut.pcapng", data[: len(data) - 100])
    result = run([path])
    assert len(result.warnings) == 1 and "last record truncated" in result.warnings[0]
    assert result.captures[0].packets == load_truth(FIXTURES / "formats/multi.pcapng")["records"] - 1


def test_header_without_packets_is_a_warning_not_an_error(tmp_path: Path) -> None:
    """A pcap header and nothing else (tcpdump stopped at once): exit 0, 'no packets'."""
    path = write(tmp_path / "idle.pcap", pcap_bytes([], linktype=1)[0])
    proc = ringscope("analyze", path)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {path}: no packets" in proc.stdout


def test_a_timestamp_damaged_to_1970_keeps_memory_bounded(tmp_path: Path) -> None:
    """One record's seconds field with its top byte zeroed (a found-by-Hypothesis case): the capture would span
    53 years, which at 10 ms bins once made the iteration code ask for 1.2 TiB. Every byte still counts, and the
    first record is named and left out of the series."""
    src = FIXTURES / "accounting" / "fragments.pcap"
    damaged = bytearray(src.read_bytes())
    damaged[24 + 3] = 0  # first record's ts_sec, most significant byte (little-endian file)
    path = write(tmp_path / "old-clock.pcap", bytes(damaged))
    result = run([path])
    byte_fields = {k: v for k, v in FLOW_FIELDS.items() if not k.endswith("_ns")}
    assert flow_mismatches(result, load_truth(src)["flows"], byte_fields) == []
    assert 10**18 < result.captures[0].first_ns <= result.captures[0].last_ns
    assert any("at offset 24 (1970-" in w for w in result.warnings), result.warnings

"""Compressed captures are inflated beside the scan into windows: whatever the window size, the scan reads
exactly what the plain file gives, damage included, and the inflating process never outlives the read."""

from __future__ import annotations

import os
import random
import signal
import struct
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pyzstd
import pytest

from analyze.read import inflate
from analyze.read.formats import open_capture
from analyze.read.scan import StreamScan, scan_stream
from tests.support.expect import FIXTURES, same_scan
from tests.support.pcapgen import gzip_bytes, write

OPTS = dict(bin_ns=1_000_000, byte_mode=0)
PLAIN = [FIXTURES / "example/h1/eth0.pcap", FIXTURES / "formats/multi.pcapng"]


def _compressed(tmp_path: Path, plain: bytes, kind: str, name: str = "eth0") -> Path:
    if kind == "gzip":
        return write(tmp_path / f"{name}.pcap.gz", gzip_bytes(plain))
    return write(tmp_path / f"{name}.pcap.zst", pyzstd.compress(plain, 3))


def _as_plain(got: StreamScan, plain: Path) -> StreamScan:
    """The scan with its file's name and format as the plain file's, for comparing everything else."""
    files = [replace(f, path=str(plain), format=f.format.split("+")[0]) for f in got.files]
    for f in files:
        f.warnings = [w.replace(got.files[0].path, str(plain)) for w in f.warnings]
    return replace(got, files=files)


def _small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slots of 5,003 bytes (records cross almost every slot's end), 16 KiB carried while searching after damage."""
    monkeypatch.setattr(inflate, "SLOT", 5_003)
    monkeypatch.setattr(inflate, "LOOKAHEAD", 16 << 10)


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
@pytest.mark.parametrize("plain", PLAIN, ids=lambda p: p.name)
@pytest.mark.parametrize("small", [False, True], ids=["default-windows", "small-windows"])
def test_a_compressed_file_reads_as_the_plain_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, plain: Path, small: bool
) -> None:
    if small:
        _small_windows(monkeypatch)
    packed = _compressed(tmp_path, plain.read_bytes(), kind)
    got = scan_stream([packed], **OPTS)
    assert got.files[0].format.endswith("+" + kind) and got.files[0].file_bytes == plain.stat().st_size
    same_scan(_as_plain(got, plain), scan_stream([plain], **OPTS))


def _damaged(plain: bytes, at: int, garbage: int, seed: int) -> bytes:
    """The classic pcap with `garbage` random bytes written over it from the record starting after `at`, the
    first of them a capture length no record can have."""
    pos = 24
    while pos < at:
        pos += 16 + struct.unpack_from("<I", plain, pos + 8)[0]
    noise = bytearray(random.Random(seed).randbytes(garbage))
    noise[8:12] = struct.pack("<I", 0x7FFFFFFF)
    return plain[:pos] + bytes(noise) + plain[pos + garbage :]


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
@pytest.mark.parametrize("garbage", [16, 40_000], ids=["one-header", "across-windows"])
def test_damage_is_skipped_to_the_same_record_with_the_same_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, garbage: int
) -> None:
    """A damaged stretch in the middle of a compressed capture: the search for the next valid record goes on
    across windows (40 kB of garbage against 5 kB slots) and stops where it stops in the plain file, and
    the warning names the same offsets (in the inflated stream)."""
    _small_windows(monkeypatch)
    data = _damaged((FIXTURES / "example/h1/eth0.pcap").read_bytes(), 150_000, garbage, seed=garbage)
    plain = write(tmp_path / "plain" / "eth0.pcap", data)
    want = scan_stream([plain], **OPTS)
    assert any("corrupt record header; skipped" in w for w in want.files[0].warnings)
    same_scan(_as_plain(scan_stream([_compressed(tmp_path, data, kind)], **OPTS), plain), want)


@pytest.mark.parametrize(
    "how, said",
    [("raise", "inflating stopped (MemoryError: killed mid-way)"), ("kill", "inflating stopped (signal 9)")],
)
def test_an_inflating_process_that_dies_leaves_a_note_and_what_it_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, said: str
) -> None:
    """The child inflates a first piece and then fails (an exception, or killed by the kernel's OOM killer):
    what it handed over is analyzed, and the file's warning says why the rest was not read."""
    plain = (FIXTURES / "example/h1/eth0.pcap").read_bytes()
    packed = _compressed(tmp_path, plain, "gzip")
    real = inflate.pieces

    def failing(*args: object) -> Iterator[object]:
        for i, piece in enumerate(real(*args)):  # type: ignore[arg-type]
            if i == 1:
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise MemoryError("killed mid-way")
            yield piece

    _small_windows(monkeypatch)
    monkeypatch.setattr(inflate, "PIECE", 100_000)
    monkeypatch.setattr(inflate, "pieces", failing)
    got = scan_stream([packed], **OPTS)
    assert 50_000 < got.files[0].file_bytes <= 100_000 and got.records > 100
    assert any(f"{said}; the rest of the file was not read" in w for w in got.files[0].warnings), got.files[0].warnings


def test_a_read_that_stops_early_takes_its_inflating_process_with_it(tmp_path: Path) -> None:
    """The scan stops before the end (an error, or only the header was wanted): the child is killed and
    reaped, not left behind blocked on a full ring."""
    plain = (FIXTURES / "example/h1/eth0.pcap").read_bytes()
    packed = _compressed(tmp_path, plain * 40, "zstd")  # 16 MB: more than the ring holds
    with open_capture(packed) as cap:
        assert not cap.final
        child = cap._windows._inflater.pid  # type: ignore[union-attr]
        assert child > 0
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)


@pytest.mark.parametrize("cut", [False, True], ids=["whole", "cut-mid-frame"])
def test_zstd_reads_the_same_without_libzstd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: bool) -> None:
    """Where the system has no libzstd the child decodes with pyzstd's pieces instead of straight into the ring:
    the same records, the same counters, the same note for a stream cut mid-frame."""
    plain = (FIXTURES / "example/h1/eth0.pcap").read_bytes()
    data = pyzstd.compress(plain, 3)
    packed = write(tmp_path / "eth0.pcap.zst", data[: len(data) * 2 // 3] if cut else data)
    direct = scan_stream([packed], **OPTS)
    assert inflate.zstd_library() is not None, "libzstd.so.1 is on this machine: the direct path is the one tested"
    monkeypatch.setattr(inflate, "zstd_library", lambda: None)
    pieces = scan_stream([packed], **OPTS)
    same_scan(pieces, direct)
    assert direct.files[0].warnings == pieces.files[0].warnings
    assert ("zstd stream ends early" in " ".join(direct.files[0].warnings)) == cut


def test_real_training_traffic_reads_the_same_plain_gzip_and_zstd(tmp_path: Path) -> None:
    """A real DDP capture (fixtures/real-training, tcpdump's own gzip): inflated, as zstd (libzstd straight into the
    ring) and plain, the same flows, counters and series."""
    import gzip

    packed = FIXTURES / "real-training" / "ddp-100mbit" / "run" / "h1" / "eth0.pcap.gz"
    plain = write(tmp_path / "plain" / "eth0.pcap", gzip.decompress(packed.read_bytes()))
    want = scan_stream([plain], **OPTS)
    assert want.records > 1000
    for other in (packed, _compressed(tmp_path, plain.read_bytes(), "zstd")):
        same_scan(_as_plain(scan_stream([other], **OPTS), plain), want)

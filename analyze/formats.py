"""Recognise a capture file by its magic bytes and map it into memory for the kernel.

Extensions lie (tcpdump's rotated files are `x.pcap0`, `x.pcap1`; strftime names have none), so the
first bytes decide: classic pcap in either byte order with µs or ns timestamps, pcapng, or gzip of
either. A gzip file is inflated once into a temporary file so it can be memory-mapped like the rest.
"""
from __future__ import annotations

import gzip
import mmap
import shutil
import struct
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": (False, False),  # (swapped vs little-endian reader, nanosecond)
    b"\xa1\xb2\xc3\xd4": (True, False),
    b"\x4d\x3c\xb2\xa1": (False, True),
    b"\xa1\xb2\x3c\x4d": (True, True),
}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
GZIP_MAGIC = b"\x1f\x8b"


class FileError(Exception):
    """A capture file that cannot be read at all: the message names file, offset and cause."""


@dataclass
class CaptureFormat:
    """An open, memory-mapped capture and what its header says."""

    path: Path
    kind: str  # "pcap" | "pcapng"
    format_name: str
    buffer: np.ndarray
    file_bytes: int
    data_offset: int = 0
    swapped: bool = False
    nano: bool = False
    linktype: int = 0
    warnings: list[str] = field(default_factory=list)
    _mm: mmap.mmap | None = None

    def release(self, start: int, upto: int) -> int:
        """Tell the kernel the pages in [start, upto) are done, so resident memory stays bounded."""
        stop = upto - upto % mmap.PAGESIZE
        if self._mm is not None and stop > start and hasattr(self._mm, "madvise"):
            self._mm.madvise(mmap.MADV_DONTNEED, start, stop - start)
            return stop
        return start


def sniff(head: bytes) -> str:
    """Name the container from the first bytes: 'pcap', 'pcapng', 'gzip' or 'unknown'."""
    if head[:4] in PCAP_MAGICS:
        return "pcap"
    if head[:4] == PCAPNG_MAGIC:
        return "pcapng"
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    return "unknown"


@contextmanager
def open_capture(path: Path, tmp_dir: str | None = None) -> Iterator[CaptureFormat]:
    """Open a capture for scanning; gzip input is inflated to a temporary file first."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise FileError(f"{path}: offset 0: cannot open ({exc.strerror or exc})") from None
    kind = sniff(head)
    if kind == "gzip":
        with tempfile.TemporaryDirectory(dir=tmp_dir, prefix="ringscope-") as tmp:
            plain = Path(tmp) / "inflated"
            note = _inflate(path, plain)
            with _map(plain, display=path, compressed=True) as cap:
                if note:
                    cap.warnings.append(note)
                yield cap
        return
    with _map(path, display=path, compressed=False) as cap:
        yield cap


def _inflate(src: Path, dst: Path) -> str | None:
    """Inflate src into dst in bounded pieces; a cut-off gzip keeps what was inflated and says so."""
    try:
        with gzip.open(src, "rb") as gz, open(dst, "wb") as out:
            shutil.copyfileobj(gz, out, 1 << 20)
    except EOFError:
        return f"{src}: gzip stream ends early; analyzed the {dst.stat().st_size} bytes inflated before the cut"
    except (OSError, zlib.error) as exc:
        if dst.exists() and dst.stat().st_size > 24:
            return f"{src}: gzip data is corrupt ({exc}); analyzed the {dst.stat().st_size} bytes inflated before it"
        raise FileError(f"{src}: offset 0: not a readable gzip file ({exc})") from None
    return None


@contextmanager
def _map(path: Path, display: Path, compressed: bool) -> Iterator[CaptureFormat]:
    size = path.stat().st_size
    if size == 0:
        raise FileError(f"{display}: offset 0: empty file (tcpdump stopped before writing a header?)")
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        buf = np.frombuffer(mm, dtype=np.uint8)
        cap = _parse_header(display, buf, size, compressed)
        cap._mm = mm
        yield cap
        del buf, cap
    finally:
        try:
            mm.close()
        except BufferError:  # a numpy view still alive; the mapping goes when it does
            pass


def _parse_header(path: Path, buf: np.ndarray, size: int, compressed: bool) -> CaptureFormat:
    head = bytes(buf[:24])
    kind = sniff(head)
    suffix = "+gzip" if compressed else ""
    if kind == "pcap":
        swapped, nano = PCAP_MAGICS[head[:4]]
        if size < 24:
            raise FileError(f"{path}: offset {size}: pcap file header cut short ({size} of 24 bytes)")
        order = ">" if swapped else "<"
        linktype = struct.unpack(order + "I", head[20:24])[0] & 0xFFFF  # upper bits: FCS length flags
        return CaptureFormat(path=path, kind="pcap", buffer=buf, file_bytes=size, data_offset=24,
                             swapped=swapped, nano=nano, linktype=linktype,
                             format_name=f"pcap-{'ns' if nano else 'us'}-{'be' if swapped else 'le'}{suffix}")
    if kind == "pcapng":
        return CaptureFormat(path=path, kind="pcapng", buffer=buf, file_bytes=size, format_name="pcapng" + suffix)
    shown = head[:4].hex()
    raise FileError(f"{path}: offset 0: not a pcap, pcapng or gzip file (magic bytes {shown})")


def is_capture(path: Path) -> bool:
    """True when the file starts with a capture (or gzip) magic; used when searching folders."""
    try:
        with open(path, "rb") as fh:
            return sniff(fh.read(4)) != "unknown"
    except OSError:
        return False


__all__ = ["CaptureFormat", "FileError", "open_capture", "sniff", "is_capture", "first_timestamp_ns"]

"""Recognise a capture file by its magic bytes and map it into memory for the kernel.

Extensions lie (tcpdump's rotated files are `x.pcap0`, `x.pcap1`; strftime names have none), so the
first bytes decide: classic pcap in either byte order with µs or ns timestamps, pcapng, or gzip or zstd of
either. A compressed file is inflated once into a temporary file so it can be memory-mapped like the rest:
gzip with ISA-L's inflate (isal) where it is installed, 2.4x the standard library's zlib on the benchmark's
capture, else with zlib; zstd with the zstandard package.
"""

from __future__ import annotations

import mmap
import struct
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import numpy as np

PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": (False, False),  # (swapped vs little-endian reader, nanosecond)
    b"\xa1\xb2\xc3\xd4": (True, False),
    b"\x4d\x3c\xb2\xa1": (False, True),
    b"\xa1\xb2\x3c\x4d": (True, True),
}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
COMPRESSED = ("gzip", "zstd")

_gzip_zlib: ModuleType = zlib  # ISA-L's inflate where isal is installed (below), else the standard library's
_GZIP_ERRORS: tuple[type[Exception], ...] = (zlib.error,)
try:
    from isal import isal_zlib

    _gzip_zlib, _GZIP_ERRORS = isal_zlib, (isal_zlib.error, zlib.error)  # type: ignore[assignment]
except ImportError:
    pass


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
    """Name the container from the first bytes: 'pcap', 'pcapng', 'gzip', 'zstd' or 'unknown'."""
    if head[:4] in PCAP_MAGICS:
        return "pcap"
    if head[:4] == PCAPNG_MAGIC:
        return "pcapng"
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    if head[:4] == ZSTD_MAGIC:
        return "zstd"
    return "unknown"


def _decompressor(kind: str, path: Path) -> tuple[Callable[[], Any], tuple[type[Exception], ...]]:
    """A factory of streaming decompressors for one member or frame of KIND, and the errors they raise."""
    if kind == "gzip":
        return (lambda: _gzip_zlib.decompressobj(wbits=31)), _GZIP_ERRORS
    try:
        import zstandard
    except ImportError:
        raise FileError(f"{path}: offset 0: a zstd file needs the zstandard package (pip install zstandard)") from None
    context = zstandard.ZstdDecompressor()
    return context.decompressobj, (zstandard.ZstdError,)


@contextmanager
def open_capture(path: Path, tmp_dir: str | None = None) -> Iterator[CaptureFormat]:
    """Open a capture for scanning; gzip or zstd input is inflated to a temporary file first."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise FileError(f"{path}: offset 0: cannot open ({exc.strerror or exc})") from None
    kind = sniff(head)
    if kind in COMPRESSED:
        with tempfile.TemporaryDirectory(dir=tmp_dir, prefix="ringscope-") as tmp:
            plain = Path(tmp) / "inflated"
            note = _inflate(path, plain, kind)
            with _map(plain, display=path, compressed=kind) as cap:
                if note:
                    cap.warnings.append(note)
                yield cap
        return
    with _map(path, display=path, compressed="") as cap:
        yield cap


def _inflate(src: Path, dst: Path, kind: str) -> str | None:
    """Inflate src (gzip or zstd) into dst piece by piece (bounded memory, every gzip member or zstd frame).

    A cut-off or damaged stream keeps every byte inflated before the damage and says so.
    """
    new, errors = _decompressor(kind, src)
    d = new()
    fed = False  # the current member has started
    written = 0
    try:
        with open(src, "rb") as fh, open(dst, "wb") as out:
            while chunk := fh.read(1 << 20):
                while chunk:
                    fed = True
                    piece = d.decompress(chunk)
                    out.write(piece)
                    written += len(piece)
                    chunk = b""
                    if d.eof:  # next member or frame, if any
                        chunk, d, fed = d.unused_data, new(), False
            if kind == "gzip":
                out.write(d.flush())
    except errors as exc:
        if written > 24:
            return f"{src}: {kind} data is corrupt ({exc}); analyzed the {written} bytes inflated before it"
        raise FileError(f"{src}: offset 0: not a readable {kind} file ({exc})") from None
    if fed and not d.eof:
        return f"{src}: {kind} stream ends early; analyzed the {written} bytes inflated before the cut"
    return None


@contextmanager
def _map(path: Path, display: Path, compressed: str) -> Iterator[CaptureFormat]:
    """Map PATH read-only (errors and names as DISPLAY's; COMPRESSED: what it was inflated from, or "")."""
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


def _parse_header(path: Path, buf: np.ndarray, size: int, compressed: str) -> CaptureFormat:
    head = bytes(buf[:24])
    kind = sniff(head)
    suffix = f"+{compressed}" if compressed else ""
    if kind == "pcap":
        swapped, nano = PCAP_MAGICS[head[:4]]
        if size < 24:
            raise FileError(f"{path}: offset {size}: pcap file header cut short ({size} of 24 bytes)")
        order = ">" if swapped else "<"
        linktype = struct.unpack(order + "I", head[20:24])[0] & 0xFFFF  # upper bits: FCS length flags
        return CaptureFormat(
            path=path,
            kind="pcap",
            buffer=buf,
            file_bytes=size,
            data_offset=24,
            swapped=swapped,
            nano=nano,
            linktype=linktype,
            format_name=f"pcap-{'ns' if nano else 'us'}-{'be' if swapped else 'le'}{suffix}",
        )
    if kind == "pcapng":
        return CaptureFormat(path=path, kind="pcapng", buffer=buf, file_bytes=size, format_name="pcapng" + suffix)
    shown = head[:4].hex()
    raise FileError(f"{path}: offset 0: not a pcap, pcapng, gzip or zstd file (magic bytes {shown})")


def is_capture(path: Path) -> bool:
    """True when the file starts with a capture (or gzip or zstd) magic; used when searching folders."""
    try:
        with open(path, "rb") as fh:
            return sniff(fh.read(4)) != "unknown"
    except OSError:
        return False


def first_timestamp_ns(path: Path) -> int | None:
    """Timestamp of the first packet, for putting rotated files in time order (not name order).

    Reads at most 64 KiB of the file; None when no packet timestamp is found there.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536)
        kind = sniff(head)
        if kind in COMPRESSED:
            new, errors = _decompressor(kind, path)
            try:
                head = new().decompress(head)[:65536]
            except errors:
                return None
    except (OSError, FileError):
        return None
    kind = sniff(head)
    if kind == "pcap" and len(head) >= 32:
        swapped, nano = PCAP_MAGICS[head[:4]]
        sec, frac = struct.unpack((">" if swapped else "<") + "II", head[24:32])
        return sec * 1_000_000_000 + frac * (1 if nano else 1000)
    if kind == "pcapng":
        return _pcapng_first_ts(head)
    return None


def _pcapng_first_ts(head: bytes) -> int | None:
    """Walk the first blocks of a pcapng section to its first timestamped packet."""
    order, pos = "<", 0
    resol: list[int] = []
    while pos + 12 <= len(head):
        if head[pos : pos + 4] == PCAPNG_MAGIC:
            order = "<" if head[pos + 8 : pos + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            resol = []
        btype, blen = struct.unpack(order + "II", head[pos : pos + 8])
        if blen < 12 or pos + blen > len(head):
            return None
        if btype == 1:
            resol.append(_idb_resolution(head[pos + 16 : pos + blen - 4], order))
        elif btype in (2, 6) and pos + 20 <= len(head):
            iface = struct.unpack(
                order + ("H" if btype == 2 else "I"), head[pos + 8 : pos + (10 if btype == 2 else 12)]
            )[0]
            hi, lo = struct.unpack(order + "II", head[pos + 12 : pos + 20])
            if iface >= len(resol):
                return None
            units = 10 ** resol[iface] if resol[iface] < 128 else 2 ** (resol[iface] - 128)
            return ((hi << 32) | lo) * 1_000_000_000 // units
        pos += blen
    return None


def _idb_resolution(options: bytes, order: str) -> int:
    """if_tsresol of an IDB's options (6 = microseconds when absent); values >= 128 mean powers of two."""
    pos = 0
    while pos + 4 <= len(options):
        code, length = struct.unpack(order + "HH", options[pos : pos + 4])
        if code == 0:
            break
        if code == 9 and length >= 1:
            return options[pos + 4]
        pos += 4 + (length + 3) // 4 * 4
    return 6


__all__ = ["CaptureFormat", "FileError", "open_capture", "sniff", "is_capture", "first_timestamp_ns"]

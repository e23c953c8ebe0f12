"""Recognise a capture file by its magic bytes and map it into memory for the kernel.

Extensions lie (tcpdump's rotated files are `x.pcap0`, `x.pcap1`; strftime names have none), so the
first bytes decide: classic pcap in either byte order with µs or ns timestamps, pcapng, or gzip or zstd of
either. A plain file is memory-mapped whole; a compressed one is inflated beside the scan into windows
(analyze.read.inflate), which the kernel walks one after another.
"""

from __future__ import annotations

import mmap
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from analyze.read.inflate import COMPRESSED, InflateError, Inflater, Windows, inflate_head, inflated_size

PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": (False, False),  # (swapped vs little-endian reader, nanosecond)
    b"\xa1\xb2\xc3\xd4": (True, False),
    b"\x4d\x3c\xb2\xa1": (False, True),
    b"\xa1\xb2\x3c\x4d": (True, True),
}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class FileError(Exception):
    """A capture file that cannot be read at all: the message names file, offset and cause."""


@dataclass
class CaptureFormat:
    """An open capture and what its header says.

    buffer holds the bytes the kernel walks: the whole memory-mapped file, or the current window of an
    inflated one (base: the stream offset of its first byte; final: whether it ends where the data does).
    """

    path: Path
    kind: str  # "pcap" | "pcapng"
    format_name: str
    buffer: np.ndarray
    file_bytes: int
    data_offset: int = 0
    swapped: bool = False
    nano: bool = False
    linktype: int = 0
    snaplen: int = 0  # classic pcap's, from its file header
    warnings: list[str] = field(default_factory=list)
    base: int = 0
    final: bool = True
    _mm: mmap.mmap | None = None
    _windows: Optional[Windows] = None

    @property
    def inflated(self) -> bool:
        """Whether the file is gzip or zstd, read window by window as it is inflated."""
        return self._windows is not None

    def more(self, keep_from: int) -> bool:
        """Move to the next window, keeping buffer[keep_from:] at its front; False when the data ends here."""
        w = self._windows
        if w is None or w.final:
            return False
        w.advance(keep_from)
        self.buffer, self.base, self.final = w.window, w.base, w.final
        if w.final:
            self.file_bytes = w.base + len(w.window)
            if w.end.note:
                self.warnings.append(f"{self.path}: {w.end.note}")
        return True

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


@contextmanager
def open_capture(path: Path) -> Iterator[CaptureFormat]:
    """Open a capture for scanning: a plain file mapped whole, a gzip or zstd one inflated window by window."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise FileError(f"{path}: offset 0: cannot open ({exc.strerror or exc})") from None
    kind = sniff(head)
    if kind not in COMPRESSED:
        with _map(path) as cap:
            yield cap
        return
    try:
        inflater = Inflater(path, kind)
    except InflateError as exc:
        raise FileError(f"{path}: offset 0: {exc}") from None
    try:
        w = Windows(inflater)
        if w.end.fatal:
            raise FileError(f"{path}: offset 0: {w.end.fatal}")
        if not len(w.window):
            why = (w.end.note or "").removeprefix(
                f"{kind} "
            ) or f"empty {kind} file (tcpdump stopped before writing a header?)"
            raise FileError(f"{path}: offset 0: {why}")
        cap = _parse_header(path, w.window, len(w.window) if w.final else -1, kind)
        cap.base, cap.final, cap._windows = w.base, w.final, w
        if w.final and w.end.note:
            cap.warnings.append(f"{path}: {w.end.note}")
        yield cap
    finally:
        inflater.close()


@contextmanager
def _map(path: Path) -> Iterator[CaptureFormat]:
    """Map PATH read-only."""
    size = path.stat().st_size
    if size == 0:
        raise FileError(f"{path}: offset 0: empty file (tcpdump stopped before writing a header?)")
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        buf = np.frombuffer(mm, dtype=np.uint8)
        cap = _parse_header(path, buf, size, "")
        cap._mm = mm
        yield cap
        del buf, cap
    finally:
        try:
            mm.close()
        except BufferError:  # a numpy view still alive; the mapping goes when it does
            pass


def _parse_header(path: Path, buf: np.ndarray, size: int, compressed: str) -> CaptureFormat:
    """What the file header in buf says; size: the file's (inflated) size, -1 while not known yet."""
    head = bytes(buf[:24])
    kind = sniff(head)
    suffix = f"+{compressed}" if compressed else ""
    if kind == "pcap":
        swapped, nano = PCAP_MAGICS[head[:4]]
        if len(head) < 24:
            raise FileError(f"{path}: offset {len(head)}: pcap file header cut short ({len(head)} of 24 bytes)")
        order = ">" if swapped else "<"
        snaplen, linktype = struct.unpack(order + "II", head[16:24])
        linktype &= 0xFFFF  # upper bits: FCS length flags
        return CaptureFormat(
            path=path,
            kind="pcap",
            buffer=buf,
            file_bytes=size,
            data_offset=24,
            swapped=swapped,
            nano=nano,
            linktype=linktype,
            snaplen=snaplen,
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


def scan_bytes(path: Path) -> int:
    """About how many bytes a scan of the file walks: its size, or what it inflates to. 0 when unreadable."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(64)
            kind = sniff(head)
            if kind not in COMPRESSED:
                return size
            fh.seek(max(size - 4, 0))
            return inflated_size(kind, head, fh.read(4), size)
    except OSError:
        return 0


def inner_kind(path: Path) -> str:
    """What the file holds once inflated ('pcap', 'pcapng' or 'unknown'); a plain file's own kind."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536)
    except OSError:
        return "unknown"
    kind = sniff(head)
    if kind in COMPRESSED:
        try:
            return sniff(inflate_head(kind, head, 4))
        except InflateError:
            return "unknown"
    return kind


def first_timestamp_ns(path: Path) -> int | None:
    """Timestamp of the first packet, for putting rotated files in time order (not name order).

    Reads at most 64 KiB of the file; None when no packet timestamp is found there.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536)
        kind = sniff(head)
        if kind in COMPRESSED:
            head = inflate_head(kind, head, 65536)
    except (OSError, InflateError):
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


__all__ = [
    "CaptureFormat",
    "FileError",
    "open_capture",
    "sniff",
    "is_capture",
    "first_timestamp_ns",
    "scan_bytes",
    "inner_kind",
]

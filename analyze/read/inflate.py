"""Inflate a gzip or zstd capture in a process beside the scan, into bounded windows the kernel walks.

Why beside: inflating costs about twice what scanning the inflated bytes does (the benchmark's capture:
ISA-L 0.47 s, zstd 0.35 s, the scan 0.24 s), so one after the other the scan waits on it. Why a process and
not a thread: the compiled kernel holds the GIL while it walks a window, so an inflating thread stalls at
each hand-over (measured: 0.58 s for .gz, 0.62 s for .zst, against 0.47 s and 0.35 s for the inflate
alone); a pipe between processes costs 0.2 s of copying on its own. So a forked child inflates into a ring
of SLOTS shared-memory slots and the scan walks each slot where it lies, carrying the bytes of a record
cut by a slot's end into the space kept before the next slot. Nothing is written to disk, and memory stays
bounded: the ring, and the one piece of at most PIECE bytes the child holds.

gzip is inflated with ISA-L (isal) where it is installed, 2.4x the standard library's zlib on the
benchmark's capture, else with zlib, in pieces copied into the slots; zstd by the system's libzstd straight into
the slots (analyze.read.zstd_stream: no piece, no copy), else with Python 3.14's compression.zstd or pyzstd in
pieces (the same interface: output bounded per call, so a small bomb cannot take memory). Every gzip member and
zstd frame is read; a cut or damaged stream keeps every byte inflated before the damage, with a note.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import mmap
import os
import signal
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Optional, Union

import numpy as np

from analyze.read import layouts as L
from analyze.read import zstd_stream

COMPRESSED = ("gzip", "zstd")
PIECE = 16 << 20  # the most one inflate call returns (pieces are reused from the heap: _keep_freed_memory)
CHUNK = 1 << 18  # compressed bytes read at a time
GUESS_RATIO = 8  # how much a compressed capture is taken to inflate by, where it does not say
SLOT = 8 << 20  # inflated bytes per slot of the ring
SLOTS = 3  # the scan walks one slot while the child fills another
# Bytes that may be carried from one window to the next: a record cut by the window's end, or, while searching
# for the next valid record after damage, a chain of analyze.read.resync.CHAIN records of the largest size.
LOOKAHEAD = 4 * L.MAX_BLOCK_BYTES
PCAP_FILE_HEADER = 24  # bytes: an inflated stream shorter than this holds no capture to analyze

_gzip_zlib: ModuleType = zlib  # ISA-L's inflate where isal is installed (below), else the standard library's
_GZIP_ERRORS: tuple[type[Exception], ...] = (zlib.error,)
try:
    from isal import isal_zlib

    _gzip_zlib, _GZIP_ERRORS = isal_zlib, (isal_zlib.error, zlib.error)  # type: ignore[assignment]
except ImportError:
    pass


class InflateError(Exception):
    """Not a single byte could be inflated: the message says why (the caller names the file)."""


def decompressor(kind: str) -> tuple[Callable[[], Any], tuple[type[Exception], ...]]:
    """A factory of decompressors for one gzip member or zstd frame, and the errors they raise.

    Each has zlib's interface: decompress(data, max_length), eof, unused_data, unconsumed_tail or
    needs_input. InflateError when no zstd library is installed.
    """
    if kind == "gzip":
        return (lambda: _gzip_zlib.decompressobj(wbits=31)), _GZIP_ERRORS
    zstd = _zstd()
    return zstd.ZstdDecompressor, (zstd.ZstdError, EOFError)


def _zstd() -> ModuleType:
    """Python 3.14's compression.zstd, else pyzstd (the same interface); InflateError when neither is there."""
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14
    except ImportError:
        try:
            import pyzstd as zstd  # type: ignore[no-redef]
        except ImportError:
            raise InflateError("a zstd file needs the pyzstd package (pip install pyzstd)") from None
    return zstd  # type: ignore[no-any-return]


def decoder_for(path: Path, kind: str) -> "Decoder":
    """The decoder a child fills the ring with: zstd through libzstd's streaming API straight into the slots where
    the system has libzstd, else (and for gzip) the pieces of `pieces`, copied in."""
    if kind == "zstd" and (lib := zstd_library()) is not None:
        return ZstdDecoder(path, lib)
    new, errors = decompressor(kind)
    return PieceDecoder(pieces(path, kind, new, errors))


def zstd_library() -> Any:
    """libzstd for decoding straight into the ring (analyze.read.zstd_stream), or None."""
    return zstd_stream.library()


def inflate_head(kind: str, data: bytes, limit: int) -> bytes:
    """The first `limit` inflated bytes of `data` (the start of a compressed file); b"" when unreadable."""
    new, errors = decompressor(kind)
    try:
        return bytes(new().decompress(data, limit))
    except errors:
        return b""


def inflated_size(kind: str, head: bytes, tail: bytes, size: int) -> int:
    """About how many bytes a compressed file of `size` bytes inflates to, from its first and last bytes.

    gzip's last member ends with its length modulo 4 GiB; a zstd frame's header says its length when the
    compressor knew it. Otherwise GUESS_RATIO times the file (headers-only captures shrink 5 to 10 times).
    """
    if kind == "gzip" and len(tail) == 4 and (isize := int.from_bytes(tail, "little")) >= size:
        return isize
    if kind == "zstd":
        try:
            zstd = _zstd()
        except InflateError:
            return size * GUESS_RATIO
        try:
            found = zstd.get_frame_info(head).decompressed_size
        except zstd.ZstdError:
            found = None
        if found:
            return int(found)
    return size * GUESS_RATIO


def pieces(
    path: Path, kind: str, new: Callable[[], Any], errors: tuple[type[Exception], ...]
) -> Iterator[Union[bytes, "End"]]:
    """The inflated bytes of every member or frame of PATH in pieces of at most PIECE bytes, then an End.

    new, errors: decompressor(kind), looked up by the caller (a forked child imports nothing)."""
    d = new()
    fed = False  # the current member or frame has started
    written = 0
    try:
        with open(path, "rb") as fh:
            data = b""
            while True:
                if not data and _wants_input(d):
                    data = fh.read(CHUNK)
                    if not data:
                        break
                fed = True
                piece = d.decompress(data, PIECE)
                data = getattr(d, "unconsumed_tail", b"")  # zlib keeps what max_length left; zstd keeps it inside
                if piece:
                    written += len(piece)
                    yield piece
                if d.eof:  # the next member or frame, if any
                    data, d, fed = d.unused_data + data, new(), False
            if kind == "gzip" and fed and not d.eof and (rest := d.flush()):  # what zlib held back at the cut
                written += len(rest)
                yield rest
    except errors as exc:
        yield ending(kind, written, error=str(exc))
        return
    except OSError as exc:
        yield End(fatal=f"cannot read ({exc.strerror or exc})")
        return
    yield ending(kind, written, complete=not (fed and not d.eof))


def ending(kind: str, written: int, error: Optional[str] = None, complete: bool = True) -> End:
    """How a KIND stream that inflated WRITTEN bytes ended: damaged (ERROR) or cut (not COMPLETE) after a pcap's
    24-byte file header, a warning and the bytes before it analyzed; before it, nothing can be read. A stream cut
    before its first inflated byte was a fatal error too: random bytes after gzip's magic can read as a header
    that asks for more, and they said "analyzed the 0 bytes" where other random bytes said "not a readable gzip"."""
    if error is not None:
        if written > PCAP_FILE_HEADER:
            return End(f"{kind} data is corrupt ({error}); analyzed the {written} bytes inflated before it")
        return End(fatal=f"not a readable {kind} file ({error})")
    if not complete:
        if written == 0:
            return End(fatal=f"not a readable {kind} file (it ends before its first inflated byte)")
        return End(f"{kind} stream ends early; analyzed the {written} bytes inflated before the cut")
    return End()


def _wants_input(d: Any) -> bool:
    """Whether the decompressor has given all it can from the input so far."""
    return bool(getattr(d, "needs_input", True))


@dataclass(frozen=True)
class End:
    """How a compressed stream ended: note, a warning (cut or damaged); fatal, why nothing could be read."""

    note: Optional[str] = None
    fatal: Optional[str] = None


# glibc's malloc options (malloc.h): allocations below the first come from the heap, whose freed memory is reused;
# the heap is given back to the system only above the second.
_M_MMAP_THRESHOLD, _M_TRIM_THRESHOLD = -3, -1
HEAP_PIECES = 64 << 20


def _keep_freed_memory() -> None:
    """In the inflating child: let every piece come from the heap and stay there once freed.

    Why: zlib, ISA-L and pyzstd return each inflated piece in a new bytes object of up to PIECE bytes. glibc serves
    such sizes with a fresh mmap unless its threshold has risen past them, and it had not in a child forked from
    the scan's process: every piece then faulted its pages in anew. On the benchmark's 510 MB capture the child took
    0.59 s of CPU where a lone inflate takes 0.27 s; with the pieces reused, 0.31 s, and the whole `analyze` of the
    .gz 0.80 s instead of 1.03-1.15 s. No effect where the C library is not glibc (mallopt is absent or ignores it).
    """
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, HEAP_PIECES)
        libc.mallopt(_M_TRIM_THRESHOLD, 4 * HEAP_PIECES)
    except (OSError, AttributeError):
        pass


class Inflater:
    """A child process inflating one file into a ring of shared slots, which the scan walks in place.

    The child sends the length of each slot it filled over one pipe, and at the end how the stream ended (End,
    as JSON, after a negative length); the scan gives each slot back over another pipe. A child that dies
    without saying how the stream ended leaves a note that the rest was not read.
    """

    def __init__(self, path: Path, kind: str) -> None:
        decoder = decoder_for(path, kind)  # a missing library is said now, in the caller's process
        self.stride = LOOKAHEAD + SLOT  # a slot and the room before it for what is carried into it
        self.ring = mmap.mmap(-1, SLOTS * self.stride)  # anonymous and shared: the child writes, the scan reads
        filled_r, filled_w = os.pipe()
        freed_r, freed_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: inflate, then exit without running the parent's cleanup
            code = 0
            try:
                os.close(filled_r)
                os.close(freed_w)
                _keep_freed_memory()
                _fill_ring(self.ring, self.stride, decoder, filled_w, freed_r)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(filled_w)
        os.close(freed_r)
        self._filled, self._freed = filled_r, freed_w
        self.array = np.frombuffer(self.ring, dtype=np.uint8)
        self._slot = -1

    def next_slot(self) -> tuple[int, int, Optional[End]]:
        """Wait for the next filled slot: where its bytes start in the ring, how many, and the End after them."""
        self._slot = (self._slot + 1) % SLOTS
        start = self._slot * self.stride + LOOKAHEAD
        n = _read_int(self._filled)
        if n is None:
            return start, 0, self._died()
        if n < 0:
            return start, 0, End(**json.loads(_read_exactly(self._filled, -n)))
        return start, n, None

    def give_back(self) -> None:
        """The scan is done with the slot before the current one: the child may fill it again."""
        try:
            os.write(self._freed, b"\0")
        except BrokenPipeError:  # the child has inflated everything and is gone
            pass

    def _died(self) -> End:
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit code {os.WEXITSTATUS(status)}"
        return End(note=f"inflating stopped ({how}); the rest of the file was not read")

    def close(self) -> None:
        """Stop the child (the scan may stop first) and release the pipes; the ring goes with its last view."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0
        for fd in (self._filled, self._freed):
            os.close(fd)


def _fill_ring(ring: mmap.mmap, stride: int, decoder: "Decoder", filled: int, freed: int) -> None:
    """The child's work: fill the slots in turn, waiting for the scan to give one back when none is free.

    A failure while inflating (memory, a read error) still hands over what was inflated before it, and says why.
    """
    free, slot = SLOTS, 0
    view = memoryview(ring)
    ended: Optional[End] = None
    while ended is None:
        if free == 0:
            if not os.read(freed, 1):
                return  # the scan is gone
            free += 1
        free -= 1
        at = slot * stride + LOOKAHEAD
        try:
            n, ended = decoder.fill(view[at : at + SLOT])
        except Exception as exc:
            n, ended = (
                decoder.filled,
                End(note=f"inflating stopped ({type(exc).__name__}: {exc}); the rest of the file was not read"),
            )
        if n:
            os.write(filled, struct.pack("<q", n))
        slot = (slot + 1) % SLOTS
    said = json.dumps(dataclasses.asdict(ended)).encode()
    _write_all(filled, struct.pack("<q", -len(said)) + said)


class Decoder:
    """Fills a slot with the next inflated bytes: fill(view) returns how many it wrote and, once the stream is done,
    how it ended; `filled` is what the current fill had written when it raised."""

    filled = 0

    def fill(self, view: memoryview) -> tuple[int, Optional[End]]:
        raise NotImplementedError


class ZstdDecoder(Decoder):
    """zstd decoded by libzstd straight into the slot (analyze.read.zstd_stream): no piece, no copy. The file is
    opened in the child, on its first fill."""

    def __init__(self, path: Path, lib: Any) -> None:
        self._path, self._lib = path, lib
        self._stream: Optional[zstd_stream.ZstdStream] = None

    def fill(self, view: memoryview) -> tuple[int, Optional[End]]:
        self.filled = 0
        try:
            if self._stream is None:
                self._stream = zstd_stream.ZstdStream(self._path, self._lib)
            n, done = self._stream.into(view)
        except OSError as exc:
            return 0, End(fatal=f"cannot read ({exc.strerror or exc})")
        if not done:
            return n, None
        s = self._stream
        s.close()
        return n, ending("zstd", s.written, error=None if s.error is None else str(s.error), complete=s.complete)


class PieceDecoder(Decoder):
    """The inflated pieces (`pieces`: zlib, ISA-L, pyzstd) copied into the slot, one after another."""

    def __init__(self, stream: Iterator[Union[bytes, End]]) -> None:
        self._stream = stream
        self._rest = memoryview(b"")

    def fill(self, view: memoryview) -> tuple[int, Optional[End]]:
        self.filled = 0
        while self.filled < len(view):
            if not self._rest:
                item = next(self._stream)
                if isinstance(item, End):
                    return self.filled, item
                self._rest = memoryview(item)
            take = min(len(self._rest), len(view) - self.filled)
            view[self.filled : self.filled + take] = self._rest[:take]
            self._rest, self.filled = self._rest[take:], self.filled + take
        return self.filled, None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, n: int) -> bytes:
    """n bytes from fd, fewer only where it ends."""
    out = b""
    while len(out) < n:
        got = os.read(fd, n - len(out))
        if not got:
            break
        out += got
    return out


def _read_int(fd: int) -> Optional[int]:
    """The next signed 64-bit message from fd; None when the writer is gone."""
    got = _read_exactly(fd, 8)
    return struct.unpack("<q", got)[0] if len(got) == 8 else None


class Windows:
    """The inflated stream as consecutive windows over the ring: each a slot, with what was carried before it.

    window is the current window's bytes; base, the stream offset of its first byte; final, whether its
    end is the end of the stream; end, how the stream ended once final.
    """

    def __init__(self, inflater: Inflater) -> None:
        self._inflater = inflater
        self.window = inflater.array[:0]
        self.base = 0
        self.final = False
        self.end = End()
        self._first = True
        self.advance(0)

    def advance(self, keep_from: int) -> None:
        """Move to the next slot with window[keep_from:] carried in front of it (less than LOOKAHEAD bytes:
        a record of at most MAX_BLOCK_BYTES, or what a search after damage still has to look at)."""
        kept = len(self.window) - keep_from
        assert kept <= LOOKAHEAD, f"{kept} bytes carried, more than the {LOOKAHEAD} kept before a slot"
        start, n, end = self._inflater.next_slot()
        ring = self._inflater.array
        ring[start - kept : start] = self.window[keep_from:]
        if not self._first:
            self._inflater.give_back()
        self._first = False
        self.base += keep_from
        if end is not None:
            self.final, self.end = True, end
        # read-only, as a mapped file's bytes are: the kernel is compiled for read-only data, and numba's JIT would
        # compile all of it again (97 s) for a writable window
        self.window = ring[start - kept : start + n]
        self.window.flags.writeable = False

"""zstd frames decoded by the system's libzstd straight into a caller's buffer, through its streaming API.

Why: pyzstd (and Python 3.14's compression.zstd) hand each decoded piece back as a new bytes object, which the
inflating child then copies into the shared ring the scan walks: an allocation and a copy of every byte, and the
page faults of fresh buffers. libzstd's ZSTD_decompressStream writes into any buffer it is given, so here it
writes into the ring's slot itself. ctypes, not a compiled extension: four calls per 256 KiB of input.
Absent (no libzstd.so.1 on the system), `library()` says None and the caller keeps the piece-wise path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache
from pathlib import Path
from typing import Optional

INPUT = 1 << 18  # compressed bytes read at a time


class _InBuffer(ctypes.Structure):
    _fields_ = [("src", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]


class _OutBuffer(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]


@lru_cache(maxsize=1)
def library() -> Optional[ctypes.CDLL]:
    """The system's libzstd with the streaming calls typed, or None where it cannot be loaded."""
    for name in ("libzstd.so.1", ctypes.util.find_library("zstd")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            lib.ZSTD_createDStream.restype = ctypes.c_void_p
            lib.ZSTD_initDStream.argtypes = [ctypes.c_void_p]
            lib.ZSTD_initDStream.restype = ctypes.c_size_t
            lib.ZSTD_freeDStream.argtypes = [ctypes.c_void_p]
            lib.ZSTD_freeDStream.restype = ctypes.c_size_t
            lib.ZSTD_decompressStream.argtypes = [
                ctypes.c_void_p,
                ctypes.POINTER(_OutBuffer),
                ctypes.POINTER(_InBuffer),
            ]
            lib.ZSTD_decompressStream.restype = ctypes.c_size_t
            lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
            lib.ZSTD_isError.restype = ctypes.c_uint
            lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
            lib.ZSTD_getErrorName.restype = ctypes.c_char_p
        except AttributeError:  # a library without the streaming API
            continue
        return lib
    return None


class ZstdStream:
    """Every frame of a zstd file, decoded into the buffers `into` is given, one after another.

    into(view) fills view from its start and returns how many bytes it wrote and whether the stream is done:
    every byte of the file consumed and flushed (`complete` then says whether the last frame ended), or damaged
    data met (`error`: libzstd's name for it; what was decoded before it is in view). `written` counts every byte
    written so far. OSError from reading the file.
    """

    def __init__(self, path: Path, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._fh = open(path, "rb", buffering=0)
        self._ds = lib.ZSTD_createDStream()
        if not self._ds:
            raise MemoryError("ZSTD_createDStream failed")
        if lib.ZSTD_isError(lib.ZSTD_initDStream(self._ds)):
            raise MemoryError("ZSTD_initDStream failed")
        self._buf = bytearray(INPUT)
        self._in = _InBuffer(ctypes.addressof(ctypes.c_char.from_buffer(self._buf)), 0, 0)
        self._eof = False
        self._pending = 0  # the last call's hint: 0 once a frame is decoded and flushed
        self.written = 0
        self.complete = True
        self.error: Optional[str] = None

    def into(self, view: memoryview) -> tuple[int, bool]:
        if not len(view):
            return 0, False
        out = _OutBuffer(ctypes.addressof(ctypes.c_char.from_buffer(view)), len(view), 0)
        while out.pos < out.size:
            if self._in.pos == self._in.size and not self._eof:
                got = self._fh.readinto(self._buf)
                if got:
                    self._in.size, self._in.pos = got, 0
                else:
                    self._eof = True
            before, consumed = out.pos, self._in.pos
            ret = self._lib.ZSTD_decompressStream(self._ds, out, self._in)
            if self._lib.ZSTD_isError(ret):
                self.error = self._lib.ZSTD_getErrorName(ret).decode()
                self.written += out.pos
                return out.pos, True
            if out.pos != before or self._in.pos != consumed:
                self._pending = ret  # a call with nothing to do says how much the next frame wants, not 0
            if self._eof and self._in.pos == self._in.size and out.pos == before:
                self.complete = self._pending == 0
                self.written += out.pos
                return out.pos, True
        self.written += out.pos
        return out.pos, False

    def close(self) -> None:
        if self._ds:
            self._lib.ZSTD_freeDStream(self._ds)
            self._ds = None
        self._fh.close()

"""Find where valid records resume after a corrupt record header, so only the damaged bytes are lost.

The compiled reader stops at a header that cannot be right. Records carry no sync marker, so this
module tries every byte offset after the damage as a record start, numpy over a window of offsets at a
time (a window grows from 64 KiB to 1 MiB; pages already searched are dropped like the reader's), and
takes the first offset where CHAIN records in a row look right, or where the records from it run to the end
of the file (exactly, or into a last record cut short, which the reader then reports as truncated). One
plausible header is common in packet bytes; a chain of them almost never is. In a window of an inflated file
that is not its last, a chain must be whole: the caller searches on in the next window.
"""

from __future__ import annotations

import mmap

import numpy as np

from analyze.read import layouts as L
from analyze.read.formats import CaptureFormat

CHAIN = 3  # records in a row that must look right (fewer where the file ends first)
FIRST_WINDOW = 1 << 16  # candidate offsets tried in the first step: damage is usually one record long
MAX_WINDOW = 1 << 20  # the most per step, which bounds the arrays (tens of MB at worst)
DAY_S = 86_400  # a resumed record's clock is within a day of what the file showed so far
MAX_CAPLEN = 262_144  # tcpdump's largest snaplen
MAX_WIRELEN = 16 << 20
# Block types a resumed pcapng may start with: SHB, IDB, obsolete PB, SPB, NRB, ISB, EPB, systemd
# journal, decryption secrets, custom blocks (unknown types are legal but say nothing about alignment).
KNOWN_BLOCKS = np.array([L.SHB_TYPE, 1, 2, 3, 4, 5, 6, 9, 10, 0x00000BAD, 0x40000BAD], dtype=np.int64)

FAIL, FITS, TAIL = 0, 1, 2  # a record that cannot be; a whole one; a plausible one cut off by the end of the file


def next_valid_record(cap: CaptureFormat, st: np.ndarray, bad: int) -> int | None:
    """First offset after `bad` where records plausibly resume, None when none does before the end.

    `st` is the reader's state: the timestamps and (pcapng) interfaces and byte order seen so far.
    """
    walk = _PcapRecords(cap, st) if cap.kind == "pcap" else _PcapngBlocks(cap, st)
    end = len(cap.buffer)
    dropped = bad - bad % mmap.PAGESIZE
    start, width = bad + 1, FIRST_WINDOW
    while start <= end - walk.HEADER:
        dropped = cap.release(dropped, start)
        stop = min(start + width, end - walk.HEADER + 1)
        found = _first_chain(walk, walk.plausible(start, stop), end, cap.final)
        if found is not None:
            return found
        start, width = stop, min(2 * width, MAX_WINDOW)
    return None


def _first_chain(walk: _PcapRecords | _PcapngBlocks, offsets: np.ndarray, end: int, final: bool) -> int | None:
    """The first of `offsets` that starts a whole record followed by CHAIN - 1 more (or, when `end` is the end
    of the data, by the end)."""
    verdict, nxt = walk.step(offsets, np.arange(offsets.size))
    idx = np.nonzero(verdict == FITS)[0]
    pos = nxt[idx]
    chained = []
    for _ in range(CHAIN - 1):
        at_end = pos == end
        if final:
            chained.append(idx[at_end])
        idx, pos = idx[~at_end], pos[~at_end]
        verdict, pos = walk.step(pos, idx)
        if final:
            chained.append(idx[verdict == TAIL])
        idx, pos = idx[verdict == FITS], pos[verdict == FITS]
    chained.append(idx)
    won = np.concatenate(chained)
    return int(offsets[won.min()]) if won.size else None


def _u32(buf: np.ndarray, at: np.ndarray, swap: bool | np.ndarray) -> np.ndarray:
    """The unsigned 32-bit fields at byte offsets `at` (int64), big-endian where `swap`."""
    b = [buf[at + i].astype(np.int64) for i in range(4)]
    if isinstance(swap, np.ndarray):
        return np.where(swap, _join(b), _join(b[::-1]))
    return _join(b if swap else b[::-1])


def _join(b: list[np.ndarray]) -> np.ndarray:
    """A word from its four bytes, most significant first."""
    return b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3]


def _words(buf: np.ndarray, start: int, stop: int, swap: bool) -> np.ndarray:
    """The unsigned 32-bit field at every byte offset in [start, stop): four word views of the mapped bytes,
    each at one alignment, interleaved (an order of magnitude faster than gathering bytes). Reads up to stop + 3."""
    n = stop - start
    out = np.empty(n, dtype=np.uint32)  # compared only: no arithmetic that could wrap
    for k in range(4):
        m = (n - k + 3) // 4  # offsets start + k + 4j below stop
        out[k::4] = buf[start + k : start + k + 4 * m].view(">u4" if swap else "<u4")
    return out


class _PcapRecords:
    """Classic pcap: the 16-byte record header must describe a packet this file could hold (its clock, its
    snaplen from the file header)."""

    HEADER = 16

    def __init__(self, cap: CaptureFormat, st: np.ndarray) -> None:
        self.buf, self.end, self.swap = cap.buffer, len(cap.buffer), cap.swapped
        snaplen = cap.snaplen
        self.max_caplen = snaplen if 0 < snaplen < MAX_CAPLEN else MAX_CAPLEN
        self.frac_units = 10**9 if cap.nano else 10**6
        seen = st[L.ST_RECORDS] > 0
        self.sec_lo = int(st[L.ST_FIRST_NS]) // 10**9 - DAY_S if seen else 0
        self.sec_hi = int(st[L.ST_MAX_NS]) // 10**9 + DAY_S if seen else 1 << 32

    def plausible(self, start: int, stop: int) -> np.ndarray:
        """The offsets in [start, stop) whose captured length could be a record's: most offsets fail here."""
        caplen = _words(self.buf, start + 8, stop + 8, self.swap)
        return start + np.nonzero((caplen > 0) & (caplen <= self.max_caplen))[0]

    def step(self, at: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Verdict on the records at `at` and where each one's successor starts (idx: unused, no state)."""
        verdict = np.where(at + 16 > self.end, TAIL, FAIL)
        nxt = np.zeros_like(at)
        rows = np.nonzero(verdict == FAIL)[0]  # the header is whole: judge it
        sec, frac, caplen, wirelen = (_u32(self.buf, at[rows] + k, self.swap) for k in (0, 4, 8, 12))
        nxt[rows] = at[rows] + 16 + caplen
        rows = rows[
            (caplen > 0)
            & (caplen <= self.max_caplen)
            & (sec >= self.sec_lo)
            & (sec <= self.sec_hi)
            & (frac < self.frac_units)
            & (wirelen >= caplen)
            & (wirelen <= MAX_WIRELEN)
        ]
        verdict[rows] = np.where(nxt[rows] <= self.end, FITS, TAIL)
        return verdict, nxt


class _PcapngBlocks:
    """pcapng: a known block type whose length is legal and repeated at its end; packets on declared interfaces.

    A chain may cross a Section Header Block, so byte order and interface count are tracked per candidate.
    """

    HEADER = 12

    def __init__(self, cap: CaptureFormat, st: np.ndarray) -> None:
        self.buf, self.end = cap.buffer, len(cap.buffer)
        self.section_swap = bool(st[L.ST_SWAP])
        self.section_ifaces = int(st[L.ST_NIFACE] - st[L.ST_IFACE_BASE])
        self.swap = np.zeros(0, dtype=bool)  # per candidate of the current window
        self.ifaces = np.zeros(0, dtype=np.int64)

    def plausible(self, start: int, stop: int) -> np.ndarray:
        """The offsets in [start, stop) with a legal block length or a section header; their chains start
        in the current section."""
        words = _words(self.buf, start, stop + 4, self.section_swap)
        blen = words[4:]
        sane = (blen >= 12) & ((blen & 3) == 0) & (blen <= L.MAX_BLOCK_BYTES)
        found = start + np.nonzero(sane | (words[:-4] == L.SHB_TYPE))[0]
        self.swap = np.full(found.size, self.section_swap)
        self.ifaces = np.full(found.size, self.section_ifaces, dtype=np.int64)
        return found

    def step(self, at: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Verdict on the blocks at `at` (of candidates `idx`) and where each one's successor starts."""
        buf = self.buf
        verdict = np.where(at + 12 > self.end, TAIL, FAIL)
        nxt = np.zeros_like(at)
        rows = np.nonzero(verdict == FAIL)[0]  # type and length are whole: judge them
        a = at[rows]
        shb = _u32(buf, a, False) == L.SHB_TYPE
        bom = _u32(buf, a + 8, False)
        swap = np.where(shb, bom == L.BOM_BIG, self.swap[idx[rows]])
        btype, blen = _u32(buf, a, swap), _u32(buf, a + 4, swap)
        packet = (btype == 6) | (btype == 2)
        least = np.select([shb, btype == 1, packet, btype == 3], [28, 20, 28, 16], 12)  # what the reader reads
        legal = (
            np.isin(btype, KNOWN_BLOCKS)
            & (blen >= least)
            & ((blen & 3) == 0)
            & (blen <= L.MAX_BLOCK_BYTES)
            & (~shb | (bom == L.BOM_LITTLE) | (bom == L.BOM_BIG))
        )
        nxt[rows] = a + blen
        verdict[rows[legal & (nxt[rows] > self.end)]] = TAIL
        whole = np.nonzero(legal & (nxt[rows] <= self.end))[0]  # the trailing length is in the file
        ok = _u32(buf, a[whole] + blen[whole] - 4, swap[whole]) == blen[whole]
        p = whole[packet[whole]]
        word = _u32(buf, a[p] + 8, swap[p])
        iface = np.where(btype[p] == 6, word, np.where(swap[p], word >> 16, word & 0xFFFF))  # PB: 16 bits
        caplen = _u32(buf, a[p] + 20, swap[p])
        ok[packet[whole]] &= (iface < self.ifaces[idx[rows[p]]]) & (caplen <= blen[p] - 28)
        good = whole[ok]
        verdict[rows[good]] = FITS
        cand = idx[rows[good]]
        self.swap[cand] = swap[good]
        self.ifaces[cand] = np.where(shb[good], 0, self.ifaces[cand] + (btype[good] == 1))
        return verdict, nxt

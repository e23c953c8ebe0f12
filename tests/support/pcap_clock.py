"""Give a pcap another host's clock: every record's timestamp offset and drifting, as real servers' clocks
do (NTP keeps them milliseconds apart and tens of ppm fast or slow). Captures made in network namespaces
share one kernel clock, so tests rewrite them to see what a real cluster's would look like.

    t' = t + offset_ns + (t - t_first) * ppm / 1e6

Classic pcap (micro- or nanosecond, either byte order), optionally gzip-compressed; a test helper, so a
plain loop over the records.
"""

from __future__ import annotations

import gzip
import shutil
import struct
from pathlib import Path

MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),
    b"\xa1\xb2\x3c\x4d": (">", 1),
}


def reclock(src: Path, dst: Path, offset_ns: int, ppm: float) -> int:
    """Write SRC to DST with its clock moved; returns the number of records rewritten."""
    raw = src.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    endian, ns_per_unit = MAGICS[raw[:4]]
    out = bytearray(raw)
    header = struct.Struct(endian + "IIII")
    pos, first, count = 24, None, 0
    while pos + 16 <= len(out):
        sec, frac, incl, _ = header.unpack_from(out, pos)
        t = sec * 1_000_000_000 + frac * ns_per_unit
        first = t if first is None else first
        t += offset_ns + round((t - first) * ppm / 1e6)
        struct.pack_into(endian + "II", out, pos, t // 1_000_000_000, (t % 1_000_000_000) // ns_per_unit)
        pos += 16 + incl
        count += 1
    dst.write_bytes(gzip.compress(bytes(out), 1) if dst.suffix == ".gz" else bytes(out))
    return count


CLOCKS = [
    (-100_000_000, 50.0),
    (37_000_000, -50.0),
    (100_000_000, -20.0),
    (-61_000_000, 35.0),
    (0, 0.0),
    (83_000_000, 12.0),
    (-9_000_000, -45.0),
    (55_000_000, 50.0),
]  # per host (in name order): offset ns, drift ppm


def reclocked(run: Path, dest: Path) -> Path:
    """A copy of RUN whose hosts' pcaps carry the clocks in CLOCKS."""
    shutil.copytree(run, dest)
    for (offset, ppm), host in zip(CLOCKS, sorted(p for p in dest.iterdir() if p.is_dir())):
        for pcap in host.glob("eth0.pcap*"):
            reclock(pcap, pcap, offset, ppm)
    return dest

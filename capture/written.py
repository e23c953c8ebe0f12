"""What reached the disk: the records in tcpdump's files against its counters, and the space left for them.

Why: tcpdump ignores write errors. On a full disk it keeps counting packets as captured while the file
stops growing, exits 0 and prints the same report as a healthy run, so an agent that trusted it would
call a capture holding a third of the packets "complete". The agent therefore watches the free space
of its folder while capturing and counts the records actually written when it stops.

Counting walks the 16-byte record headers of the classic pcap files the agent told tcpdump to write (a
seek per record, no packet bytes read into Python): about 2 s for 5 M records, paid once at the end of a
capture. Standard library only, like the rest of capture.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

LOW_SPACE_BYTES = 1 << 20  # less free space than this in the capture folder: packets are being lost
_PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}
_CHUNK = 1 << 22


def free_bytes(folder: Path) -> int | None:
    """Bytes an unprivileged writer may still use in FOLDER's filesystem (None when it cannot be asked)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def count_records(path: Path) -> int:
    """Whole records in a classic pcap file (a record cut short by a failed write is not one). A file
    with no complete header counts 0. Reads the file in 4 MiB chunks and steps from header to header."""
    with open(path, "rb") as f:
        head = f.read(24)
        order = _PCAP_MAGICS.get(head[:4])
        if order is None or len(head) < 24:
            return 0
        lengths = struct.Struct(order + "8xI4x")  # caplen of a record header
        records, buf, pos = 0, b"", 0
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                return records
            buf, pos = buf[pos:] + chunk, 0
            end = len(buf) - 16
            unpack = lengths.unpack_from
            while pos <= end:
                nxt = pos + 16 + unpack(buf, pos)[0]
                if nxt > len(buf):
                    break
                records += 1
                pos = nxt


def written_records(folder: Path, files: list[str]) -> int:
    """Records in FILES, tcpdump's files in FOLDER."""
    return sum(count_records(folder / name) for name in files)

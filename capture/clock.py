"""What the analyzer needs to trust timestamps across hosts: which clock, and how well synchronized."""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
import time
from pathlib import Path

_TIME_ERROR = 5  # adjtimex() state: the clock is not synchronized


def _adjtimex() -> dict:
    """Read (never set) the kernel's NTP state: synchronized?, estimated and maximum error."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        buf = ctypes.create_string_buffer(512)  # struct timex is 208 bytes on x86_64/arm64
        state = libc.adjtimex(buf)
    except (OSError, AttributeError):
        return {}
    if state < 0:
        return {}
    _modes, _offset, _freq, maxerror_us, esterror_us, _status = struct.unpack_from("@Illlli", buf.raw)
    return {
        "ntp_synchronized": state != _TIME_ERROR,
        "ntp_state": state,
        "ntp_esterror_us": esterror_us,
        "ntp_maxerror_us": maxerror_us,
    }


def clock_info() -> dict:
    """Clock facts for meta.json; packet and marker times are CLOCK_REALTIME (wall clock) in ns."""
    source = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    info = {
        "clock": "CLOCK_REALTIME",
        "clocksource": source.read_text().strip() if source.exists() else None,
        "realtime_minus_monotonic_ns": time.time_ns() - time.monotonic_ns(),
    }
    info.update(_adjtimex())
    return info

"""Rates, sizes and durations as people type them ("25G", "100Gbit", "97.5MB", "10ms") to explicit numbers, and
the ADDRESS:PORT a metrics endpoint listens on.

Every option that takes a link speed, a size or a time window goes through here, in capture and analyze
alike (standard library only, so the capture side stays dependency-free), so the whole tool agrees on
what "25G" means: rates are bit/s with decimal prefixes (k = 1e3, M = 1e6, G = 1e9, T = 1e12; Ki/Mi/Gi/Ti
are powers of 1024), durations are integer nanoseconds. "bps" means *bits* per second, as in every NIC
datasheet (note: `tc` spells bits "bit" and bytes "bps"; ringscope follows common usage, and bytes must be
written with a capital B: "GB/s", "GBps", "Gbyte").
"""

from __future__ import annotations

import math
import re

__all__ = ["parse_rate", "parse_link_speed", "parse_size", "parse_duration", "format_rate", "ns_of"]

_PREFIX: dict[str, float] = {
    "": 1.0,
    "k": 1e3,
    "K": 1e3,
    "m": 1e6,
    "M": 1e6,
    "g": 1e9,
    "G": 1e9,
    "t": 1e12,
    "T": 1e12,
    "ki": 1024.0,
    "Ki": 1024.0,
    "mi": 1024.0**2,
    "Mi": 1024.0**2,
    "gi": 1024.0**3,
    "Gi": 1024.0**3,
    "ti": 1024.0**4,
    "Ti": 1024.0**4,
}
# Bits: "", "b", "bit", "bits", "bps", "bit/s", "b/s". Bytes: "B", "Bps", "B/s", "byte", "bytes", "byte/s".
_BIT_UNITS = {"", "b", "bit", "bits", "bps", "bit/s", "bits/s", "b/s"}
_BYTE_UNITS = {"B", "Bps", "B/s", "byte", "bytes", "byte/s", "bytes/s", "Byte", "Bytes"}
_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_RATE_RE = re.compile(rf"^\s*({_NUMBER})\s*((?:[kKmMgGtT]i?)?)\s*([A-Za-z/]*)\s*$")

_SIZE_RE = re.compile(rf"^\s*({_NUMBER})\s*((?:[kKMGT]i?)?)(B|byte|bytes)?\s*$")
_SIZE_PREFIX: dict[str, float] = {
    "": 1.0,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "ki": 2.0**10,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
}

_DURATION_UNITS: dict[str, float] = {
    "ns": 1.0,
    "us": 1e3,
    "µs": 1e3,
    "μs": 1e3,
    "ms": 1e6,
    "s": 1e9,
    "sec": 1e9,
    "min": 60e9,
    "m": 60e9,
    "h": 3600e9,
    "": 1e9,
}
_DURATION_RE = re.compile(rf"^\s*({_NUMBER})\s*([a-zµμ]*)\s*$")


def parse_rate(text: str) -> float:
    """Parse a link rate ("100Gbit", "25G", "10Gbps", "100Mbit", "1e9", "12.5GB/s") into bit/s.

    A bare number is bit/s. Raises ValueError naming the input when it is not a positive finite rate.
    """
    match = _RATE_RE.match(str(text))
    if not match:
        raise ValueError(f"bad rate {text!r}: expected a number with an optional unit, e.g. 25G, 100Gbit, 10Gbps, 1e9")
    number, prefix, unit = match.groups()
    if unit in _BIT_UNITS:
        factor = 1.0
    elif unit in _BYTE_UNITS:
        factor = 8.0
    else:
        raise ValueError(
            f"bad rate {text!r}: unknown unit {unit!r} (use bit, bps, b/s for bits or B, Bps, B/s for bytes)"
        )
    value = float(number) * _PREFIX[prefix] * factor
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"bad rate {text!r}: must be a positive finite rate")
    return value


# no network link runs below 1 kbit/s: a smaller speed typed for a link is a missing unit ("0.1" meant as 0.1G),
# and a what-if asked for it would print iteration times of centuries rather than the user's mistake
MIN_LINK_BPS = 1e3


def parse_link_speed(text: str) -> float:
    """parse_rate for a link's speed: also refuses a rate below 1 kbit/s, naming the unit it may have lacked."""
    value = parse_rate(text)
    if value < MIN_LINK_BPS:
        raise ValueError(
            f"bad link speed {text!r}: {value:g} bit/s is below 1 kbit/s (a bare number is bit/s: did you mean "
            f"{str(text).strip()}G?)"
        )
    return value


def parse_size(text: str) -> float:
    """Parse a size ("97.5MB", "25MiB", "1.5G", "102228128") into bytes: k/M/G/T are powers of 1000,
    Ki/Mi/Gi/Ti of 1024.

    Raises ValueError naming the input when it is not a positive size (a size in bits is refused).
    """
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ValueError(f"bad size {text!r}: expected bytes, e.g. 102228128, 97.5MB, 25MiB or 1.5G")
    number, prefix, _unit = match.groups()
    value = float(number) * _SIZE_PREFIX[prefix]
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"bad size {text!r}: must be positive")
    return value


def parse_duration(text: str) -> int:
    """Parse a duration ("10ms", "1ms", "0.5s", "250us", "100ns", "2min") into integer nanoseconds.

    A bare number is seconds. Raises ValueError naming the input when it is negative or malformed.
    """
    match = _DURATION_RE.match(str(text))
    if not match:
        raise ValueError(f"bad duration {text!r}: expected a number with a unit, e.g. 10ms, 0.5s, 250us")
    number, unit = match.groups()
    if unit not in _DURATION_UNITS:
        raise ValueError(f"bad duration {text!r}: unknown unit {unit!r} (use ns, us, ms, s, min, h)")
    value = float(number) * _DURATION_UNITS[unit]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"bad duration {text!r}: must be a non-negative finite time")
    return int(round(value))


def ns_of(seconds: float) -> int:
    """SECONDS as the integer nanoseconds every duration of a result is written in (the what-if computes in
    seconds, as the paper writes its model; its records hold nanoseconds like every other finding)."""
    return int(round(seconds * 1e9))


def parse_bin(text: str) -> int:
    """Parse a --bin width into nanoseconds: a duration longer than 0 (a zero-width bin holds nothing)."""
    bin_ns = parse_duration(text)
    if bin_ns <= 0:
        raise ValueError(f"bad --bin {text!r}: must be longer than 0")
    return bin_ns


def format_rate(bps: float) -> str:
    """Render bit/s the way people read link speeds: '25 Gbit/s', '400 Mbit/s'."""
    if not math.isfinite(bps):
        return "∞"
    for factor, name in ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if abs(bps) >= factor:
            return f"{bps / factor:.3g} {name}"
    return f"{bps:.3g} bit/s"


def parse_listen_address(text: str) -> tuple[str, int]:
    """ADDRESS:PORT to (address, port): ADDRESS empty for every interface, or an [IPv6] address in brackets;
    ValueError saying why not (checked by `capture run` before anything starts, used by the endpoint)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad --metrics {text!r}: give ADDRESS:PORT, e.g. 127.0.0.1:9464 or :9464")
    return host.strip("[]") or "0.0.0.0", int(port)

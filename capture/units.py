"""Parse the human units users type for rates (bit/s) and sizes (bytes)."""
from __future__ import annotations

import re

from capture.errors import CaptureError

_SI = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]?)(i?)(bit|bps|b)?(?:/s)?\s*$", re.IGNORECASE)


def _parse(text: str, what: str) -> tuple:
    match = _NUMBER.match(text)
    if not match:
        raise CaptureError(f"cannot read {what} {text!r}: expected e.g. 25Gbit, 100M, 1e9")
    value, prefix, binary, unit = match.groups()
    prefix = prefix.lower()
    scale = 1024 ** ("kmgt".index(prefix) + 1) if binary and prefix else _SI[prefix]
    return float(value) * scale, (unit or "").lower()


def parse_rate_bps(text: str) -> int:
    """'25Gbit', '100G', '1e9', '800Mbit/s' -> bit/s. Rates are always bits, as tc prints them."""
    value, _ = _parse(text, "rate")
    return int(round(value))


def parse_size_bytes(text: str) -> int:
    """'100M', '1G', '500k', '2GiB' -> bytes (SI prefixes are powers of 1000, 'Ki'/'Mi' of 1024)."""
    value, unit = _parse(text, "size")
    if unit == "bit":
        raise CaptureError(f"cannot read size {text!r}: sizes are bytes, e.g. 100M or 1G")
    return int(round(value))

"""Compare what the analyzer reports with ground truth known before the capture was written.

Shared by the fixture, accounting, property and CLI tests so each states only what it checks.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from tests.support.pcapgen import Frame, flow_key

from analyze.read import layouts as L
from analyze.api import analyze
from analyze.read.fold import SUMMED, merge_host
from analyze.model.result import CaptureSummary, FlowRecord, Result
from analyze.read.scan import StreamScan

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
ETHERNET_FRAMING_BYTES = 38  # header 14 + FCS 4 + preamble/SFD 8 + inter-frame gap 12
ETHERNET_MIN_IP_BYTES = 46  # a 64-byte minimum frame carries at least 46 bytes after the header
# truth field -> result field
FLOW_FIELDS = {
    "packets": "packets",
    "ip_bytes": "bytes",
    "payload_bytes": "payload_bytes",
    "first_ns": "start_ns",
    "last_ns": "end_ns",
    "retransmitted_bytes": "retransmitted_bytes",
}


def run(paths: Sequence[Path | str], **kw) -> Result:
    """Analyze in this process (no worker pool: the test files are small)."""
    return analyze([Path(p) for p in paths], workers=1, **kw)


def flows_by_key(result: Result) -> dict[tuple, FlowRecord]:
    """The result's flows by directed 5-tuple; a flow reported twice would be a bug, so it fails here."""
    out: dict[tuple, FlowRecord] = {}
    for f in result.flows:
        key = (f.src, f.dst, f.sport, f.dport, f.proto)
        assert key not in out, f"flow {key} reported twice"
        out[key] = f
    return out


def flow_mismatches(
    result: Result, truth_flows: Iterable[dict], fields: dict[str, str] = FLOW_FIELDS, bytes_field: str = "ip_bytes"
) -> list[str]:
    """Every difference between the result's flows and the truth's, as readable lines (empty: identical)."""
    got = flows_by_key(result)
    want = {flow_key(t): t for t in truth_flows}
    problems = [f"missing flow {k}" for k in want.keys() - got.keys()]
    problems += [f"unexpected flow {k}" for k in got.keys() - want.keys()]
    for key in want.keys() & got.keys():
        for t_name, r_name in fields.items():
            expected = want[key][bytes_field if t_name == "ip_bytes" else t_name]
            actual = getattr(got[key], r_name)
            if actual != expected:
                problems.append(f"{key} {r_name}: got {actual}, truth {expected}")
    return sorted(problems)


def capture_mismatches(cap: CaptureSummary, truth: dict) -> list[str]:
    """Differences between one capture summary and a file's truth (format, link types, records, times, kinds)."""
    checks = {
        "format": (cap.format, truth["format"]),
        "linktypes": (cap.linktypes, truth["linktypes"]),
        "records": (cap.packets, truth["records"]),
        "first_ns": (cap.first_ns, truth["first_ns"]),
        "last_ns": (cap.last_ns, truth["last_ns"]),
        "frame_kinds": (cap.frame_kinds, truth["frame_kinds"]),
    }
    return [f"{name}: got {a!r}, truth {b!r}" for name, (a, b) in checks.items() if a != b]


def wire_bytes(frame: Frame, mtu: int = 1500) -> int:
    """Bytes an IP packet occupies on an Ethernet wire once cut into MTU-sized frames (the `--bytes wire` rule).

    A TSO/GRO segment leaves the NIC as ceil(payload / (MTU - headers)) frames, each repeating the IP and
    TCP headers; every frame adds Ethernet framing, and a lone short frame is padded to the minimum.
    """
    headers = frame.ip_bytes - frame.payload_bytes
    if frame.ip_bytes <= mtu:
        return max(frame.ip_bytes, ETHERNET_MIN_IP_BYTES) + ETHERNET_FRAMING_BYTES
    frames = math.ceil(frame.payload_bytes / (mtu - headers))
    return frame.payload_bytes + frames * (headers + ETHERNET_FRAMING_BYTES)


def wire_truth(frames: Iterable[Frame], mtu: int = 1500) -> dict[tuple, int]:
    """Per-flow wire bytes of frames (fragments are each their own frame already)."""
    out: dict[tuple, int] = {}
    for f in frames:
        if f.flow is not None:
            key = (f.flow.src, f.flow.dst, f.flow.sport, f.flow.dport, f.flow.proto)
            out[key] = out.get(key, 0) + wire_bytes(f, mtu)
    return out


def same_scan(got: StreamScan, want: StreamScan) -> None:
    """Same flows, counters, first/last times, series and per-file health as the sequential read."""
    a, b = merge_host("h", [got]), merge_host("h", [want])
    assert np.array_equal(a.keys, b.keys)
    for col in (*SUMMED, L.AGG_FIRST_NS, L.AGG_LAST_NS):
        assert np.array_equal(a.agg[:, col], b.agg[:, col]), col
    for field in ("cell_flow", "cell_bin", "cell_bytes"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    for x, y in zip(got.files, want.files, strict=True):
        assert (
            x.path,
            x.format,
            x.linktypes,
            x.file_bytes,
            x.records,
            x.captured_bytes,
            x.first_ns,
            x.last_ns,
            x.kinds.tolist(),
            x.warnings,
        ) == (
            y.path,
            y.format,
            y.linktypes,
            y.file_bytes,
            y.records,
            y.captured_bytes,
            y.first_ns,
            y.last_ns,
            y.kinds.tolist(),
            y.warnings,
        )

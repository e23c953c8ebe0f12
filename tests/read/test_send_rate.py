"""A connection's rate while it sends, from packet times (analyze/wire/send_rate.py), on captures whose every
timestamp the test chose: bursts at a known rate with long pauses between them read that rate, whatever the series'
bin; packets that share a timestamp (a microsecond capture of a fast link) count as one group; an edge sums its data
connections (TCP) or averages its queue pairs (RDMA) and leaves control connections out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analyze.read import layouts as L
from analyze.read.fold import merge_host, scan_host
from analyze.tables.flow_pace import flow_send_rates
from analyze.wire.send_rate import edge_send_rates, fills_link
from tests.support.pcapgen import BASE_NS, ETHERNET, TcpConn, pcap_bytes, write

PAYLOAD = 1448
BURSTS, SEGMENTS = 6, 40


def _bursts(path: Path, rate_bps: float, per_timestamp: int = 1, nano: bool = True) -> int:
    """BURSTS bursts of SEGMENTS data segments at RATE_BPS, 20 ms apart; PER_TIMESTAMP segments share each
    timestamp. Returns one segment's bytes on the line (its IP bytes, the Ethernet header and FCS, preamble and
    inter-frame gap: what a link's rate carries). The rate is the line's: frames spaced by those bytes."""
    c = TcpConn(ETHERNET, "10.9.0.1", "10.9.0.2", 40000, 29500)
    frames = c.handshake(BASE_NS)
    probe = c.data(BASE_NS + 1_000_000, PAYLOAD)
    frames.append(probe)
    wire = probe.ip_bytes + L.ETHERNET_OVERHEAD_BYTES
    gap_ns = wire * 8 * per_timestamp / rate_bps * 1e9
    for b in range(BURSTS):
        start = BASE_NS + 20_000_000 * (b + 1)
        for i in range(SEGMENTS):
            frames.append(c.data(start + int(round((i // per_timestamp) * gap_ns)), PAYLOAD))
    write(path, pcap_bytes(frames, linktype=ETHERNET.linktype, nano=nano)[0])
    return wire


def _data_row(path: Path, bin_ns: int) -> np.ndarray:
    hf = merge_host("h", [scan_host([path], bin_ns=bin_ns, byte_mode=L.BYTES_IP)])
    ports = (hf.keys[:, 4] >> np.uint64(8)).astype(np.int64)
    row = {(int(p >> 16), int(p & 0xFFFF)): i for i, p in enumerate(ports)}
    return hf.agg[[row[(40000, 29500)]]]


@pytest.mark.parametrize("rate_bps", [1e9, 100e6])
def test_bursts_read_their_rate_at_any_bin(tmp_path: Path, rate_bps: float) -> None:
    path = tmp_path / "c.pcap"
    _bursts(path, rate_bps)
    # the bursts last 0.5 ms (1 Gbit/s) or 4.7 ms (100 Mbit/s): bins of 1 to 50 ms hold one burst and idle time
    rates = [float(flow_send_rates(_data_row(path, ms * 1_000_000))[0]) for ms in (1, 10, 50)]
    for r in rates:
        # the pauses file each burst's first segment slow: 1 in 40 bytes, far from the median byte
        assert r == pytest.approx(rate_bps, rel=0.01)
    assert max(rates) == min(rates)


def test_packets_sharing_a_timestamp_are_one_group(tmp_path: Path) -> None:
    """Four segments per timestamp at 10 Gbit/s in a microsecond pcap: read one by one, three of four would be 0 ns
    apart (infinitely fast) and the fourth a tick behind; grouped, each timestamp's bytes over the time since the
    one before read the rate (within the microsecond rounding of 4.9 us)."""
    path = tmp_path / "c.pcap"
    wire = _bursts(path, 10e9, per_timestamp=4, nano=False)
    rate = float(flow_send_rates(_data_row(path, 10_000_000))[0])
    group_ns = 4 * wire * 8 / 10e9 * 1e9  # 4.92 us: the file holds 4 or 5 us between groups
    assert 4 * wire * 8 / 5e-6 <= rate <= 4 * wire * 8 / 4e-6 and group_ns == pytest.approx(4_921.6)


def test_an_edge_sums_its_connections_or_averages_its_queue_pairs() -> None:
    code = np.array([0, 0, 0, 1])
    rate = np.array([400e6, 500e6, 900e6, 700e6])
    payload = np.array([1_000_000, 1_000_000, 10_000, 5_000])  # the third carries 1 %: a control connection
    summed = edge_send_rates(code, rate, payload, 3)
    assert summed[0] == pytest.approx(900e6) and summed[1] == pytest.approx(700e6) and np.isnan(summed[2])
    mean = edge_send_rates(code, rate, payload, 2, at_once=False)
    assert mean[0] == pytest.approx(450e6)


def test_what_the_packet_times_settle() -> None:
    assert fills_link(0.95, 0.9) is True
    assert fills_link(0.6, 0.95) is False  # bursts under line rate: not link-limited, however full the bins
    assert fills_link(1.0, 0.3) is None  # bursts at line rate in idle bins: waits between steps, or a coarse bin
    assert fills_link(None, 0.85) is True and fills_link(None, None) is None

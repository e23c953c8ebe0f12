"""The read pass's TCP counters on a connection whose every segment is known (tests/support/pcapgen.py): the
window scale from the SYNs, duplicate ACKs with SACK, a zero window and its length, bytes in flight against
the advertised window, window-full segments and a re-sent segment, each counted exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analyze.read import layouts as L
from analyze.read.fold import merge_host, scan_host
from tests.support.pcapgen import BASE_NS, ETHERNET, TcpConn, pcap_bytes, write

US = 1_000


def _capture(path: Path) -> None:
    """The client's capture: it sends 5 kB in 1 kB segments and re-sends the first; the server's ACKs repeat
    (3 duplicates with SACK), close the window for 2 ms, then shrink it to 16 x 2^7 = 2,048 bytes."""
    c = TcpConn(ETHERNET, "10.9.0.1", "10.9.0.2", 40000, 29500)
    t = BASE_NS
    frames = c.handshake(t)  # both SYNs announce window scale 7
    frames += [c.data(t + (100 + 10 * i) * US, 1000) for i in range(3)]  # in flight 1,000, 2,000, 3,000
    frames.append(c.ack(t + 200 * US))  # acknowledges 3,000, window 502 x 128 = 64,256
    frames += [c.ack(t + (210 + 10 * i) * US, options="sack") for i in range(3)]  # the same ACK again: duplicates
    frames.append(c.ack(t + 300 * US, window=0))  # the window closes ...
    frames.append(c.ack(t + 2_300 * US, window=502))  # ... for 2 ms
    frames.append(c.ack(t + 2_400 * US, window=16))  # 2,048 bytes
    frames.append(c.data(t + 2_500 * US, 1000))  # in flight 1,000: another 1,000 fits
    frames.append(c.data(t + 2_510 * US, 1000))  # in flight 2,000: the next would not fit (window full)
    frames.append(c.resend(t + 7_510 * US, 0, 1000))  # the first segment again, 5 ms later: in flight 2,000, full
    write(path, pcap_bytes(frames, linktype=ETHERNET.linktype)[0])


def test_counters_on_a_known_connection(tmp_path: Path) -> None:
    path = tmp_path / "client.pcap"
    _capture(path)
    hf = merge_host("h", [scan_host([path], bin_ns=10_000_000, byte_mode=L.BYTES_IP)])
    ports = (hf.keys[:, 4] >> np.uint64(8)).astype(np.int64)
    row = {(int(p >> 16), int(p & 0xFFFF)): i for i, p in enumerate(ports)}
    data, acks = hf.agg[row[(40000, 29500)]], hf.agg[row[(29500, 40000)]]

    assert data[L.AGG_WSCALE] == 7 and acks[L.AGG_WSCALE] == 7
    assert data[L.AGG_RETRANS_BYTES] == 1000 and data[L.AGG_REORDER_BYTES] == 0
    assert acks[L.AGG_DUP_ACKS] == 3 and acks[L.AGG_SACK_ACKS] == 3 and data[L.AGG_DUP_ACKS] == 0
    assert acks[L.AGG_ZERO_WINS] == 1 and acks[L.AGG_ZERO_WIN_NS] == 2_000_000
    inflight = [1000, 2000, 3000, 1000, 2000, 2000]
    windows = [64_256] * 3 + [2_048] * 3
    assert data[L.AGG_INFLIGHT_N] == 6 and data[L.AGG_INFLIGHT_SUM] == sum(inflight)
    assert data[L.AGG_INFLIGHT_MAX] == 3000
    assert data[L.AGG_WIN_N] == 6 and data[L.AGG_WIN_SUM] == sum(windows)
    assert data[L.AGG_WIN_FULL_BYTES] == 2000  # the two segments after which 1,000 more would not fit

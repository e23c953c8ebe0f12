"""A capture the tests did not write: real tcpdump on loopback while the test sends a known number of bytes.

The analyzer must report exactly those payload bytes for the flow, and its per-flow totals must equal
dpkt's and tshark's on the same file. Headers only (snaplen 128), as the capture sidecar records;
loopback's 64 KB MTU makes every data segment far longer than what was captured.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import warnings
from pathlib import Path

import pytest

from analyze.read import engine
from analyze.read import pieces
from analyze.api import analyze
from tests.support.expect import flows_by_key, run
from tests.support.oracles import dpkt_flows, tshark_flows
from tests.support.requirements import have, require, require_capture

SENT_BYTES = 3_000_000 + 12_345  # not a multiple of any segment size

# Live (the serial pass): beside the quick tier on two busy cores, the capture on `any` once delivered records out
# of order by more than the reorder window (a loopback round trip, a few µs, floored at 20 µs), and 95,232 of the
# 3 MB read as re-sent though no byte was seen twice (a hole filled late, issue 47's capture coverage).
pytestmark = pytest.mark.live


class Tcpdump:
    """tcpdump writing headers-only records for one port, each handed over and written at once
    (--immediate-mode, -U), ready once it says it is listening."""

    def __init__(self, iface: str, port: int, out: Path) -> None:
        argv = [
            shutil.which("tcpdump"),
            "-i",
            iface,
            "-n",
            "-U",
            "--immediate-mode",
            "-s",
            "128",
            "-B",
            "8192",
            "-w",
            str(out),
            f"tcp port {port}",
        ]
        if os.geteuid() == 0:
            argv[1:1] = ["-Z", "root"]  # keep the right to write into the root-owned tmp dir
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.listening = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.listening.wait(15):
            self.stop()
            pytest.fail(f"tcpdump did not start listening: {''.join(self.lines)}")

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            if "listening on" in line:
                self.listening.set()

    def stop(self) -> str:
        """SIGINT (tcpdump flushes and prints its counters), wait, and return what it printed."""
        time.sleep(0.5)  # let the last ACKs reach the capture before it stops
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(5)
        return "".join(self.lines)


def send_over_loopback(nbytes: int, server: socket.socket) -> tuple[int, int]:
    """Send nbytes from a fresh client to `server`; returns (client port, bytes the server received)."""
    received = [0]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while chunk := conn.recv(1 << 20):
                received[0] += len(chunk)

    thread = threading.Thread(target=serve)
    thread.start()
    with socket.create_connection(server.getsockname(), timeout=30) as client:
        client_port = client.getsockname()[1]
        client.sendall(b"\x5a" * nbytes)
        client.shutdown(socket.SHUT_WR)
        thread.join(30)
    return client_port, received[0]


@pytest.fixture(scope="module", params=["lo", "any"])
def real_capture(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple, tuple]:
    """One real capture per interface (Ethernet on lo, Linux cooked v2 on any): the file and both flows."""
    require_capture()
    path = tmp_path_factory.mktemp("real") / f"{request.param}.pcap"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        dump = Tcpdump(request.param, port, path)
        try:
            client_port, received = send_over_loopback(SENT_BYTES, server)
        finally:
            report = dump.stop()
    assert received == SENT_BYTES
    assert re.search(r"^0 packets dropped by kernel$", report, re.MULTILINE), report
    data = ("127.0.0.1", "127.0.0.1", client_port, port, "tcp")
    acks = ("127.0.0.1", "127.0.0.1", port, client_port, "tcp")
    return path, data, acks


def test_analyzer_reports_exactly_the_bytes_sent(real_capture: tuple) -> None:
    """The data flow carries SENT_BYTES of payload once, plus exactly what TCP re-sent; the ACK flow none.

    Loopback under load does re-send (seen: 95,232 bytes, segments tshark also marks as retransmissions;
    and segments handed to the tap a few µs out of order, which are not re-sends), so the exact identity
    is payload − retransmitted = SENT_BYTES, with re-sends an exception."""
    path, data, acks = real_capture
    flows = flows_by_key(run([path]))
    assert set(flows) == {data, acks}
    assert flows[data].payload_bytes - flows[data].retransmitted_bytes == SENT_BYTES
    assert flows[data].retransmitted_bytes <= 0.2 * SENT_BYTES
    assert flows[acks].payload_bytes == 0
    assert flows[data].bytes > SENT_BYTES > path.stat().st_size  # counted from IP headers, not captured bytes


def test_real_capture_per_flow_totals_equal_dpkt_and_tshark(real_capture: tuple) -> None:
    """The three decoders agree to the byte on a file none of them wrote."""
    path = real_capture[0]
    ours = {
        k: {"packets": f.packets, "ip_bytes": f.bytes, "payload_bytes": f.payload_bytes}
        for k, f in flows_by_key(run([path])).items()
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert ours == dict(dpkt_flows(path))
    require(have("tshark"), "needs tshark (apt-get install tshark)")
    theirs = tshark_flows(path)
    assert {k: (v["packets"], v["ip_bytes"]) for k, v in ours.items()} == {
        k: (v["packets"], v["ip_bytes"]) for k, v in theirs.items()
    }


def test_a_real_capture_cut_into_pieces_gives_the_same_flows(
    real_capture: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers cutting the real file into pieces (at cuts tcpdump's records happen to fall on, through
    re-sends and reordering) report what one sequential read does: joined, or read again whole."""
    path = real_capture[0]
    size = path.stat().st_size
    monkeypatch.setattr(engine, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(pieces, "MIN_PIECE_BYTES", size // 8)
    plan = pieces.plan([[path]], [size], 2)[0]
    assert plan is not None and len(plan) >= 3
    cut = analyze([path], workers=2)
    assert flows_by_key(cut) == flows_by_key(run([path]))
    (coverage,) = [c.coverage for c in cut.captures]  # read in pieces it once read 0.07 % held (4 GiB missing)
    assert coverage is not None and coverage.fraction > 0.999 and coverage.missing_payload_bytes == 0, coverage

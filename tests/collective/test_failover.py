"""A failover's replayed RDMA READs: the same buffer read again on another device is not goodput.

Captures from the generator (tests/support/rocegen.py `failover_reads`: two hosts with two devices each, device 0
failing mid-iteration and the operation's READs issued again on device 1), the bytes moved twice known before the
run; the replays are also found from tshark's InfiniBand dissector (RETH virtual address and DMA length, response
PSNs), independently of the read path.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from analyze.api import analyze
from tests.support import rocegen as R
from tests.support.requirements import require


def _tshark_replays(capture: Path, window_ns: float) -> tuple[int, int]:
    """(READs, bytes) replayed, from tshark's decode of the requester's capture: a READ request of a (virtual
    address, length) last requested from the other device, within the window, and answered there (a first or
    only response packet with its PSN, the other way between the same addresses)."""
    require(shutil.which("tshark") is not None, "needs tshark (apt-get install tshark)")
    fields = ["frame.time_epoch", "ip.src", "ip.dst", "infiniband.bth.opcode", "infiniband.bth.psn"]
    fields += ["infiniband.reth.va", "infiniband.reth.dmalen"]
    out = subprocess.run(
        ["tshark", "-n", "-r", str(capture), "-T", "fields", "-E", "separator=|"]
        + sum((["-e", f] for f in fields), []),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    requests, answers = [], set()
    for line in out.splitlines():
        stamp, src, dst, op, psn, va, length = line.split("|")
        sec, frac = stamp.split(".")
        t = int(sec) * 10**9 + int(frac.ljust(9, "0")[:9])
        if int(op) == 0x0C:
            requests.append((t, (src, dst), int(psn), (int(va, 16), int(length))))
        elif int(op) in (0x0D, 0x10):
            answers.add(((dst, src), int(psn)))
    last: dict[tuple[int, int], tuple[int, tuple[str, str], bool]] = {}
    n = nbytes = 0
    for t, device, psn, buffer in requests:
        if buffer in last:
            t0, device0, answered0 = last[buffer]
            if device0 != device and answered0 and t - t0 <= window_ns:
                n, nbytes = n + 1, nbytes + buffer[1]
        last[buffer] = (t, device, (device, psn) in answers)
    return n, nbytes


@pytest.mark.parametrize("answered", [10, 0])
def test_a_failover_replay_is_not_goodput(tmp_path: Path, answered: int) -> None:
    """Device 0 answers ANSWERED of 16 READs, then fails; all 16 are issued again on device 1. The answered ones
    are replays (their bytes moved twice), the rest are goodput; the edge's payload is the buffers' bytes once."""
    spec = R.Failover(answered=answered)
    gen, replayed = R.failover_reads(spec)
    run = R.write_run(tmp_path / "run", gen, rails=2)
    r = analyze([run], workers=1)
    assert r.iterations.count == spec.iterations and r.iterations.period_ns
    (edge,) = [e for e in r.rdma.edges if e.limiter is not None]
    assert (edge.src, edge.dst) == ("node1", "node0")
    window = 0.5 * r.iterations.period_ns
    assert _tshark_replays(run / "node0" / "mlx5_0.pcap", window) == (answered, replayed)
    assert (edge.replayed_reads or 0, edge.replayed_bytes or 0) == (answered, replayed)
    assert edge.payload_bytes == spec.iterations * spec.reads * spec.read_bytes
    assert any("failover" in n for n in r.rdma.notes) == (answered > 0)

"""NCCL's receiver-driven RDMA exchange: who kept the link idle between chunks, a late receiver or a late sender.

The captures come from the generator (tests/support/rocegen.py with grant_first: each chunk waits for the clear-to-
send its receiver writes), the delays set before the run. Each edge's chunks and waits are also worked out from
tshark's InfiniBand dissector on the sender's capture, independently of the read path: the same medians within a
nanosecond's rounding.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from analyze.api import analyze
from tests.support import rocegen as R
from tests.support.requirements import require

SPEC = dict(hosts=4, iterations=8, grant_first=True)
FIRST_OPS, LAST_OPS, ONLY_OPS = {0x06}, {0x08, 0x09}, {0x0A, 0x0B}


def _run(tmp_path: Path, *late: R.Late) -> tuple[R.RoceRing, Path]:
    spec = R.RoceRing(**SPEC, late=late)  # type: ignore[arg-type]
    return spec, R.write_run(tmp_path / "run", R.generate(spec))


def _chunks_per_iteration(spec: R.RoceRing) -> int:
    """The generator's chunks per edge and iteration: each ring step's share in chunks, 2(n-1) steps."""
    return max(1, spec.gradient_bytes // spec.hosts // spec.chunk_bytes) * 2 * (spec.hosts - 1)


def _tshark_waits(spec: R.RoceRing, run: Path, edge: int) -> tuple[int, float, float]:
    """(chunks, median wait for the grant, median wait on the sender) of EDGE from tshark's decode of its sender's
    capture: chunk starts and ends by opcode, grants as WRITEs of at most 64 bytes (their RETH's DMA length) to
    the sender's own QPs, paired by the generator's QP numbering; a chunk's idle time is since the latest end."""
    require(shutil.which("tshark") is not None, "needs tshark (apt-get install tshark)")
    fields = ["frame.time_epoch", "infiniband.bth.destqp", "infiniband.bth.opcode", "infiniband.reth.dmalen"]
    out = subprocess.run(
        ["tshark", "-n", "-r", str(run / spec.host(edge) / "mlx5_0.pcap"), "-T", "fields", "-E", "separator=|"]
        + sum((["-e", f] for f in fields), []),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pairs = R._qp_numbers(spec, edge)
    data_qp = {rqp: q for q, (rqp, _) in enumerate(pairs)}
    grant_qp = {sqp: q for q, (_, sqp) in enumerate(pairs)}
    starts, ends, grants = [], [], {q: [] for q in range(len(pairs))}
    for line in out.splitlines():
        stamp, qp_text, op_text, length = line.split("|")
        sec, frac = stamp.split(".")
        t, qp, op = int(sec) * 10**9 + int(frac.ljust(9, "0")[:9]), int(qp_text, 16), int(op_text)
        if qp in grant_qp and op in ONLY_OPS and int(length) <= 64:
            grants[grant_qp[qp]].append(t)
        elif qp in data_qp:
            if op in FIRST_OPS | ONLY_OPS:
                starts.append((t, data_qp[qp]))
            if op in LAST_OPS | ONLY_OPS:
                ends.append(t)
    receiver, sender = [], []
    for k, (t, q) in enumerate(starts):
        end = max((e for e in ends if e < t), default=None)
        grant = max((g for g in grants[q] if g <= t), default=None)
        if end is None or grant is None or (k and starts[k - 1][0] > end):
            continue
        idle = t - end
        receiver.append(min(max(grant - end, 0), idle))
        sender.append(idle - receiver[-1])
    return len(starts), float(np.median(receiver)), float(np.median(sender))


@pytest.mark.parametrize("role,host,delay_ns", [("receiver", 2, 200_000), ("sender", 1, 150_000)])
def test_a_rank_late_on_every_chunk_is_named(tmp_path: Path, role: str, host: int, delay_ns: int) -> None:
    """The late receiver's incoming edge waits for each grant, the late sender's outgoing edge sends each chunk
    late: the host is named, the role said, and each iteration loses the delay on every chunk (within 2 %)."""
    spec, run = _run(tmp_path, R.Late(host, delay_ns, role == "receiver"))
    r = analyze([run], workers=1)
    assert r.iterations.count == spec.iterations and r.iterations.confident, r.iterations
    (found,) = r.stragglers
    assert (found.host, found.kind, found.confidence >= 0.8) == (spec.host(host), "compute", True), found
    assert found.evidence[0].endswith(f"({role})"), found.evidence
    assert found.lost_ns_per_iteration == pytest.approx(delay_ns * _chunks_per_iteration(spec), rel=0.02)
    edge = host - 1 if role == "receiver" else host
    (row,) = [e for e in r.rdma.edges if (e.src, e.dst) == (spec.host(edge), spec.host((edge + 1) % spec.hosts))]
    chunks, grant_ns, send_ns = _tshark_waits(spec, run, edge)
    assert (row.chunks, row.grant_wait_ns, row.send_wait_ns) == (chunks, round(grant_ns), round(send_ns))
    assert (grant_ns if role == "receiver" else send_ns) >= delay_ns


def test_a_clean_exchange_names_no_one(tmp_path: Path) -> None:
    """No rank late: every edge waits a grant's own round trip per chunk (a few microseconds, as tshark's decode
    has it), no one is named."""
    spec, run = _run(tmp_path)
    r = analyze([run], workers=1)
    assert r.stragglers == []
    ring = [e for e in r.rdma.edges if e.chunks]
    assert len(ring) == spec.hosts
    for e in ring:
        edge = int(e.src.removeprefix("node"))
        assert (e.chunks, e.grant_wait_ns, e.send_wait_ns) == tuple(round(x) for x in _tshark_waits(spec, run, edge)), e
        assert e.chunks == _chunks_per_iteration(spec) * spec.iterations
        assert 0 < e.grant_wait_ns < 10_000 and e.send_wait_ns == 0, e


def test_grants_written_after_their_chunks_tell_no_one_late(tmp_path: Path) -> None:
    """The generator's older order (each slot written back after its chunk, as the committed RDMA fixtures hold):
    the grants never hold a chunk back, and no one is named."""
    spec = R.RoceRing(hosts=4, iterations=8)
    r = analyze([R.write_run(tmp_path / "run", R.generate(spec))], workers=1)
    assert r.stragglers == []
    assert all(e.grant_wait_ns == 0 for e in r.rdma.edges if e.chunks), r.rdma.edges

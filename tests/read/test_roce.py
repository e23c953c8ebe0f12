"""RDMA captures read by the compiled path: every queue pair's counters audited by tshark's InfiniBand dissector,
a sample decoded by scapy's RoCE layer, and the generator's own ground truth (tests/support/rocegen.py).

The files are generated (no RDMA device exists here) in all four framings a capture can hold: RoCEv2 over IPv4 and
IPv6 (UDP 4791), RoCEv1 (Ethertype 0x8915 with a GRH) and InfiniBand's own link type (LRH with local IDs, or with a
GRH and GIDs), each with a
lost packet answered by a NAK and go-back-N, a lost packet found by the requester's timer, and congestion (CE marks
and CNPs) at known places.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from analyze.read import layouts as L
from analyze.read.fold import merge_host, scan_host
from tests.support import rocegen as R
from tests.support.requirements import require

TRANSPORTS = ["v2", "v2-ipv6", "v1", "ib", "ib-grh"]
SPEC = dict(
    hosts=3,
    iterations=2,
    gradient_bytes=3 << 20,
    losses=(R.Loss(0, 0, 1, 20), R.Loss(1, 1, 2, 7, nak=False)),
    congestion=(R.Congestion(2, 1, 0, ce=30),),
)
REQUEST_OPS = {0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B}  # the RDMA WRITEs the generator sends
FIRST_OPS = {0x06, 0x0A, 0x0B}
IMM_OPS = {0x09, 0x0B}
FIELDS = [
    "infiniband.bth.destqp",
    "infiniband.bth.opcode",
    "infiniband.bth.psn",
    "infiniband.bth.a",
    "infiniband.aeth.syndrome",
    "ip.dsfield.ecn",
    "ipv6.tclass",
    "infiniband.grh.tclass",
]


def _generated(tmp_path: Path, transport: str) -> tuple[R.Generated, Path]:
    gen = R.generate(R.RoceRing(transport=transport, **SPEC))
    return gen, R.write_run(tmp_path / transport, gen)


def _tshark(path: Path, transport: str, tmp_path: Path) -> list[list[str]]:
    """tshark's decode, one row of FIELDS per packet. tshark reads no LINKTYPE_INFINIBAND pcap, so that file is
    given to its InfiniBand dissector as a user link type."""
    require(shutil.which("tshark") is not None, "needs tshark (apt-get install tshark)")
    args = ["tshark", "-n", "-r", str(path)]
    if transport.startswith("ib"):
        data = bytearray(path.read_bytes())
        data[20:24] = (147).to_bytes(4, "little")  # LINKTYPE_USER0
        path = tmp_path / "user0.pcap"
        path.write_bytes(data)
        args = ["tshark", "-n", "-r", str(path), "-o", 'uat:user_dlts:"User 0 (DLT=147)","infiniband","0","","0",""']
    out = subprocess.run(
        [*args, "-T", "fields", "-E", "separator=|", *sum((["-e", f] for f in FIELDS), [])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split("|") for line in out.splitlines()]


def _ecn(row: list[str]) -> int:
    """The ECN bits from whichever header tshark decoded: IPv4's field, or IPv6's or the GRH's traffic class."""
    if row[5]:
        return int(row[5], 0)
    tclass = row[6] or row[7]
    return int(tclass, 0) & 3 if tclass else 0


def _audit(rows: list[list[str]]) -> dict[int, Counter]:
    """Per destination QP, counted from tshark's fields alone: packets, opcodes, ACKs and NAKs by AETH syndrome,
    CNPs, CE marks, messages, immediates, and request PSNs sent again or skipped (24-bit arithmetic)."""
    per: dict[int, Counter] = defaultdict(Counter)
    expected: dict[int, int] = {}
    for row in rows:
        qp, op, psn = int(row[0], 16), int(row[1]), int(row[2])
        c = per[qp]
        c["packets"] += 1
        c["ce"] += _ecn(row) == 3
        if op == 0x81:
            c["cnps"] += 1
        elif op == 0x11:
            syndrome = int(row[4], 0)
            c["acks"] += syndrome >> 5 == 0
            c["naks"] += syndrome == 0x60
        elif op in REQUEST_OPS:
            c["messages"] += op in FIRST_OPS
            c["imm"] += op in IMM_OPS
            if qp in expected:
                d = (psn - expected[qp]) & 0xFFFFFF
                if d >= 0x800000:
                    c["resent"] += 1
                    continue
                c["gaps"] += d
            expected[qp] = (psn + 1) & 0xFFFFFF
    return per


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_queue_pair_counters_match_tshark(tmp_path: Path, transport: str) -> None:
    gen, root = _generated(tmp_path, transport)
    checked = Counter()
    for host in gen.captures:
        path = root / host / "mlx5_0.pcap"
        hf = merge_host(host, [scan_host([path], bin_ns=1_000_000, byte_mode=L.BYTES_PAYLOAD)])
        roce = (hf.keys[:, 4] & np.uint64(0xFF)) == np.uint64(L.PROTO_ROCE)
        assert roce.all(), "every packet of the file is RDMA: no flow of another protocol"
        qps = ((hf.keys[:, 4] >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.int64)
        assert len(set(qps.tolist())) == len(qps), "the generator's QPs are unique per direction"
        mine = {int(q): a for q, a in zip(qps, hf.agg)}
        audit = _audit(_tshark(path, transport, tmp_path))
        assert set(audit) == set(mine)
        for qp, c in audit.items():
            a = mine[qp]
            got = {
                "packets": a[L.AGG_PACKETS],
                "ce": a[L.AGG_ROCE_CE],
                "cnps": a[L.AGG_ROCE_CNPS],
                "acks": a[L.AGG_ROCE_ACKS],
                "naks": a[L.AGG_ROCE_NAKS],
                "messages": a[L.AGG_ROCE_MESSAGES],
                "imm": a[L.AGG_ROCE_IMM],
                "resent": a[L.AGG_ROCE_RESENT],
                "gaps": a[L.AGG_ROCE_PSN_GAPS],
            }
            assert got == {k: c[k] for k in got}, f"{host} QP {qp:#x}"
            assert a[L.AGG_ROCE_VERSION] == {"v2": 2, "v2-ipv6": 2, "v1": 1, "ib": 3, "ib-grh": 3}[transport]
            checked.update({k: c[k] for k in got})
            # tshark decodes no FECN/BECN bits: they are checked against the generator's marks instead
            checked.update(fecn=a[L.AGG_ROCE_FECN], becn=a[L.AGG_ROCE_BECN])
    # the injected faults, as each side sees them: the NAK and CNPs in both captures, the CE marks (the switch's,
    # after the sender's tap) and the one gap at the receiver; go-back-N's resends in both, the timer's in the
    # sender's only (the receiver gets the lost packet late, but in order)
    ib = transport.startswith("ib")
    marked = (checked["fecn"], checked["ce"]) if ib else (checked["ce"], checked["fecn"])
    assert marked == (30, 0) and checked["becn"] == (checked["cnps"] if ib else 0)
    assert checked["naks"] == 2 and checked["cnps"] >= 2 and checked["gaps"] == 1
    assert checked["resent"] == 2 * gen.resent[0, 0] + gen.resent[1, 0]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_payload_bytes_are_what_the_generator_wrote(tmp_path: Path, transport: str) -> None:
    """RDMA payload per queue pair in the sender's capture: the bytes written, plus each packet sent again; the
    timeout is counted with the quiet time before it."""
    gen, root = _generated(tmp_path, transport)
    for (src, dst, qp), truth in gen.truth.items():
        hf = merge_host("h", [scan_host([root / gen.spec.host(src) / "mlx5_0.pcap"], bin_ns=10**6, byte_mode=0)])
        qps = ((hf.keys[:, 4] >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.int64)
        a = hf.agg[np.flatnonzero(qps == qp)[0]]
        resent_bytes = a[L.AGG_RETRANS_BYTES]
        assert a[L.AGG_ROCE_WRITE_BYTES] - resent_bytes == truth.write_bytes
        assert a[L.AGG_PAYLOAD_BYTES] == a[L.AGG_ROCE_WRITE_BYTES]
        assert a[L.AGG_ROCE_MESSAGES] == truth.messages
        assert a[L.AGG_PACKETS] == truth.packets + truth.acks + truth.naks + truth.cnps
    timed = [a for a in _all_aggs(gen, root) if a[L.AGG_ROCE_TIMEOUTS]]
    assert len(timed) == 1 and timed[0][L.AGG_ROCE_STALL_NS] >= gen.spec.timeout_ns


def _all_aggs(gen: R.Generated, root: Path) -> list[np.ndarray]:
    out = []
    for host in gen.captures:
        hf = merge_host(host, [scan_host([root / host / "mlx5_0.pcap"], bin_ns=10**6, byte_mode=0)])
        out.extend(hf.agg)
    return out


def test_scapy_decodes_the_same_headers(tmp_path: Path) -> None:
    """scapy's RoCE layer (scapy.contrib.roce), an independent decoder, reads the same opcode, QP and PSN as the
    generator wrote on a sample of RoCEv2 packets."""
    from scapy.contrib.roce import BTH
    from scapy.utils import rdpcap

    gen, root = _generated(tmp_path, "v2")
    packets = rdpcap(str(root / "node0" / "mlx5_0.pcap"), count=200)
    seen = Counter()
    for p in packets:
        bth = p[BTH]
        seen[bth.opcode] += 1
        assert 0 <= bth.psn <= 0xFFFFFF
        assert bth.dqpn in {qp for (_, _, qp) in gen.truth}
    assert seen[0x07] > 0 and seen[0x11] > 0  # WRITE middles and ACKs among them

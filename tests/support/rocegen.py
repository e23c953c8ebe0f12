"""RDMA captures of a ring all-reduce as NCCL's InfiniBand transport sends it, with known loss and congestion.

No RDMA device or soft-RoCE module exists on the test machines, so the traffic is generated here, from the header
layouts of the InfiniBand Architecture Specification (vol. 1 ch. 9: LRH, GRH, BTH, RETH, AETH, ImmDt; annex A16
RoCEv1 over Ethertype 0x8915, annex A17 RoCEv2 over UDP 4791) and packed with struct, never with a decoder's
layer classes: tshark's InfiniBand dissector and scapy's RoCE layer then audit the files independently.

What NCCL's IB transport puts on the wire, modelled: each ring edge is a connection of `qps_per_edge` reliable
queue pairs (NCCL_IB_QPS_PER_CONNECTION); each step's share of the gradient is cut into chunks, posted on the
queue pairs in turn as RDMA WRITEs (first/middle/last, the last with immediate data; a chunk of one packet is a
WRITE only with immediate), the last packet of each asking for an ACK. The receiver acknowledges every
`ack_every` packets and each AckReq (coalesced ACKs) and, per chunk, writes a clear-to-send slot back into the
sender's FIFO (a small RDMA WRITE only on its own queue pair, acknowledged by the sender): after the chunk, or with
`grant_first` before it, the chunk waiting for its grant as in NCCL, with ranks late to grant or to send (`Late`).
Injected: a packet lost in the fabric (the receiver NAKs the PSN it expected and the sender goes back to it, or
with `nak=False` the sender's timer fires `timeout_ns` after its last packet and it resends), and congestion (the
switch marks data packets CE, the receiver answers with CNPs, the sender halves its rate for the step).

Every packet lands in the captures of the two hosts it passes (the sender's and the receiver's), except a lost
one, which only its sender's capture holds. The ground truth per queue pair and per capture is kept beside.
"""

from __future__ import annotations

import json
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LINKTYPE_ETHERNET = 1
LINKTYPE_INFINIBAND = 247
BASE_NS = 1_700_000_000_000_000_000
ROCE_PORT = 4791
PSN_MASK = 0xFFFFFF
OP_WRITE_FIRST, OP_WRITE_MIDDLE, OP_WRITE_LAST_IMM, OP_WRITE_ONLY, OP_WRITE_ONLY_IMM = 0x06, 0x07, 0x09, 0x0A, 0x0B
OP_ACK, OP_CNP = 0x11, 0x81
OP_READ_REQUEST, OP_READ_FIRST, OP_READ_MIDDLE, OP_READ_LAST, OP_READ_ONLY = 0x0C, 0x0D, 0x0E, 0x0F, 0x10
EXTENSION = {OP_WRITE_FIRST: 16, OP_WRITE_MIDDLE: 0, OP_WRITE_LAST_IMM: 4, OP_WRITE_ONLY: 16, OP_WRITE_ONLY_IMM: 20}
SYNDROME_ACK, SYNDROME_NAK_PSN = 0x1F, 0x60  # AETH: 000 + credits (31: none advertised); 011 + 00000 PSN error
ECN_ECT0, ECN_CE = 2, 3
CTS_BYTES = 64  # the FIFO slot the receiver writes back per chunk
PROPAGATION_NS = 1_000
RESPONSE_NS = 1_000  # a responder's ACK or NAK leaves this long after the packet it answers arrived
CNP_EVERY_NS = 50_000  # a notification point sends at most one CNP per queue pair in this time


@dataclass(frozen=True)
class Loss:
    """A data packet lost in the fabric: the `packet`-th of the edge's data packets in that step."""

    edge: int
    iteration: int
    step: int = 0
    packet: int = 10
    nak: bool = True  # False: the last packet of its queue pair in the step; no NAK, the timer fires


@dataclass(frozen=True)
class Congestion:
    """The switch before the edge's receiver marks `ce` data packets of a step CE; the receiver sends CNPs.
    Iteration or step -1: every one (a congested port the edge's path always crosses)."""

    edge: int
    iteration: int
    step: int = 0
    ce: int = 40
    slowdown: float = 2.0  # the sender's rate divided by this for the step (DCQCN's reaction)


@dataclass(frozen=True)
class Late:
    """A rank late in NCCL's receiver-driven exchange, every chunk of every step: as a receiver it posts each
    clear-to-send `ns` after it could (after the chunk before arrived); as a sender it starts each chunk `ns`
    after the clear-to-send that grants it arrived."""

    host: int
    ns: int
    receiver: bool


@dataclass(frozen=True)
class RoceRing:
    hosts: int = 4
    iterations: int = 5
    gradient_bytes: int = 8 << 20
    qps_per_edge: int = 2
    mtu: int = 4096
    chunk_bytes: int = 128 << 10
    link_bps: float = 25e9
    compute_ns: int = 12_000_000
    # "v2" (IPv4), "v2-ipv6", "v1" (Ethertype 0x8915, GRH), "ib" (LRH, local IDs) or "ib-grh" (LRH, GRH, GIDs)
    transport: str = "v2"
    ack_every: int = 16
    snaplen: int = 128
    losses: tuple[Loss, ...] = ()
    congestion: tuple[Congestion, ...] = ()
    timeout_ns: int = 4_194_304  # 4.096 us x 2^10
    seed: int = 7
    clock_offsets_ns: tuple[int, ...] = ()  # per host: its capture clock ahead of true time by this much
    # NCCL's receiver-driven flow: each chunk waits for its clear-to-send, written before it (one slot granted at a
    # time); False writes each slot back after its chunk, as earlier captures of this generator do
    grant_first: bool = False
    late: tuple[Late, ...] = ()  # with grant_first

    def host(self, h: int) -> str:
        return f"node{h}"

    def address(self, h: int, rail: int = 0) -> str:
        if self.transport == "v2-ipv6":
            return f"fd00::{h + 1}"
        if self.transport == "ib":
            return f"lid:{h + 1}"
        if self.transport == "ib-grh":
            return f"fe80::2:c903:0:{h + 1}"  # the subnet prefix and a port GUID
        return f"10.0.{rail}.{h + 1}"  # RoCEv1 GIDs are IPv4-mapped (::ffff:10.0.0.x); RoCEv2 rails 10.0.<rail>


@dataclass
class QpTruth:
    """What one queue pair (src host -> dst host, destination QP) carried, by the generator's own count."""

    src: int
    dst: int
    qp: int
    write_bytes: int = 0
    messages: int = 0
    imm: int = 0
    acks: int = 0
    naks: int = 0
    cnps: int = 0
    packets: int = 0  # as sent, resends included


@dataclass
class Capture:
    records: list[tuple[int, bytes, int]] = field(default_factory=list)  # (ts ns, frame, wire length)


@dataclass
class Generated:
    spec: RoceRing
    captures: dict[str, Capture]
    truth: dict[tuple[int, int, int], QpTruth]
    step_bytes: int  # bytes each edge carries per step
    iteration_starts_ns: list[int]
    lost: list[tuple[int, int, int]]  # (edge, qp, psn) of each lost packet
    resent: dict[tuple[int, int], int]  # (edge, qp) -> packets sent again
    timeouts: int


def _ipv4_checksum(header: bytes) -> int:
    s = sum(struct.unpack("!10H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _bth(op: int, qp: int, psn: int, ack_req: bool, pad: int = 0, fecn: bool = False, becn: bool = False) -> bytes:
    """Base Transport Header: opcode; SE, MigReq, PadCnt, TVer; P_Key; F, B, reserved; destination QP;
    AckReq, reserved; PSN."""
    return struct.pack(
        "!BBHI I",
        op,
        0x40 | (pad << 4),  # MigReq set, as NICs send it
        0xFFFF,
        ((0x80 if fecn else 0) | (0x40 if becn else 0)) << 24 | (qp & PSN_MASK),
        (0x80000000 if ack_req else 0) | (psn & PSN_MASK),
    )


def _extension(op: int, length: int, imm: int, syndrome: int = 0, msn: int = 0) -> bytes:
    """The extension headers an opcode carries: RETH (VA, R_Key, DMA length), ImmDt, AETH (syndrome, MSN)."""
    reth = struct.pack("!QII", 0x7F0000000000, 0x1234, length)
    if op in (OP_WRITE_FIRST, OP_WRITE_ONLY):
        return reth
    if op == OP_WRITE_ONLY_IMM:
        return reth + struct.pack("!I", imm)
    if op == OP_WRITE_LAST_IMM:
        return struct.pack("!I", imm)
    if op == OP_ACK:
        return struct.pack("!I", (syndrome << 24) | (msn & PSN_MASK))
    if op == OP_CNP:
        return bytes(16)
    return b""


def _mac(h: int) -> bytes:
    return bytes([0x02, 0, 0, 0, 0, h + 1])


class _Framer:
    """Wraps a BTH packet (BTH + extension + payload length) in the spec's transport framing."""

    def __init__(self, spec: RoceRing) -> None:
        self.spec = spec

    def frame(
        self, src: int, dst: int, bth: bytes, ext: bytes, payload: int, ecn: int, sport: int, rail: int = 0
    ) -> bytes:
        t = self.spec.transport
        if t.startswith("ib"):  # InfiniBand's switch marks FECN in the BTH, and the receiver's CNP carries BECN
            bth = (
                bth[:4] + bytes([bth[4] | (0x80 if ecn == ECN_CE else 0) | (0x40 if bth[0] == OP_CNP else 0)]) + bth[5:]
            )
        body = bth + ext + bytes(payload) + b"\x5a\x5a\x5a\x5a"  # payload, then the ICRC (not checked by readers)
        if t == "ib":
            words = (8 + len(body)) // 4
            lrh = struct.pack("!BBHHH", 0x00, 0x02, dst + 1, words & 0x7FF, src + 1)  # LNH 2: BTH next
            return lrh + body + b"\x00\x00"  # VCRC
        if t == "ib-grh":
            grh = struct.pack("!IHBB", 0x60000000, len(body), 0x1B, 64)
            gid = lambda h: bytes.fromhex("fe800000000000000002c90300000000")[:15] + bytes([h + 1])  # noqa: E731
            words = (8 + 40 + len(body)) // 4
            lrh = struct.pack("!BBHHH", 0x00, 0x03, dst + 1, words & 0x7FF, src + 1)  # LNH 3: a GRH next
            return lrh + grh + gid(src) + gid(dst) + body + b"\x00\x00"
        if t == "v2":
            udp = struct.pack("!HHHH", sport, ROCE_PORT, 8 + len(body), 0)
            ip = bytearray(
                struct.pack(
                    "!BBHHHBBH4s4s",
                    0x45,
                    (26 << 2) | ecn,  # DSCP 26: the RoCE traffic class NCCL deployments use
                    20 + len(udp) + len(body),
                    0,
                    0x4000,
                    64,
                    17,
                    0,
                    bytes([10, 0, rail, src + 1]),
                    bytes([10, 0, rail, dst + 1]),
                )
            )
            ip[10:12] = struct.pack("!H", _ipv4_checksum(bytes(ip)))
            return _mac(dst) + _mac(src) + b"\x08\x00" + bytes(ip) + udp + body
        if t == "v2-ipv6":
            udp = struct.pack("!HHHH", sport, ROCE_PORT, 8 + len(body), 0)
            ip6 = struct.pack("!IHBB", 0x60000000 | ((26 << 2 | ecn) << 20), len(udp) + len(body), 17, 64)
            a = bytes.fromhex("fd00" + "00" * 13) + bytes([src + 1])
            b = bytes.fromhex("fd00" + "00" * 13) + bytes([dst + 1])
            return _mac(dst) + _mac(src) + b"\x86\xdd" + ip6 + a + b + udp + body
        if t == "v1":
            grh = struct.pack("!IHBB", 0x60000000 | ((26 << 2 | ecn) << 20), len(body), 0x1B, 64)
            gid = lambda h: bytes(10) + b"\xff\xff" + bytes([10, 0, 0, h + 1])  # noqa: E731
            return _mac(dst) + _mac(src) + b"\x89\x15" + grh + gid(src) + gid(dst) + body
        raise ValueError(f"unknown transport {t!r}")


def _qp_numbers(spec: RoceRing, edge: int) -> list[tuple[int, int]]:
    """(receiver's QP, sender's QP) for each queue pair of an edge: distinct, as a NIC numbers them."""
    return [(0x1000 + edge * 0x40 + q, 0x2000 + edge * 0x40 + q) for q in range(spec.qps_per_edge)]


def generate(spec: RoceRing) -> Generated:
    """Simulate the ring's iterations packet by packet and return each host's capture and the ground truth."""
    rng = random.Random(spec.seed)
    n = spec.hosts
    framer = _Framer(spec)
    captures = {spec.host(h): Capture() for h in range(n)}
    truth: dict[tuple[int, int, int], QpTruth] = {}
    # PSNs start anywhere; the first queue pair starts just below the wrap so every run crosses 2^24
    data_psn: dict[tuple[int, int], int] = {}
    cts_psn: dict[tuple[int, int], int] = {}
    for e in range(n):
        for q in range(spec.qps_per_edge):
            data_psn[e, q] = PSN_MASK - 40 if (e, q) == (0, 0) else rng.randrange(PSN_MASK)
            cts_psn[e, q] = rng.randrange(PSN_MASK)
    step_bytes = spec.gradient_bytes // n
    lost: list[tuple[int, int, int]] = []
    resent: dict[tuple[int, int], int] = {}
    timeouts = 0
    iteration_starts: list[int] = []

    def qp_truth(src: int, dst: int, qp: int) -> QpTruth:
        return truth.setdefault((src, dst, qp), QpTruth(src, dst, qp))

    def emit(ts: int, src: int, dst: int, frame: bytes, lost_in_fabric: bool = False) -> None:
        cap = frame[: spec.snaplen]
        captures[spec.host(src)].records.append((ts, cap, len(frame)))
        if not lost_in_fabric:
            captures[spec.host(dst)].records.append((ts + PROPAGATION_NS, cap, len(frame)))

    def packet(src: int, dst: int, op: int, qp: int, psn: int, ack_req: bool, pay: int, ecn: int, *ext: int) -> bytes:
        """A frame from SRC to queue pair QP of DST; the UDP source port is the QP's entropy, as NICs pick it."""
        return framer.frame(src, dst, _bth(op, qp, psn, ack_req), _extension(*ext), pay, ecn, 0xC000 | (qp & 0x3FFF))

    def answer(ts: int, frm: int, to: int, qp: int, psn: int, syndrome: int = SYNDROME_ACK) -> None:
        """An ACK (or with a NAK's syndrome, a NAK) from FRM to queue pair QP of TO, naming PSN, sent at TS."""
        emit(ts, frm, to, packet(frm, to, OP_ACK, qp, psn, False, 0, ECN_ECT0, OP_ACK, 0, 0, syndrome, psn))
        truth = qp_truth(frm, to, qp)
        if syndrome == SYNDROME_ACK:
            truth.acks += 1
        else:
            truth.naks += 1

    def late_ns(host: int, receiver: bool) -> int:
        """How late HOST posts a clear-to-send (RECEIVER) or starts a granted chunk, per chunk."""
        return sum(x.ns for x in spec.late if (x.host, x.receiver) == (host, receiver))

    def wire_ns(frame_len: int, rate: float) -> int:
        return int((frame_len + 20) * 8 / rate * 1e9)  # preamble and gap

    sent_psns: dict[int, list[tuple[int, int, int, bool]]] = {}  # q -> (psn, op, payload, ack_req) this step
    expected: dict[int, int] = {}  # q -> the PSN the receiver waits for since a loss

    def go_back(e: int, q: int, now: int, rate: float) -> int:
        """The sender resends every packet of queue pair q from the PSN the receiver expects; returns the time
        after the last. The receiver takes them in order again (and acknowledges the last)."""
        src, dst = e, (e + 1) % n
        rqp, sqp = _qp_numbers(spec, e)[q]
        back = [p for p in sent_psns[q] if ((p[0] - expected[q]) & PSN_MASK) < 0x800000]
        resent[e, q] = resent.get((e, q), 0) + len(back)
        for psn, op, pay, ack_req in back:
            frame = packet(src, dst, op, rqp, psn, ack_req, pay, ECN_ECT0, op, pay, 0xABCD)
            emit(now, src, dst, frame)
            qp_truth(src, dst, rqp).packets += 1
            now += wire_ns(len(frame), rate)
        answer(now + PROPAGATION_NS + RESPONSE_NS, dst, src, sqp, back[-1][0])
        del expected[q]
        return now

    t = BASE_NS + 10_000_000
    for it in range(spec.iterations):
        t += spec.compute_ns
        iteration_starts.append(t)
        for step in range(2 * (n - 1)):
            step_end = t
            for e in range(n):
                src, dst = e, (e + 1) % n
                qps = _qp_numbers(spec, e)
                loss = next((x for x in spec.losses if (x.edge, x.iteration, x.step) == (e, it, step)), None)
                cong = next(
                    (x for x in spec.congestion if x.edge == e and x.iteration in (it, -1) and x.step in (step, -1)),
                    None,
                )
                rate = spec.link_bps / (cong.slowdown if cong else 1.0)
                # the step's packets: chunks over the queue pairs in turn, each chunk a WRITE message
                packets: list[tuple[int, int, int, bool]] = []  # (q, opcode, payload, ack_req)
                chunks = max(1, step_bytes // spec.chunk_bytes)
                for c in range(chunks):
                    q = c % spec.qps_per_edge
                    size = step_bytes // chunks + (step_bytes % chunks if c == chunks - 1 else 0)
                    count = -(-size // spec.mtu)
                    for i in range(count):
                        pay = min(spec.mtu, size - i * spec.mtu)
                        if count == 1:
                            op = OP_WRITE_ONLY_IMM
                        elif i == 0:
                            op = OP_WRITE_FIRST
                        elif i == count - 1:
                            op = OP_WRITE_LAST_IMM
                        else:
                            op = OP_WRITE_MIDDLE
                        packets.append((q, op, pay, i == count - 1))
                    packets.insert(len(packets) - count if spec.grant_first else len(packets), (q, -1, 0, False))
                lost_at = -1
                if loss is not None:
                    data_idx = [i for i, p in enumerate(packets) if p[1] >= 0]
                    if loss.nak:
                        lost_at = data_idx[loss.packet]
                    else:  # the last data packet of its queue pair in the step: nothing after it to show the gap
                        q0 = packets[data_idx[loss.packet]][0]
                        lost_at = max(i for i in data_idx if packets[i][0] == q0)
                ce_left = cong.ce if cong else 0
                last_cnp: dict[int, int] = {}
                since_ack: dict[int, int] = {}
                sent_psns.clear()
                expected.clear()
                nak_pending: dict[int, int] = {}  # q -> time the NAK reaches the sender
                now = t
                queue = list(packets)
                k = 0
                while k < len(queue):
                    q, op, pay, ack_req = queue[k]
                    rqp, sqp = qps[q]
                    # a NAK that has arrived: go back to the PSN it names, resending everything sent after it
                    for qq in [x for x, arrive in nak_pending.items() if arrive <= now]:
                        del nak_pending[qq]
                        now = go_back(e, qq, now, rate)
                    if op == -1:  # clear-to-send: the receiver writes the FIFO slot, the sender acknowledges it
                        now += late_ns(dst, True)
                        psn = cts_psn[e, q]
                        cts_psn[e, q] = (psn + 1) & PSN_MASK
                        frame = packet(
                            dst, src, OP_WRITE_ONLY, sqp, psn, True, CTS_BYTES, ECN_ECT0, OP_WRITE_ONLY, CTS_BYTES, 0
                        )
                        emit(now, dst, src, frame)
                        tr = qp_truth(dst, src, sqp)
                        tr.write_bytes += CTS_BYTES
                        tr.messages += 1
                        tr.packets += 1
                        answer(now + PROPAGATION_NS + RESPONSE_NS, src, dst, rqp, psn)
                        if spec.grant_first:  # the chunk leaves once its grant has arrived
                            now += PROPAGATION_NS + late_ns(src, False)
                        k += 1
                        continue
                    psn = data_psn[e, q]
                    data_psn[e, q] = (psn + 1) & PSN_MASK
                    ecn = ECN_ECT0
                    if ce_left > 0 and k % 3 == 0:
                        ecn = ECN_CE
                        ce_left -= 1
                    frame = packet(src, dst, op, rqp, psn, ack_req, pay, ecn, op, pay, 0xABCD)
                    is_lost = k == lost_at
                    # the sender's capture sees ECT(0); the mark is the switch's, after the sender's tap
                    sender_frame = (
                        frame
                        if ecn != ECN_CE
                        else packet(src, dst, op, rqp, psn, ack_req, pay, ECN_ECT0, op, pay, 0xABCD)
                    )
                    captures[spec.host(src)].records.append((now, sender_frame[: spec.snaplen], len(sender_frame)))
                    arrive = now + PROPAGATION_NS
                    if not is_lost:
                        captures[spec.host(dst)].records.append((arrive, frame[: spec.snaplen], len(frame)))
                    tr = qp_truth(src, dst, rqp)
                    tr.packets += 1
                    tr.write_bytes += pay
                    tr.messages += op in (OP_WRITE_FIRST, OP_WRITE_ONLY, OP_WRITE_ONLY_IMM)
                    tr.imm += op in (OP_WRITE_LAST_IMM, OP_WRITE_ONLY_IMM)
                    sent_psns.setdefault(q, []).append((psn, op, pay, ack_req))
                    if is_lost:
                        lost.append((e, rqp, psn))
                        expected.setdefault(q, psn)
                    elif q in expected and expected[q] != psn and q not in nak_pending and loss and loss.nak:
                        # the receiver sees a PSN past the one it expects: one NAK naming the expected PSN
                        answer(arrive + RESPONSE_NS, dst, src, sqp, expected[q], SYNDROME_NAK_PSN)
                        nak_pending[q] = arrive + RESPONSE_NS + PROPAGATION_NS
                        sent_psns[q] = [p for p in sent_psns[q] if ((p[0] - expected[q]) & PSN_MASK) < 0x800000]
                    elif not is_lost and q not in expected:
                        since_ack[q] = since_ack.get(q, 0) + 1
                        if ack_req or since_ack[q] >= spec.ack_every:
                            since_ack[q] = 0
                            answer(arrive + RESPONSE_NS, dst, src, sqp, psn)
                    if ecn == ECN_CE and arrive - last_cnp.get(q, -CNP_EVERY_NS) >= CNP_EVERY_NS:
                        last_cnp[q] = arrive
                        cnp = packet(dst, src, OP_CNP, sqp, 0, False, 0, 1, OP_CNP, 0, 0)
                        emit(arrive + RESPONSE_NS, dst, src, cnp)
                        qp_truth(dst, src, sqp).cnps += 1
                    now += wire_ns(len(frame), rate)
                    k += 1
                # a NAK that arrives after the step's last packet still makes the sender go back
                for qq, arrive in nak_pending.items():
                    now = go_back(e, qq, max(now, arrive), rate)
                if loss is not None and not loss.nak:  # silence, then the requester's timer: go back
                    q0 = packets[lost_at][0]
                    now = go_back(e, q0, now + spec.timeout_ns, rate)
                    timeouts += 1
                step_end = max(step_end, now)
            t = step_end + 2 * PROPAGATION_NS + RESPONSE_NS
    for h, offset in enumerate(spec.clock_offsets_ns):
        cap = captures[spec.host(h)]
        cap.records = [(ts + offset, data, wire) for ts, data, wire in cap.records]
    for cap in captures.values():
        cap.records.sort(key=lambda r: r[0])
    return Generated(spec, captures, truth, step_bytes, iteration_starts, lost, resent, timeouts)


def pcap(records: list[tuple[int, bytes, int]], linktype: int, snaplen: int) -> bytes:
    """A nanosecond pcap of the records."""
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, snaplen, linktype)]
    for ts, data, wire in records:
        sec, ns = divmod(ts, 10**9)
        out.append(struct.pack("<IIII", sec, ns, len(data), wire) + data)
    return b"".join(out)


def with_frames(gen: Generated, frames: dict[int, list[Any]]) -> Generated:
    """GEN with more frames (pcapgen Frames: ts_ns, data, wire_len) in host h's capture, by host index: NCCL's own
    TCP beside its RDMA data."""
    for h, extra in frames.items():
        records = gen.captures[gen.spec.host(h)].records
        records.extend((f.ts_ns, f.data[: gen.spec.snaplen], f.wire_len) for f in extra)
        records.sort(key=lambda r: r[0])
    return gen


def write_run(root: Path, gen: Generated, rails: int = 1) -> Path:
    """A capture directory (run.json, each host's meta.json and capture) of the generated ring; each host's RoCEv2
    addresses on RAILS devices (one capture holds them all, as `-i any` or a mirror of every port would)."""
    spec = gen.spec
    linktype = LINKTYPE_INFINIBAND if spec.transport.startswith("ib") else LINKTYPE_ETHERNET
    iface = "mlx5_0"
    first = min(r[0] for c in gen.captures.values() for r in c.records)
    last = max(r[0] for c in gen.captures.values() for r in c.records)
    for h in range(spec.hosts):
        name = spec.host(h)
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        recs = gen.captures[name].records
        (d / f"{iface}.pcap").write_bytes(pcap(recs, linktype, spec.snaplen))
        meta = {
            "schema": 1,
            "status": "complete",
            "host": name,
            "interface": iface,
            "addresses": [] if spec.transport == "ib" else [spec.address(h, r) for r in range(rails)],
            "mtu": spec.mtu,
            "link_speed_bps": spec.link_bps,
            "link_speed_source": "given",
            "snaplen": spec.snaplen,
            "start_ns": first - 5_000_000,
            "end_ns": last + 5_000_000,
            "counters": {"captured": len(recs), "received_by_filter": len(recs)},
            "files": [f"{iface}.pcap"],
        }
        (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    run = {
        "schema": 1,
        "run_id": f"roce-{spec.transport}",
        "status": "complete",
        "command": ["generated"],
        "hosts": [spec.host(h) for h in range(spec.hosts)],
        "start_ns": first - 10_000_000,
        "end_ns": last + 10_000_000,
        "exit_code": 0,
        "generated_by": "tests/support/rocegen.py: a synthetic NCCL ring over RDMA, not a real run",
    }
    (root / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    return root


@dataclass(frozen=True)
class Failover:
    """Two hosts, two RoCEv2 devices (rails) each: the first reads the second's buffers with RDMA READs, `reads` of
    `read_bytes` per iteration on device 0's queue pairs in turn. In iteration `fails_in`, after `answered` of its
    reads came back, device 0 fails (no response to the rest) and the operation's reads are issued again, every
    one, on device 1's queue pairs: the first `answered` are the same bytes moved twice. Later iterations run on
    device 1."""

    iterations: int = 6
    reads: int = 16
    read_bytes: int = 256 << 10
    qps: int = 2
    fails_in: int = 3
    answered: int = 10
    compute_ns: int = 10_000_000


def failover_reads(spec: Failover) -> tuple[Generated, int]:
    """The two hosts' captures and the bytes the replay moved again (the generator's truth)."""
    ring = RoceRing(hosts=2, iterations=spec.iterations)
    framer = _Framer(ring)
    captures = {ring.host(h): Capture() for h in range(2)}
    psn = {(d, q): 1000 * (d + 1) + q for d in range(2) for q in range(spec.qps)}
    packets = -(-spec.read_bytes // ring.mtu)

    def emit(ts: int, rail: int, src: int, dst: int, bth: bytes, ext: bytes, payload: int) -> int:
        """The frame on both hosts' captures; returns its time on the wire."""
        frame = framer.frame(src, dst, bth, ext, payload, ECN_ECT0, 0xC000 | rail, rail)
        for h, at in ((src, ts), (dst, ts + PROPAGATION_NS)):
            captures[ring.host(h)].records.append((at, frame[: ring.snaplen], len(frame)))
        return int((len(frame) + 20) * 8 / ring.link_bps * 1e9)

    t, rail, replayed, starts = BASE_NS + 10_000_000, 0, 0, []
    for it in range(spec.iterations):
        t += spec.compute_ns
        starts.append(t)
        issued = [(k, rail) for k in range(spec.reads)] + [(k, 1) for k in range(spec.reads) if it == spec.fails_in]
        for k, dev in issued:
            q = k % spec.qps
            first = psn[dev, q]
            psn[dev, q] = (first + packets) & PSN_MASK
            reth = struct.pack("!QII", 0x7F00_0000_0000 + k * spec.read_bytes, 0x1234 + dev, spec.read_bytes)
            t += emit(t, dev, 0, 1, _bth(OP_READ_REQUEST, 0x3000 + 0x40 * dev + q, first, True), reth, 0)
            if it == spec.fails_in and dev == 0 and k >= spec.answered:
                continue  # the device failed: no response
            replayed += spec.read_bytes if (it == spec.fails_in and dev == 1 and k < spec.answered) else 0
            t += PROPAGATION_NS + RESPONSE_NS
            for i in range(packets):
                op = OP_READ_ONLY if packets == 1 else OP_READ_FIRST + (i > 0) + (i == packets - 1)
                aeth = b"" if op == OP_READ_MIDDLE else struct.pack("!I", (SYNDROME_ACK << 24) | it)
                pay = min(ring.mtu, spec.read_bytes - i * ring.mtu)
                t += emit(t, dev, 1, 0, _bth(op, 0x4000 + 0x40 * dev + q, (first + i) & PSN_MASK, False), aeth, pay)
        rail = 1 if it >= spec.fails_in else 0
    for cap in captures.values():
        cap.records.sort(key=lambda r: r[0])
    return Generated(ring, captures, {}, 0, starts, [], {}, 0), replayed


def fixture_files() -> dict[str, bytes]:
    """Small committed captures (fixtures/rdma/), one per framing, each one host's view of a 3-host ring with a NAK,
    a timer resend and CNPs: seeds of the fuzz corpus."""
    files = {}
    for transport in ("v2", "v2-ipv6", "v1", "ib"):
        spec = RoceRing(
            hosts=3,
            iterations=1,
            gradient_bytes=384 << 10,
            chunk_bytes=32 << 10,
            transport=transport,
            losses=(Loss(0, 0, 0, 3), Loss(1, 0, 1, 2, nak=False)),
            congestion=(Congestion(0, 0, 2, ce=6),),
        )
        gen = generate(spec)
        linktype = LINKTYPE_INFINIBAND if transport == "ib" else LINKTYPE_ETHERNET
        files[f"rdma/{transport}.pcap"] = pcap(gen.captures[spec.host(1)].records, linktype, spec.snaplen)
    return files

"""The bundled example run (fixtures/example/): four hosts doing a gloo-style ring all-reduce.

Each host sends to its ring predecessor in launch order, so data flows against the launch order
(h3 -> h2 -> h4 -> h1 -> h3 for launch order h3, h1, h4, h2, whose address order differs). Every
iteration is a compute gap followed by 2(N-1) ring steps of S/N bytes each, so every host sends exactly
2(N-1)/N * S payload bytes per iteration, paced at ~0.9 Gbit/s on a 1 Gbit/s link, over one long-lived
TCP connection per ring edge, each data segment ACKed. Every host's capture holds what it sent (at its
send time) and what it received (one serialization plus propagation later).

Segments are TSO-sized (45 * 1448-byte MSS, as tcpdump sees them on an offloading NIC) and captured
headers-only (snaplen 96): MTU-sized segments would need ~35 MB of records for 10 iterations of 4 MB,
and the example must stay small enough to commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from tests.support.pcapgen import BASE_NS, ETHERNET, LINKTYPE_ETHERNET, Frame, TcpConn, pcap_bytes, truth

LISTEN_PORT = 29500


@dataclass(frozen=True)
class RingSpec:
    """What the example run does; every expected number follows from these."""

    launch: tuple[str, ...] = ("h3", "h1", "h4", "h2")
    gradient_bytes: int = 4 * 2**20  # S
    iterations: int = 10
    compute_ns: int = 50_000_000
    send_bps: float = 0.9e9  # IP bytes while sending
    link_bps: int = 1_000_000_000
    segment_bytes: int = 45 * 1448
    latency_ns: int = 20_000
    ack_delay_ns: int = 8_000
    step_overhead_ns: int = 30_000  # reduce/copy between ring steps
    start_ns: int = BASE_NS + 20_000_000_000
    snaplen: int = 96

    def address(self, host: str) -> str:
        return f"10.77.0.{int(host.lstrip('h'))}"


def _serialize_ns(ip_bytes: int, bps: float) -> int:
    return round(ip_bytes * 8e9 / bps)


def simulate(spec: RingSpec) -> tuple[dict[str, list[Frame]], list[tuple[Frame, str]], list[dict]]:
    """Every host's capture (frames at that host's timestamps), each sent frame with its sender, and markers."""
    n = len(spec.launch)
    chunk = spec.gradient_bytes // n
    if chunk * n != spec.gradient_bytes:
        raise ValueError("gradient bytes must divide into N chunks")
    caps: dict[str, list[Frame]] = {h: [] for h in spec.launch}
    sent: list[tuple[Frame, str]] = []
    conns = []
    for r, host in enumerate(spec.launch):
        pred = spec.launch[(r - 1) % n]
        conns.append(
            TcpConn(
                ETHERNET,
                spec.address(host),
                spec.address(pred),
                51000 + 7 * r,
                LISTEN_PORT,
                isn_c=(r + 1) * 987_654_321 % 2**32,
                isn_s=(r + 3) * 123_456_789 % 2**32,
            )
        )

    def deliver(frame: Frame, src: str, dst: str, t_send: int) -> int:
        t_recv = t_send + _serialize_ns(frame.wire_len, spec.link_bps) + spec.latency_ns
        caps[src].append(replace(frame, ts_ns=t_send))
        caps[dst].append(replace(frame, ts_ns=t_recv))
        sent.append((replace(frame, ts_ns=t_send), src))
        return t_recv

    t = spec.start_ns
    for r, conn in enumerate(conns):  # connections are set up once, before training
        host, pred = spec.launch[r], spec.launch[(r - 1) % n]
        syn, synack, ack = conn.handshake(0)
        t1 = deliver(syn, host, pred, t + r * 100_000)
        t2 = deliver(synack, pred, host, t1 + spec.ack_delay_ns)
        deliver(ack, host, pred, t2 + spec.ack_delay_ns)
    t += 10_000_000
    markers = []
    for it in range(spec.iterations):
        it_start = t
        t += spec.compute_ns
        for _step in range(2 * (n - 1)):
            step_end = t
            for r, conn in enumerate(conns):
                host, pred = spec.launch[r], spec.launch[(r - 1) % n]
                ts, left = t, chunk
                while left:
                    size = min(spec.segment_bytes, left)
                    left -= size
                    seg = conn.data(0, size, keep=32)
                    t_recv = deliver(seg, host, pred, ts)
                    t_ack = deliver(conn.ack(0, forward=False), pred, host, t_recv + spec.ack_delay_ns)
                    step_end = max(step_end, t_ack)
                    ts += _serialize_ns(seg.ip_bytes, spec.send_bps)
            t = step_end + spec.step_overhead_ns
        markers.append({"iteration": it, "start_ns": it_start, "end_ns": t})
    for frames in caps.values():
        frames.sort(key=lambda f: f.ts_ns)
    return caps, sent, markers


def example_files(spec: RingSpec = RingSpec()) -> dict[str, bytes]:
    """The example capture directory (run.json, per-host meta.json, eth0.pcap, markers.jsonl) and expected.json."""
    caps, sent, markers = simulate(spec)
    files: dict[str, bytes] = {}
    written: dict[str, list[Frame]] = {}
    for host in spec.launch:
        data, written[host] = pcap_bytes(caps[host], linktype=LINKTYPE_ETHERNET, nano=True, snaplen=spec.snaplen)
        files[f"{host}/eth0.pcap"] = data
    first = min(f.ts_ns for fs in written.values() for f in fs)
    last = max(f.ts_ns for fs in written.values() for f in fs)
    for rank, host in enumerate(spec.launch):
        meta = {
            "schema": 1,
            "status": "complete",
            "host": host,
            "interface": "eth0",
            "addresses": [spec.address(host)],
            "mtu": 1500,
            "link_speed_bps": spec.link_bps,
            "link_speed_source": "tc",
            "snaplen": spec.snaplen,
            "filter": None,
            "tcpdump_command": [
                "/usr/bin/tcpdump",
                "-i",
                "eth0",
                "-n",
                "-U",
                "--immediate-mode",
                "-s",
                str(spec.snaplen),
                "--time-stamp-precision=nano",
                "-w",
                f"/tmp/ringscope-example/{host}/eth0.pcap",
            ],
            "start_ns": first - 5_000_000,
            "end_ns": last + 5_000_000,
            "stop_reason": "stdin closed",
            "counters": {
                "captured": len(written[host]),
                "received_by_filter": len(written[host]),
                "dropped_by_kernel": 0,
                "dropped_by_interface": 0,
            },
            "tcpdump_exit_code": 0,
            "files": ["eth0.pcap"],
        }
        files[f"{host}/meta.json"] = _json(meta)
        files[f"{host}/markers.jsonl"] = "".join(
            json.dumps({"rank": rank, "local_rank": 0, **m, "gradient_bytes": spec.gradient_bytes}) + "\n"
            for m in markers
        ).encode()
    run = {
        "schema": 1,
        "run_id": "example",
        "status": "complete",
        "command": [
            "torchrun",
            "--nnodes=4",
            "--nproc-per-node=1",
            "train.py",
            "--gradient-bytes",
            str(spec.gradient_bytes),
        ],
        "hosts": list(spec.launch),
        "start_ns": first - 10_000_000,
        "end_ns": last + 10_000_000,
        "exit_code": 0,
        "generated_by": "fixtures/generate.py: a synthetic ring all-reduce with known traffic, not a real run",
    }
    files["run.json"] = _json(run)
    files["expected.json"] = _json(expected(spec, sent, markers, written))
    return files


def expected(
    spec: RingSpec, sent: list[tuple[Frame, str]], markers: list[dict], written: dict[str, list[Frame]]
) -> dict:
    """Ground truth from the simulation's own bookkeeping: ring, bytes per host, flows, iterations."""
    n = len(spec.launch)
    by_sender: dict[str, list[Frame]] = {h: [] for h in spec.launch}
    for f, host in sent:
        by_sender[host].append(f)
    per_iter = 2 * (n - 1) * spec.gradient_bytes // n
    hosts = {}
    for rank, host in enumerate(spec.launch):
        tx = truth(by_sender[host])
        addr = spec.address(host)
        rx_frames = [f for f, h in sent if f.flow is not None and f.flow.dst == addr]
        rx = truth(rx_frames)
        hosts[host] = {
            "rank": rank,
            "address": addr,
            "sends_to": spec.launch[(rank - 1) % n],
            "receives_from": spec.launch[(rank + 1) % n],
            "tx_payload_bytes": sum(f["payload_bytes"] for f in tx["flows"]),
            "rx_payload_bytes": sum(f["payload_bytes"] for f in rx["flows"]),
            "tx_ip_bytes": sum(f["ip_bytes"] for f in tx["flows"]),
            "rx_ip_bytes": sum(f["ip_bytes"] for f in rx["flows"]),
            "tx_packets": sum(f["packets"] for f in tx["flows"]),
            "rx_packets": sum(f["packets"] for f in rx["flows"]),
            "records": len(written[host]),
        }
    # a flow's timestamps as its sender's capture holds them (the view the analyzer reports)
    flows = truth(
        f for host in spec.launch for f in written[host] if f.flow is not None and f.flow.src == spec.address(host)
    )["flows"]
    return {
        "description": "Ground truth of the synthetic example run: ring all-reduce of S bytes on 4 hosts.",
        "launch_order": list(spec.launch),
        "ring_data_order": [spec.launch[(-k) % n] for k in range(n)],
        "ring_edges": [{"src": spec.launch[r], "dst": spec.launch[(r - 1) % n]} for r in range(n)],
        "gradient_bytes": spec.gradient_bytes,
        "iterations": spec.iterations,
        "tx_payload_bytes_per_iteration": per_iter,
        "link_speed_bps": spec.link_bps,
        "mtu": 1500,
        "segment_payload_bytes": spec.segment_bytes,
        "compute_gap_ns": spec.compute_ns,
        "send_rate_bps": spec.send_bps,
        "iteration_windows": markers,
        "hosts": hosts,
        "flows": flows,
    }


def _json(obj: dict) -> bytes:
    return (json.dumps(obj, indent=1) + "\n").encode()


def write_example(root: Path, spec: RingSpec = RingSpec()) -> Path:
    """Write the example capture directory under root; returns root."""
    for rel, data in example_files(spec).items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root

"""A real multi-host capture made on loopback: N "hosts" 127.0.0.2.., one tcpdump each, a TCP ring among them.

Each host sends `iterations` chunks of `chunk_bytes` to its successor in the launch order (a ring all-reduce's
traffic shape: everyone sends at once, then a compute gap). The ground truth the tests check is known before
the capture: every host sends iterations × chunk_bytes of TCP payload. Needs root and tcpdump.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

BASE_PORT = 47310


def host_address(i: int) -> str:
    return f"127.0.0.{i + 2}"


def make_ring_capture(
    out: Path,
    names: list[str],
    *,
    iterations: int = 8,
    chunk_bytes: int = 1_000_000,
    gap_s: float = 0.08,
    link_speed_bps: float = 10e9,
    port: int = BASE_PORT,
) -> dict:
    """Write a capture directory (run.json, <host>/meta.json, <host>/lo.pcap) and return its ground truth."""
    out.mkdir(parents=True, exist_ok=True)
    n = len(names)
    dumps = []
    for i, name in enumerate(names):
        d = out / f"host{i}"
        d.mkdir()
        addr = host_address(i)
        flt = f"tcp and host {addr} and portrange {port}-{port + n - 1}"
        proc = subprocess.Popen(
            ["tcpdump", "-i", "lo", "-s", "128", "-U", "-w", str(d / "lo.pcap"), flt],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        dumps.append((proc, d, name, addr, flt))
    _wait_listening(dumps)
    start_ns = time.time_ns()
    _ring(n, iterations, chunk_bytes, gap_s, port)
    end_ns = time.time_ns()
    time.sleep(0.3)
    for proc, d, name, addr, flt in dumps:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        counters = _counters(err)
        meta = {
            "schema": 1,
            "host": name,
            "interface": "lo",
            "addresses": [addr],
            "link_speed_bps": link_speed_bps,
            "link_speed_source": "given",
            "mtu": 65536,
            "tcpdump_command": ["tcpdump", "-i", "lo", flt],
            "counters": counters,
        }
        (d / "meta.json").write_text(json.dumps(meta, indent=1))
    run = {
        "schema": 1,
        "run_id": "loopback-ring",
        "status": "complete",
        "command": ["python", "loopback_ring.py"],
        "hosts": names,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "exit_code": 0,
    }
    (out / "run.json").write_text(json.dumps(run, indent=1))
    return {
        "hosts": names,
        "sent_payload_bytes": iterations * chunk_bytes,
        "iterations": iterations,
        "link_speed_bps": link_speed_bps,
    }


def _wait_listening(dumps: list) -> None:
    """tcpdump says 'listening on' on stderr once it captures; read that line from each."""
    for proc, *_ in dumps:
        deadline = time.time() + 10
        line = ""
        while time.time() < deadline:
            line = proc.stderr.readline()
            if "listening on" in line or not line:
                break
        if "listening on" not in line:
            raise RuntimeError(f"tcpdump did not start: {line.strip()}")


def _counters(stderr: str) -> dict:
    out = {}
    for line in stderr.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit():
            if "received by filter" in line:
                out["received_by_filter"] = int(parts[0])
            elif "dropped by kernel" in line:
                out["dropped_by_kernel"] = int(parts[0])
            elif "dropped by interface" in line:
                out["dropped_by_interface"] = int(parts[0])
    out.setdefault("dropped_by_kernel", 0)
    out.setdefault("dropped_by_interface", 0)
    return out


def _ring(n: int, iterations: int, chunk: int, gap_s: float, port: int) -> None:
    listeners = []
    for i in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host_address(i), port + i))
        s.listen(1)
        listeners.append(s)
    senders = []
    for i in range(n):
        c = socket.socket()
        c.bind((host_address(i), 0))
        c.connect((host_address((i + 1) % n), port + (i + 1) % n))
        senders.append(c)
    receivers = [s.accept()[0] for s in listeners]
    payload = os.urandom(chunk)
    start = threading.Barrier(2 * n, action=lambda: time.sleep(gap_s))  # the compute gap before each exchange
    done = threading.Barrier(2 * n)

    def send(sock: socket.socket) -> None:
        for _ in range(iterations):
            start.wait()
            sock.sendall(payload)
            done.wait()

    def recv(sock: socket.socket) -> None:
        for _ in range(iterations):
            start.wait()
            left = chunk
            while left:
                left -= len(sock.recv(min(left, 1 << 20)))
            done.wait()

    threads = [threading.Thread(target=send, args=(s,)) for s in senders] + [
        threading.Thread(target=recv, args=(r,)) for r in receivers
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in senders + receivers + listeners:
        s.close()
    time.sleep(gap_s)

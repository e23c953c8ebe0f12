"""A ring of N ranks over plain TCP whose bytes on the wire are known exactly.

Rank r (on hosts[r]) listens on PORT+r, connects to rank r+1 and, in every step, sends exactly
--bytes payload bytes to it while receiving as many from rank r-1, like a ring all-reduce step.
Each iteration is --steps steps, followed by a --gap-ms pause, and recorded with a marker whose
`bytes_sent` is steps x bytes. Each connection carries iters x steps x bytes payload bytes, no more.

    RANK=0 python -m capture.workloads.socket_ring --hosts h1,h2,h3 --bytes 1000000 --iters 5
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time

from capture import markers


def recv_exactly(conn: socket.socket, view: memoryview) -> None:
    """Fill VIEW from CONN, or fail if the neighbour closes first."""
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("ring neighbour closed the connection early")
        got += n


def connect(host: str, port: int, timeout_s: float) -> socket.socket:
    """A connection to HOST:PORT, retried while the neighbour is not listening yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((host, port), timeout=timeout_s)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def run(
    rank: int, hosts: list[str], port: int, nbytes: int, steps: int, iters: int, gap_s: float, timeout_s: float = 60.0
) -> dict:
    """Run this rank's part of the ring; returns the bytes it sent and received."""
    world = len(hosts)
    listener = socket.create_server(("", port + rank), family=socket.AF_INET, reuse_port=False)
    listener.settimeout(timeout_s)
    right = connect(hosts[(rank + 1) % world], port + (rank + 1) % world, timeout_s)
    left, _ = listener.accept()
    listener.close()
    for conn in (left, right):
        conn.settimeout(timeout_s)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = bytes(nbytes)
    inbox = memoryview(bytearray(nbytes))
    sent = received = 0
    for i in range(iters):
        with markers.iteration(i, bytes_sent=steps * nbytes, workload="socket_ring"):
            for _ in range(steps):
                sender = threading.Thread(target=right.sendall, args=(payload,))
                sender.start()
                recv_exactly(left, inbox)
                sender.join()
                sent += nbytes
                received += nbytes
        if gap_s and i + 1 < iters:
            time.sleep(gap_s)
    right.shutdown(socket.SHUT_WR)
    if left.recv(1):  # wait for the left neighbour's FIN: every byte has arrived
        raise ConnectionError("unexpected bytes after the last step")
    left.close()
    right.close()
    return {"rank": rank, "sent_bytes": sent, "received_bytes": received}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", required=True, help="h1,h2,... : rank r runs on the r-th host")
    parser.add_argument("--rank", type=int, default=int(os.environ.get("RANK", "0")), help="default: $RANK")
    parser.add_argument("--port", type=int, default=29600, help="rank r listens on PORT+r")
    parser.add_argument("--bytes", type=int, default=1_000_000, help="payload bytes per step")
    parser.add_argument("--steps", type=int, default=1, help="steps per iteration")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--gap-ms", type=float, default=100.0, help="pause between iterations")
    args = parser.parse_args(argv)
    hosts = [h for h in args.hosts.split(",") if h]
    result = run(args.rank, hosts, args.port, args.bytes, args.steps, args.iters, args.gap_ms / 1000)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A ring all-reduce shaped on the wire the way NCCL's socket transport runs one: every ring edge over several
TCP connections.

Why the project writes it: NCCL needs GPUs, and without RDMA its socket transport opens, per peer,
NCCL_NSOCKS_PERTHREAD × NCCL_SOCKET_NTHREADS data sockets plus one control socket, and deals each ring step's
chunk over the data sockets in pieces of at least 64 KiB, round-robin; the edge finishes a step when its last
socket does, so one slow socket (its own path through the fabric, a NIC queue, a pacing) paces the whole ring.
This workload has that shape with the bytes known exactly: W ranks, S gradient bytes, per iteration a compute
phase (real arithmetic, no sleep) and then 2(W−1) ring steps (3(W−1) with --collective fsdp, as NCCL runs FSDP's
full shard), each sending S/W bytes to the right neighbour while receiving as many from the left, dealt over
--sockets connections in --piece-bytes pieces; the control socket carries an 8-byte header per step. --slow-socket
J paces data socket J (0-based) of --slow-rank's right edge (every rank's with -1) to --slow-rate bit/s with
SO_MAX_PACING_RATE.

Each rank records its steps with capture.markers (gradient_bytes = S, bytes_sent = its ring payload), so a test
knows what the analyzer should find. Ranks run in the order of --hosts (rank r on the r-th):

    RANK=0 python -m capture.workloads.socket_allreduce --hosts h1,h2,h3,h4 --gradient-bytes 8000000 --sockets 4
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from capture import markers
from capture.workloads.socket_ring import connect, recv_exactly

SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux: bytes per second, TCP's own pacing
HEADER = 8  # the control socket's bytes per step (NCCL's control socket carries small messages)
MIN_PIECE = 64 * 1024  # NCCL's socket transport never deals pieces smaller than this
# ring passes of W-1 steps per iteration: an all-reduce is a reduce-scatter and an all-gather; NCCL's FSDP full
# shard all-gathers the parameters forward and again backward and reduce-scatters the gradients, all one way round
RING_PASSES = {"allreduce": 2, "fsdp": 3}


def deal(step_bytes: int, sockets: int, piece: int) -> list[int]:
    """The bytes each data socket carries in one step: pieces of PIECE bytes (the last one shorter) dealt
    round-robin, the first piece on socket 0."""
    share = [0] * sockets
    for i, start in enumerate(range(0, step_bytes, piece)):
        share[i % sockets] += min(piece, step_bytes - start)
    return share


def _compute(seconds: float) -> None:
    """Arithmetic until SECONDS have passed: forward and backward, keeping a core busy as training does."""
    end = time.perf_counter() + seconds
    x = 1.0
    while time.perf_counter() < end:
        for _ in range(2000):
            x = x * 1.0000001 + 1e-9


def run(
    rank: int,
    hosts: list[str],
    port: int,
    gradient_bytes: int,
    sockets: int,
    piece: int,
    iters: int,
    compute_s: float,
    slow: tuple[int, int, float] | None = None,
    timeout_s: float = 60.0,
    collective: str = "allreduce",
) -> dict:
    """This rank's part of the ring; returns the payload bytes it sent per socket of its right edge.
    SLOW: (rank or -1, data socket, bit/s)."""
    world = len(hosts)
    listener = socket.create_server(("", port + rank), family=socket.AF_INET, backlog=sockets + 1)
    listener.settimeout(timeout_s)
    right_host, right_port = hosts[(rank + 1) % world], port + (rank + 1) % world
    # connected one after another, so the neighbour accepts them in this order: control first, then data 0..k-1
    right = [connect(right_host, right_port, timeout_s) for _ in range(sockets + 1)]
    left = [listener.accept()[0] for _ in range(sockets + 1)]
    listener.close()
    for conn in right + left:
        conn.settimeout(timeout_s)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if slow is not None and slow[0] in (-1, rank):
        right[1 + slow[1]].setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(slow[2] / 8))
    step_bytes = gradient_bytes // world
    share = deal(step_bytes, sockets, piece)
    out = [bytes(n) for n in share]
    inbox = [memoryview(bytearray(max(n, HEADER))) for n in share]
    sent = [0] * (sockets + 1)
    steps = RING_PASSES[collective] * (world - 1)
    ports = [conn.getsockname()[1] for conn in right]  # control first: which connection is which, for a test
    with ThreadPoolExecutor(max_workers=2 * (sockets + 1)) as pool:
        for i in range(iters):
            sent_now = steps * (step_bytes + HEADER)
            with markers.iteration(
                i, gradient_bytes=gradient_bytes, bytes_sent=sent_now, right_ports=ports, collective=collective
            ):
                _compute(compute_s)
                for _ in range(steps):
                    jobs = [pool.submit(right[0].sendall, bytes(HEADER))]
                    jobs.append(pool.submit(recv_exactly, left[0], inbox[0][:HEADER]))
                    for j in range(sockets):
                        jobs.append(pool.submit(right[1 + j].sendall, out[j]))
                        jobs.append(pool.submit(recv_exactly, left[1 + j], inbox[j][: share[j]]))
                    for job in jobs:
                        job.result()
                    sent[0] += HEADER
                    for j in range(sockets):
                        sent[1 + j] += share[j]
    for conn in right:
        conn.shutdown(socket.SHUT_WR)
    for conn in left:
        if conn.recv(1):  # the left neighbour's FIN: every byte has arrived
            raise ConnectionError("unexpected bytes after the last step")
    for conn in right + left:
        conn.close()
    return {"rank": rank, "sent_bytes_per_socket": sent}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", required=True, help="h1,h2,... : rank r runs on the r-th host")
    parser.add_argument("--rank", type=int, default=int(os.environ.get("RANK", "0")), help="default: $RANK")
    parser.add_argument("--port", type=int, default=29700, help="rank r listens on PORT+r")
    parser.add_argument("--gradient-bytes", type=int, default=8_000_000, help="S: bytes all-reduced per iteration")
    parser.add_argument("--sockets", type=int, default=4, help="data sockets per ring edge (plus one control)")
    parser.add_argument("--piece-bytes", type=int, default=128 * 1024, help=f"at least {MIN_PIECE}")
    parser.add_argument("--iters", type=int, default=12)
    parser.add_argument("--compute-ms", type=float, default=100.0, help="arithmetic before each all-reduce")
    parser.add_argument("--slow-socket", type=int, default=None, help="data socket (0-based) to pace")
    parser.add_argument("--slow-rank", type=int, default=-1, help="whose right edge's socket is paced; -1: all")
    parser.add_argument("--slow-rate", type=float, default=50e6, help="bit/s of the paced socket")
    parser.add_argument(
        "--collective",
        choices=sorted(RING_PASSES),
        default="allreduce",
        help="allreduce: 2(W-1) ring steps per iteration (DDP); fsdp: 3(W-1), NCCL's FSDP full shard (two "
        "all-gathers of the parameters and the gradients' reduce-scatter, all one way round)",
    )
    args = parser.parse_args(argv)
    if args.piece_bytes < MIN_PIECE or args.sockets < 1:
        parser.error(f"--piece-bytes must be at least {MIN_PIECE} and --sockets at least 1")
    hosts = [h for h in args.hosts.split(",") if h]
    slow = None if args.slow_socket is None else (args.slow_rank, args.slow_socket, args.slow_rate)
    result = run(
        args.rank,
        hosts,
        args.port,
        args.gradient_bytes,
        args.sockets,
        args.piece_bytes,
        args.iters,
        args.compute_ms / 1000,
        slow,
        collective=args.collective,
    )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

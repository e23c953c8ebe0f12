"""NCCL RAS keep-alive traffic as a capture holds it (NCCL src/ras, read for issue 47): a TCP connection between
each pair of neighbouring hosts in the ring of processes, the lower address connecting; while idle each end sends
one 60-byte keep-alive a second (a 4-byte length and a 56-byte body), which the other acknowledges. A process
that hangs sends nothing; its peers close the connection after 20 s and connect again once it answers.

The ground truth is the schedule itself: which host fell silent, from when, for how long."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.support.pcapgen import ETHERNET, Frame, TcpConn

KEEPALIVE = 60
ACK_AFTER_NS = 80_000
RECONNECT_AFTER_S = 20  # RAS_KEEPALIVE_TIMEOUT_ERROR: the peers drop the connection and dial it again


@dataclass(frozen=True)
class Hang:
    """Host index HOST sends nothing from FROM_S for SECONDS (seconds since the traffic starts)."""

    host: int
    from_s: float
    seconds: float


def keepalives(
    addresses: list[str], start_ns: int, seconds: int, hangs: tuple[Hang, ...] = (), seed: int = 3
) -> dict[int, list[Frame]]:
    """Each host's captured frames (by host index) of the RAS ring over ADDRESSES for SECONDS."""
    rng = random.Random(seed)
    n = len(addresses)
    out: dict[int, list[Frame]] = {h: [] for h in range(n)}
    port = 40000

    def silent(h: int, t_s: float) -> bool:
        return any(x.host == h and x.from_s <= t_s < x.from_s + x.seconds for x in hangs)

    for i in range(n if n > 2 else 1):
        a, b = sorted((i, (i + 1) % n))
        conn, opened = None, None
        for second in range(seconds):
            t_s = second + rng.uniform(0.0, 0.05)
            hung = silent(a, t_s) or silent(b, t_s)
            long_hang = any(x.host in (a, b) and x.seconds >= RECONNECT_AFTER_S and x.from_s <= t_s for x in hangs)
            if conn is not None and hung and long_hang and t_s - opened > RECONNECT_AFTER_S:
                conn = None  # dropped by the live side; dialled again once both answer
            if conn is None:
                if hung:
                    continue
                port += 1
                conn, opened = TcpConn(ETHERNET, addresses[a], addresses[b], port, 45000 + a), t_s
                for f in conn.handshake(start_ns + int(t_s * 1e9)):
                    out[a].append(f)
                    out[b].append(f)
            for forward, sender in ((True, a), (False, b)):
                if silent(sender, t_s):
                    continue
                ts = start_ns + int((t_s + (0 if forward else 0.0004)) * 1e9)  # the answer a little later
                frames = [conn.data(ts, KEEPALIVE, forward=forward)]
                if not silent(b if forward else a, t_s):
                    frames.append(conn.ack(ts + ACK_AFTER_NS, forward=not forward))
                for f in frames:
                    out[a].append(f)
                    out[b].append(f)
    return out

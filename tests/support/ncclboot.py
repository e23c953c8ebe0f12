"""NCCL's bootstrap as a capture on the bootstrap interface holds it (NCCL src/bootstrap.cc, read for issue 47).

At communicator init every rank connects to the root (rank 0's process, at the address and port in the
ncclUniqueId) and sends its info: a socket magic and type, then its rank, nranks and two listen addresses; once
all have, the root connects back to each rank's root-listen socket with the address of the rank's ring successor.
Each rank then connects to its successor and the ranks all-gather their addresses round that ring (nranks - 1
steps of one rank's 28-byte address each), then their peer info (about 128 bytes a rank) the same way. Same-host
exchanges go over loopback and are not on the NIC's capture: a host's ranks show only where they meet the root
(on another host) and where the ring crosses hosts.

The ground truth is the placement itself: how many ranks each host runs.
"""

from __future__ import annotations

from tests.support.pcapgen import ETHERNET, Frame, TcpConn

ROOT_PORT = 51_000
MAGIC_AND_TYPE = 12  # NCCL_SOCKET_MAGIC (8 bytes) and the socket type (4) on every connect
EXT_INFO = 64  # rank, nranks and two ncclSocketAddress
ADDRESS = 28  # one ncclSocketAddress
PEER_INFO = 128  # about a struct ncclPeerInfo
STEP_NS = 200_000


def bootstrap(addresses: list[str], ranks_per_host: list[int], start_ns: int) -> dict[int, list[Frame]]:
    """Each host's captured frames (by host index) of one communicator's bootstrap: RANKS_PER_HOST[h] ranks on
    host h at ADDRESSES[h], placed host by host (rank 0, the root, first on host 0)."""
    place = [h for h, n in enumerate(ranks_per_host) for _ in range(n)]
    world = len(place)
    out: dict[int, list[Frame]] = {h: [] for h in range(len(addresses))}
    t = start_ns

    def carry(conn: TcpConn, a: int, b: int, sizes: list[tuple[int, bool]]) -> None:
        nonlocal t
        frames = conn.handshake(t)
        for n, forward in sizes:
            t += STEP_NS // 4
            frames += [conn.data(t, n, forward=forward), conn.ack(t + 40_000, forward=not forward)]
        for f in frames:
            out[a].append(f)
            out[b].append(f)
        t += STEP_NS

    for r in range(1, world):  # every rank to the root, its info; the root back, its successor's address
        if place[r] != place[0]:
            conn = TcpConn(ETHERNET, addresses[place[r]], addresses[place[0]], 40_000 + r, ROOT_PORT)
            carry(conn, place[r], place[0], [(MAGIC_AND_TYPE, True), (EXT_INFO, True)])
    for r in range(1, world):
        if place[r] != place[0]:
            conn = TcpConn(ETHERNET, addresses[place[0]], addresses[place[r]], 42_000 + r, 43_000 + r)
            carry(conn, place[0], place[r], [(MAGIC_AND_TYPE, True), (ADDRESS, True)])
    for r in range(world):  # the ring: each rank to its successor, two all-gathers round it
        nxt = (r + 1) % world
        if place[r] != place[nxt]:
            conn = TcpConn(ETHERNET, addresses[place[r]], addresses[place[nxt]], 44_000 + r, 45_000 + nxt)
            sizes = [(MAGIC_AND_TYPE, True)] + [(ADDRESS, True)] * (world - 1) + [(PEER_INFO, True)] * (world - 1)
            carry(conn, place[r], place[nxt], sizes)
    for frames in out.values():
        frames.sort(key=lambda f: f.ts_ns)
    return out


PROXY_PORT = 47_000  # rank r's proxy listens at PROXY_PORT + r (an ephemeral port in NCCL)
# a transport connection's set-up through the proxy (src/proxy.cc): init request and response, setup, connect
PROXY_MESSAGES = [(MAGIC_AND_TYPE, True), (24, True), (16, False), (40, True), (300, False), (300, True), (40, False)]


def proxies(addresses: list[str], ranks_per_host: list[int], start_ns: int) -> dict[int, list[Frame]]:
    """Each host's loopback frames (by host index) of its ranks' connections to their own NCCL proxies, as a
    capture on `lo` or `any` holds them (a NIC's does not): rank r's proxy listens at the host's bootstrap address,
    and the rank connects to it once and sets up its transports through it. Ranks placed host by host."""
    out: dict[int, list[Frame]] = {}
    t, rank = start_ns, 0
    for h, (address, n) in enumerate(zip(addresses, ranks_per_host)):
        out[h] = []
        for _ in range(n):
            conn = TcpConn(ETHERNET, address, address, 48_000 + rank, PROXY_PORT + rank)
            out[h] += conn.handshake(t)
            for size, forward in PROXY_MESSAGES:
                t += STEP_NS // 4
                out[h] += [conn.data(t, size, forward=forward), conn.ack(t + 10_000, forward=not forward)]
            rank += 1
            t += STEP_NS
    return out

"""NCCL's proxy connections: set apart with its bootstrap, and read for the ranks each host runs (issue 47).

Why: every NCCL rank runs a proxy thread that listens on the bootstrap interface's address, and a host's ranks
connect to their own proxy (and, across NVLink, to their host-mates') to set up each transport connection (NCCL
src/proxy.cc: ncclProxyConnect keeps a socket per local rank, at the address the ranks all-gathered). These never
leave the host: a capture on the NIC does not hold them, one on `lo` or `any` does, as TCP between one host's own
addresses, opened right after the bootstrap, a few control messages each way (init, setup, connect) and then
quiet. One listener per rank, so a host's proxy listeners count its ranks, the root's host too, whose ranks the
bootstrap cannot count (they reach the root over loopback).

A proxy connection: TCP whose both ends are one host's addresses, opened between the bootstrap's first connection
and PROXY_NS after its last, carrying at most PROXY_BYTES each way and something both ways, to a listener no other
host connects to (a rendezvous store on the same host is reached from the others too).
"""

from __future__ import annotations

import numpy as np

from analyze.collective.bootstrap import connections
from analyze.model.findings import Bootstrap
from analyze.model.result import Result
from analyze.tables.flows import connection_ends
from analyze.tables.hosts import address_hosts, flow_hosts

__all__ = ["add_proxies"]

PROXY_NS = 60_000_000_000  # transport set-up follows the bootstrap: proxies are connected within this of its end
PROXY_BYTES = 1 << 20  # init, setup and connect messages: a connection's info per channel, far under this


def add_proxies(result: Result, bootstrap: Bootstrap, boot_flows: np.ndarray) -> np.ndarray:
    """Set BOOTSTRAP's proxies (listeners per host) and proxy_connections where a capture holds them, and return
    their flow ids (both directions) to set apart; BOOT_FLOWS: the bootstrap's own, which date it."""
    none = np.zeros(0, np.int64)
    table = result.tables.flows if result.tables is not None else None
    if table is None or table.empty or not len(boot_flows):
        return none
    flows = flow_hosts(table, address_hosts(result.hosts))
    dated = flows[flows["flow_id"].isin(boot_flows)]
    first, last = int(dated["start_ns"].min()), int(dated["start_ns"].max())
    lo, hi = connection_ends(flows["src"], flows["sport"], flows["dst"], flows["dport"])
    flows = flows.assign(key=lo + "|" + hi)
    tcp = flows[flows["proto"] == "tcp"]
    conn = connections(tcp)
    from_elsewhere = set(conn.loc[conn["client_host"] != conn["server_host"], "server"])
    local = conn[
        (conn["client_host"] == conn["server_host"])
        & ~conn["server"].isin(from_elsewhere)
        & conn["start"].between(first, last + PROXY_NS)
        & (conn["sent"] > 0)
        & (conn["back"] > 0)
        & (conn[["sent", "back"]].max(axis=1) <= PROXY_BYTES)
    ]
    if local.empty:
        return none
    listeners = local.groupby("server_host")["server"].nunique()
    bootstrap.proxies = {str(h): int(n) for h, n in listeners.items()}
    bootstrap.proxy_connections = len(local)
    shown = ", ".join(f"{n} on {h}" for h, n in sorted(bootstrap.proxies.items()))
    bootstrap.notes.append(
        f"{len(local)} connection(s) to NCCL's proxies inside their hosts (listeners: {shown}; one per rank): set "
        "apart with it"
    )
    return tcp[np.isin(tcp["key"].to_numpy(object), list(local.index))]["flow_id"].to_numpy(np.int64)

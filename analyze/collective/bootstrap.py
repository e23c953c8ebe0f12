"""NCCL's bootstrap beside the data: told apart from the collective, and read for the ranks per host (issue 47).

Why: at communicator init NCCL's ranks meet over TCP on the bootstrap interface (src/bootstrap.cc). Every rank
connects to the root (rank 0's process, at the address in the ncclUniqueId) and sends its info, a few dozen bytes;
the root answers nothing there, and once all have come it connects back to each rank with the address of its ring
successor; the ranks then connect round a ring and all-gather their addresses and peer info over it. Where the data
moves over RDMA, these few kilobytes are the only TCP between the job's hosts: read as the job, they made a
"double binary tree" of 16 KB and set the RDMA ring's 400 MB aside as other traffic. Read as what they are, they
count what the data cannot: one connection to the root per rank on every other host.

A root is an endpoint that connections from other hosts reach, each carrying ROOT_INFO bytes one way and nothing
back, and whose host then opens as many connections to each of those hosts, each carrying CALLBACK bytes one way
and nothing back, within CALLBACK_NS. Set apart with them: the connections between those hosts opened within
RING_NS after the last call-back carrying at most RING_BYTES_PER_RANK a rank each way (the bootstrap ring's
all-gathers). The root's own host reaches it over loopback, which a NIC's capture does not hold: its ranks are
taken as the other hosts' where two or more agree, and said so.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from analyze.model.findings import Bootstrap
from analyze.model.result import Result
from analyze.tables.flows import connection_ends
from analyze.tables.hosts import address_hosts, flow_hosts

__all__ = ["connections", "find_bootstrap"]

ROOT_INFO = (32, 1024)  # bytes a rank sends the root: socket magic and type, rank, nranks, two addresses (76)
CALLBACK = (16, 512)  # bytes the root sends each rank back: magic and type, its successor's address (40)
CALLBACK_NS = 60_000_000_000  # the root calls back once the last rank has come: within this of the first
RING_NS = 10_000_000_000  # the ring opens right after the call-backs
RING_BYTES_PER_RANK = 65_536  # the bootstrap ring's all-gathers: an address and a peer info a rank, a few graphs


def find_bootstrap(result: Result) -> tuple[Optional[Bootstrap], np.ndarray]:
    """The bootstrap finding (None where no root shows) and the flow ids of its connections, both directions, so
    the collective leaves them out."""
    none = np.zeros(0, np.int64)
    table = result.tables.flows if result.tables is not None else None
    if table is None or table.empty:
        return None, none
    flows = flow_hosts(table, address_hosts(result.hosts))
    flows = flows[(flows["proto"] == "tcp") & (flows["src_host"] != flows["dst_host"])]
    if flows.empty:
        return None, none
    lo, hi = connection_ends(flows["src"], flows["sport"], flows["dst"], flows["dport"])
    flows = flows.assign(key=lo + "|" + hi)
    conn = connections(flows)
    one_way = conn["back"] == 0
    info = conn[one_way & conn["sent"].between(*ROOT_INFO)]
    if info.empty:
        return None, none
    root = info.groupby("server")["client_host"].size().idxmax()  # the endpoint most such connections reach
    reached = info[info["server"] == root]
    root_host = reached["server_host"].iloc[0]
    first, last = int(reached["start"].min()), int(reached["start"].max())
    calls = conn[
        one_way
        & conn["sent"].between(*CALLBACK)
        & (conn["client_host"] == root_host)
        & (conn["start"] > last)
        & (conn["start"] <= first + CALLBACK_NS)
    ]
    per_host = reached.groupby("client_host").size()
    if calls.groupby("server_host").size().reindex(per_host.index).fillna(0).astype(int).to_dict() != (
        per_host.to_dict()
    ):
        return None, none  # no call-back per rank: a one-way upload server, not NCCL's root
    hosts = {root_host, *per_host.index}
    ranks = {str(h): int(n) for h, n in per_host.items()}
    others = set(ranks.values())
    world = sum(ranks.values()) + (next(iter(others)) if len(ranks) >= 2 and len(others) == 1 else 1)
    ring_end = int(calls["start"].max()) + RING_NS
    ring = conn[
        conn["client_host"].isin(hosts)
        & conn["server_host"].isin(hosts)
        & (conn["start"] > last)
        & (conn["start"] <= ring_end)
        & (conn[["sent", "back"]].max(axis=1) <= RING_BYTES_PER_RANK * world)
    ].drop(calls.index, errors="ignore")  # the call-backs opened in that window too: counted once, as call-backs
    keys = set(reached.index) | set(calls.index) | set(ring.index)
    chosen = flows[np.isin(flows["key"].to_numpy(object), list(keys))]
    found = Bootstrap(
        root=f"{root_host}:{str(root).rsplit(':', 1)[1]}",
        root_host=str(root_host),
        ranks_per_host=ranks,
        root_host_ranks=world - sum(ranks.values()) if len(ranks) >= 2 and len(others) == 1 else None,
        connections=len(keys),
        notes=[
            f"{len(reached)} ranks' connections to its root {root_host}:{str(root).rsplit(':', 1)[1]}, as many "
            f"call-backs, {len(ring)} ring connection(s): set apart from the collective"
        ],
    )
    return found, chosen["flow_id"].to_numpy(np.int64)


def connections(flows: pd.DataFrame) -> pd.DataFrame:
    """Per TCP connection of FLOWS (by their `key`, its two ends as text): the client (the end whose direction began
    first) and its host, the server end and its host, the bytes each way, its first packet."""
    flows = flows.assign(end=flows["src"].astype(str) + ":" + flows["sport"].astype(str))
    first = flows.sort_values("start_ns", kind="stable").drop_duplicates("key").set_index("key")
    sent = flows.groupby("key")["payload_bytes"].sum()
    mine = flows.set_index("key")["end"].eq(first["end"].reindex(flows["key"]).to_numpy())
    out = pd.DataFrame(
        {
            "client_host": first["src_host"],
            "server": first["dst"].astype(str) + ":" + first["dport"].astype(str),
            "server_host": first["dst_host"],
            "start": first["start_ns"],
        }
    )
    forward = flows.set_index("key")["payload_bytes"].where(mine, 0).groupby(level=0).sum()
    out["sent"] = forward.reindex(out.index).fillna(0).astype(np.int64)
    out["back"] = (sent.reindex(out.index) - out["sent"]).astype(np.int64)
    return out

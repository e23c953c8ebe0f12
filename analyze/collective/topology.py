"""Recover the collective's communication graph between hosts and name its shape.

Collective libraries open many sockets per host pair (NCCL: 2 threads x 8 sockets by default; gloo and
Horovod several), so flows are first summed per directed host pair; only pairs that carry a real share of
the bytes ("heavy" edges) take part in the shape, because every job also has small control connections
(rendezvous stores, full-mesh handshakes, ACK streams). Works on the flow table alone, so it is cheap at
64+ hosts, and on partial captures: a peer that was not captured appears under its address and its edges
are inferred from the captured side.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Optional, Sequence

import pandas as pd

from analyze.collective.halving import hypercube
from analyze.model.findings import Topology
from analyze.model.jsonform import from_plain
from analyze.tables.hosts import flow_hosts

RING_KINDS = ("ring", "bidirectional_ring")  # the shapes whose order is a cycle
# a job read as data-parallel groups joined by pipeline links (analyze.collective.groups), not one collective
PIPELINE_GROUPS = "pipeline_groups"
UNSEEN_EDGE = 0.9  # a ring closed over an edge between two uncaptured peers: its confidence times this
HEAVY_FRACTION = 0.1  # an edge is heavy at >= 10% of the reference edge; ACK streams are ~0.1-2%
MIN_COLLECTIVE_BYTES = 1e6  # below this much traffic a "shape" is as likely a rendezvous store as a collective
EDGE_COLUMNS = ["src", "dst", "bytes", "payload_bytes", "flows", "start_ns", "end_ns", "inferred"]


def _group_address(address: str) -> bool:
    """Multicast or limited broadcast: link-level announcements (IPv6 neighbour discovery, MLD), never a peer."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_multicast or address == "255.255.255.255"


def host_edges(flows: pd.DataFrame, addr_host: dict[str, str]) -> pd.DataFrame:
    """Sum every connection per directed host pair (one row per pair, heaviest first).

    Flows with neither end on a captured host, flows inside one host and flows to multicast/broadcast
    groups (every fresh interface sends some; counted as endpoints they would lower the heavy-edge
    reference) are left out; `inferred` marks pairs with an uncaptured end (seen from one side only).
    """
    if flows.empty:
        return pd.DataFrame(columns=EDGE_COLUMNS)
    groups = {d for d in flows["dst"].unique() if _group_address(str(d))}
    f = flow_hosts(flows[~flows["dst"].isin(groups)] if groups else flows, addr_host)
    captured = set(addr_host.values())
    f = f[(f["src_host"] != f["dst_host"]) & (f["src_host"].isin(captured) | f["dst_host"].isin(captured))]
    g = f.groupby(["src_host", "dst_host"], sort=False).agg(
        bytes=("bytes", "sum"),
        payload_bytes=("payload_bytes", "sum"),
        flows=("flow_id", "size"),
        start_ns=("start_ns", "min"),
        end_ns=("end_ns", "max"),
        inferred=("inferred", "any"),
    )
    g = g.reset_index().rename(columns={"src_host": "src", "dst_host": "dst"})
    return g.sort_values("bytes", ascending=False, kind="stable").reset_index(drop=True)[EDGE_COLUMNS]


def heavy_edges(edges: pd.DataFrame) -> pd.DataFrame:
    """Edges carrying at least HEAVY_FRACTION of a reference edge.

    The reference is the (n-1)-th heaviest edge for n endpoints: any connected collective keeps at least
    n-1 pairs busy, so one outsized transfer (a checkpoint copy) cannot hide the collective's edges.
    """
    if edges.empty:
        return edges
    n = len(set(edges["src"]) | set(edges["dst"]))
    ref = float(edges["bytes"].iloc[min(max(n - 1, 1), len(edges)) - 1])
    return edges[edges["bytes"] >= HEAVY_FRACTION * ref].reset_index(drop=True)


def nccl_btree(nranks: int, rank: int) -> tuple[int, int, int]:
    """NCCL's binary tree (trees.cc ncclGetBtree): (parent, child0, child1), -1 for none."""
    bit = 1
    while bit < nranks and not (bit & rank):
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1) if nranks > 1 else -1
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    lowbit = bit >> 1
    down0 = -1 if lowbit == 0 else rank - lowbit
    down1 = -1 if lowbit == 0 else rank + lowbit
    while down1 >= nranks:
        down1 = -1 if lowbit == 0 else rank + lowbit
        lowbit >>= 1
    return up, down0, down1


def nccl_dtree_pairs(nranks: int) -> set[frozenset[int]]:
    """Undirected rank pairs of NCCL's double binary tree (second tree mirrored, or shifted when odd)."""
    pairs: set[frozenset[int]] = set()
    for r in range(nranks):
        for t in (0, 1):
            if t == 0:
                up, d0, d1 = nccl_btree(nranks, r)
                conv = [up, d0, d1]
            elif nranks % 2:
                up, d0, d1 = nccl_btree(nranks, (r - 1 + nranks) % nranks)
                conv = [-1 if x == -1 else (x + 1) % nranks for x in (up, d0, d1)]
            else:
                up, d0, d1 = nccl_btree(nranks, nranks - 1 - r)
                conv = [-1 if x == -1 else nranks - 1 - x for x in (up, d0, d1)]
            pairs.update(frozenset((r, x)) for x in conv if x not in (-1, r))
    return pairs


def _cycle(start: str, succ: dict[str, str]) -> list[str]:
    """Follow successors from start; the visited list (stops on the first repeat)."""
    out, node = [], start
    while node not in out and node in succ:
        out.append(node)
        node = succ[node]
    return out


def align_launch_order(
    launch: Optional[Sequence[str]], nodes: set[str], addr_host: dict[str, str], notes: list[str]
) -> list[str]:
    """Launch-order names as graph node names: host names or addresses; one uncaptured host may be paired
    with the one uncaptured address in the graph (said in notes)."""
    if not launch:
        return []
    names = [addr_host.get(x, x) for x in launch]
    missing = [x for x in names if x not in nodes]
    spare = sorted(nodes - set(names) - set(addr_host.values()))
    if len(missing) == 1 and len(spare) == 1:
        notes.append(
            f"launch-order host {missing[0]} was not captured; taken to be address {spare[0]}, "
            f"the one uncaptured peer in the graph"
        )
        names = [spare[0] if x == missing[0] else x for x in names]
    return names


def _closing_edge(deg_out: pd.Series, deg_in: pd.Series, uncaptured: set[str]) -> Optional[tuple[str, str]]:
    """The one edge a ring's heavy edges lack where it joins two uncaptured peers (no capture holds it): every host
    sends to one and hears from one, but for an uncaptured host that sends to none and another that hears from
    none. None where the edges are not such a path."""
    if len(deg_out) < 3 or (deg_out > 1).any() or (deg_in > 1).any():
        return None
    tail, head = list(deg_out.index[deg_out == 0]), list(deg_in.index[deg_in == 0])
    if len(tail) == 1 and len(head) == 1 and tail[0] != head[0] and {tail[0], head[0]} <= uncaptured:
        return tail[0], head[0]
    return None


def _ring_direction(order: list[str], launch: list[str]) -> Optional[str]:
    """'with_launch_order' (rank r sends to r+1), 'against_launch_order' (r to r-1) or None (no match)."""
    fit = _launch_fit(order, launch)
    return fit[0] if fit is not None else None


def _launch_fit(order: list[str], launch: list[str]) -> Optional[tuple[str, dict[str, str]]]:
    """How the ring ORDER follows the LAUNCH order, and which launched host each uncaptured peer is (None where it
    does not follow it). Hosts of the launch order that were not captured match the ring's uncaptured peers, as
    many as there are of each: a ring with 2 of 8 hosts uncaptured still follows its launch order where the 6
    captured ones sit in it so. Only the rotations that put a possible host first are tried: linear in hosts."""
    missing = [x for x in launch if x not in order]
    spare = {x for x in order if x not in launch}
    lo = [x for x in launch if x in order] if len(missing) != len(spare) else list(launch)
    if not order or len(lo) != len(order) or len(set(lo)) != len(lo):
        return None
    wild = set(missing) if spare else set()
    starts = [lo.index(order[0])] if order[0] in lo else [i for i, x in enumerate(lo) if x in wild]
    for k in starts:
        rot = lo[k:] + lo[:k]
        for direction, want in (("with_launch_order", rot), ("against_launch_order", [rot[0]] + rot[:0:-1])):
            pairs = list(zip(order, want))
            if all(a == b or (a in spare and b in wild) for a, b in pairs):
                return direction, {a: b for a, b in pairs if a != b}
    return None


def classify(
    edges: pd.DataFrame, hosts: Sequence[str], addr_host: dict[str, str], launch_order: Optional[Sequence[str]] = None
) -> Topology:
    """Name the shape of the heavy-edge graph: the result's topology.

    `hosts` are the captured hosts in their given order (run.json order when there is one); the ring is
    reported as a cycle in the direction the data flows, starting at the first launch-order host.
    """
    notes: list[str] = []
    total = float(edges["bytes"].sum()) if len(edges) else 0.0
    heavy = heavy_edges(edges)
    nodes = set(heavy["src"]) | set(heavy["dst"]) if len(heavy) else set()
    launch = align_launch_order(launch_order, nodes, addr_host, notes)
    out: dict[str, Any] = {
        "kind": "unknown",
        "order": [],
        "direction": None,
        "edges": [],
        "launch_order": list(launch_order or []),
        "matches_launch_order": None,
        "confidence": 0.0,
        "notes": notes,
    }
    if len(nodes) < 2:
        notes.append("fewer than two hosts exchange a significant share of the bytes")
        return from_plain(Topology, out)
    uncaptured = sorted(nodes - set(hosts))
    if uncaptured:
        notes.append(
            f"{len(uncaptured)} peer(s) not captured ({', '.join(uncaptured[:5])}"
            f"{', ...' if len(uncaptured) > 5 else ''}); their edges are inferred from the captured side"
        )
    light = total - float(heavy["bytes"].sum())
    if total and light / total > 0.01:
        notes.append(
            f"{light / total:.1%} of inter-host bytes are on light edges (control traffic, ACKs) "
            f"and not part of the shape"
        )
    pair = {(s, d): b for s, d, b in zip(heavy["src"], heavy["dst"], heavy["bytes"])}
    und: dict[frozenset, float] = {}
    for (s, d), b in pair.items():
        und[frozenset((s, d))] = und.get(frozenset((s, d)), 0.0) + b
    deg_out = heavy.groupby("src").size().reindex(sorted(nodes), fill_value=0)
    deg_in = heavy.groupby("dst").size().reindex(sorted(nodes), fill_value=0)
    udeg = pd.Series([x for p in und for x in p]).value_counts().reindex(sorted(nodes), fill_value=0)
    n = len(nodes)
    start = next((x for x in launch if x in nodes), None) or next((h for h in hosts if h in nodes), sorted(nodes)[0])
    coverage = float(heavy["bytes"].sum()) / total if total else 0.0

    kind, order, used, alike = "unknown", [], heavy, 1.0
    closing = _closing_edge(deg_out, deg_in, set(uncaptured))
    if ((deg_out == 1).all() and (deg_in == 1).all()) or closing is not None:
        succ = dict(zip(heavy["src"], heavy["dst"]))
        if closing is not None:
            succ[closing[0]] = closing[1]
        cyc = _cycle(start, succ)
        if len(cyc) == n:
            kind, order = "ring", cyc
            if closing is not None:
                coverage *= UNSEEN_EDGE
                notes.append(
                    f"the edge {closing[0]} -> {closing[1]} is between two uncaptured peers, so no capture saw it: "
                    "the ring is closed there by inference"
                )
    if (
        kind == "unknown"
        and n >= 3
        and (udeg == 2).all()
        and all((a, b) in pair and (b, a) in pair for a, b in (tuple(p) for p in und))
    ):
        nbr: dict[str, list[str]] = {}
        for a, b in (tuple(p) for p in und):
            nbr.setdefault(a, []).append(b)
            nbr.setdefault(b, []).append(a)
        walk = [start, sorted(nbr[start])[0]]
        while len(walk) < n + 1:
            nxt = [x for x in nbr[walk[-1]] if x != walk[-2]][0]
            walk.append(nxt)
        if walk[-1] == start and len(set(walk[:-1])) == n:
            kind, order = "bidirectional_ring", walk[:-1]
            if launch and _ring_direction(order, launch) == "against_launch_order":
                order = [order[0]] + order[:0:-1]
    if kind == "unknown" and n >= 3:
        center = udeg.idxmax()
        if udeg[center] == n - 1 and (udeg.drop(center) == 1).all():
            kind, order = "star", [center] + sorted(nodes - {center})
            notes.append(f"{center} exchanges with every other host and they only with it: a parameter server")
    if kind == "unknown" and n >= 4 and len(und) >= 0.9 * n * (n - 1) / 2:
        kind = "mesh"
    cube = hypercube(pair, start) if kind == "unknown" else None
    if cube is not None:  # its classes differ by design: evenness is within each step's pairs
        kind, order, alike = "halving_doubling", cube["order"], cube["alike"]
        coverage *= cube["confidence"]
        notes.append(
            f"recursive halving over {n} hosts: {len(cube['classes'])} steps, each pairing every host once, each "
            f"step's pairs carrying {' then '.join(f'1/{r:.2f}' for r in cube['ratios'])} of the step before's "
            f"(1/2 in theory); {len(cube['swaps'])} pairs then swap blocks into rank order; order: the hosts by "
            "their number in the hypercube"
        )
    # trees reduce up and broadcast down: every tree edge carries data both ways
    two_way = all((a, b) in pair and (b, a) in pair for a, b in (tuple(p) for p in und))
    if kind == "unknown" and two_way and len(und) == n - 1 and _connected(und, nodes):
        kind = "tree"
    if kind == "unknown" and two_way and n - 1 < len(und) <= 2 * (n - 1) and udeg.max() <= 6 and _connected(und, nodes):
        kind = "double_binary_tree"
        names = launch if len([x for x in launch if x in nodes]) == n else [h for h in hosts if h in nodes]
        idx = {h: i for i, h in enumerate(x for x in names if x in nodes)}
        if len(idx) == n and {frozenset(idx[x] for x in p) for p in und} == nccl_dtree_pairs(n):
            notes.append(
                "edges are exactly NCCL's double binary tree over the "
                + ("launch order" if names is launch else "host order")
            )
        else:
            coverage *= 0.6
            notes.append(
                "sparse, connected and of small degree like a double binary tree, but not NCCL's "
                "tree over the known host order"
            )

    even = float(used["bytes"].min() / used["bytes"].max()) if len(used) else 0.0
    even = alike if cube is not None else even
    out["kind"] = kind
    volume = min(1.0, float(heavy["bytes"].sum()) / MIN_COLLECTIVE_BYTES)
    if volume < 1:
        notes.append(
            f"only {int(heavy['bytes'].sum()):,} bytes on the heavy edges: this may be control "
            f"traffic rather than a training collective"
        )
    out["confidence"] = round(min(1.0, coverage / 0.95) * (0.5 + 0.5 * even) * volume, 3) if kind != "unknown" else 0.0
    if kind == "unknown":
        notes.append(f"{n} hosts, {len(und)} heavy host pairs: no ring, tree, star or mesh fits")
    if kind in ("ring", "bidirectional_ring"):
        out["order"] = order
        fit = _launch_fit(order, launch) if launch else None
        direction = fit[0] if fit is not None else None
        out["direction"] = "both" if kind == "bidirectional_ring" else direction
        if launch:
            out["matches_launch_order"] = direction is not None
            placed = fit[1] if fit is not None else {}
            if placed:
                notes.append(
                    "uncaptured peers in the launch order's places: "
                    + ", ".join(f"{address} is {name}" for address, name in placed.items())
                )
            if direction is None:
                notes.append(
                    "the ring does not follow the launch order: Horovod builds its ring in the order "
                    "hosts appear on the command line, so check the host list"
                )
        if kind == "ring":
            notes.append(
                "order is the direction data flows: each host sends to the next, the last to the first"
                + (
                    {
                        "with_launch_order": " (rank r sends to rank r+1, as NCCL does)",
                        "against_launch_order": " (rank r sends to rank r-1, as gloo's ring does)",
                    }.get(direction or "", "")
                )
            )
        position = {h: i for i, h in enumerate(order)}
        used = heavy.assign(_k=[position.get(s, n) for s in heavy["src"]]).sort_values("_k", kind="stable")
    elif kind in ("star", "halving_doubling"):
        out["order"] = order
    out["edges"] = [
        {
            "src": r.src,
            "dst": r.dst,
            "bytes": int(r.bytes),
            "payload_bytes": int(r.payload_bytes),
            "flows": int(r.flows),
            "share": round(float(r.bytes) / total, 6) if total else 0.0,
            "inferred": bool(r.inferred),
        }
        for r in used.itertuples(index=False)
    ]
    return from_plain(Topology, out)


def _connected(und: dict[frozenset, float], nodes: set[str]) -> bool:
    """Whether the undirected heavy graph reaches every node."""
    nbr: dict[str, set[str]] = {}
    for p in und:
        a, b = tuple(p)
        nbr.setdefault(a, set()).add(b)
        nbr.setdefault(b, set()).add(a)
    seen, todo = set(), [next(iter(nodes))]
    while todo:
        x = todo.pop()
        if x not in seen:
            seen.add(x)
            todo.extend(nbr.get(x, ()))
    return seen == nodes


def ring_pairs(topology: Topology) -> list[tuple[str, str]]:
    """The directed host pairs the topology uses (its heavy edges), for per-iteration edge bytes."""
    return [(e.src, e.dst) for e in topology.edges]


__all__ = [
    "RING_KINDS",
    "host_edges",
    "heavy_edges",
    "classify",
    "nccl_btree",
    "nccl_dtree_pairs",
    "align_launch_order",
    "ring_pairs",
]

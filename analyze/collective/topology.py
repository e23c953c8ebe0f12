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
from dataclasses import dataclass, field
from typing import Optional, Sequence

import pandas as pd

from analyze.collective.halving import hypercube
from analyze.model.findings import Topology, TopologyEdge
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


@dataclass
class _Graph:
    """The heavy-edge graph, read once for every shape classify tries."""

    heavy: pd.DataFrame
    hosts: Sequence[str]
    nodes: set[str]
    launch: list[str]
    pair: dict[tuple[str, str], float]  # directed heavy pair -> bytes
    und: dict[frozenset, float]  # undirected heavy pair -> bytes
    deg_out: pd.Series
    deg_in: pd.Series
    udeg: pd.Series
    start: str  # where an order begins: the first launch-order host, else the first captured one
    uncaptured: list[str]

    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def two_way(self) -> bool:
        """Every heavy pair carries data both ways (trees reduce up and broadcast down)."""
        return all((a, b) in self.pair and (b, a) in self.pair for a, b in (tuple(p) for p in self.und))


@dataclass
class _Shape:
    """A shape that fits: its kind, its order where it has one, how much of the coverage it keeps, its own
    evenness where the shape defines one (halving: within each step's pairs), and what it says."""

    kind: str
    order: list[str] = field(default_factory=list)
    trust: float = 1.0
    alike: Optional[float] = None
    notes: list[str] = field(default_factory=list)


def _graph(heavy: pd.DataFrame, hosts: Sequence[str], nodes: set[str], launch: list[str]) -> _Graph:
    pair = {(s, d): b for s, d, b in zip(heavy["src"], heavy["dst"], heavy["bytes"])}
    und: dict[frozenset, float] = {}
    for (s, d), b in pair.items():
        und[frozenset((s, d))] = und.get(frozenset((s, d)), 0.0) + b
    ordered = sorted(nodes)
    return _Graph(
        heavy=heavy,
        hosts=hosts,
        nodes=nodes,
        launch=launch,
        pair=pair,
        und=und,
        deg_out=heavy.groupby("src").size().reindex(ordered, fill_value=0),
        deg_in=heavy.groupby("dst").size().reindex(ordered, fill_value=0),
        udeg=pd.Series([x for p in und for x in p]).value_counts().reindex(ordered, fill_value=0),
        start=next((x for x in launch if x in nodes), None) or next((h for h in hosts if h in nodes), ordered[0]),
        uncaptured=sorted(nodes - set(hosts)),
    )


def _ring(g: _Graph) -> Optional[_Shape]:
    """Every host sends to one and hears from one (or would, closed over an edge no capture could see)."""
    closing = _closing_edge(g.deg_out, g.deg_in, set(g.uncaptured))
    if not (((g.deg_out == 1).all() and (g.deg_in == 1).all()) or closing is not None):
        return None
    succ = dict(zip(g.heavy["src"], g.heavy["dst"]))
    if closing is not None:
        succ[closing[0]] = closing[1]
    cyc = _cycle(g.start, succ)
    if len(cyc) != g.n:
        return None
    if closing is None:
        return _Shape("ring", cyc)
    return _Shape(
        "ring",
        cyc,
        trust=UNSEEN_EDGE,
        notes=[
            f"the edge {closing[0]} -> {closing[1]} is between two uncaptured peers, so no capture saw it: "
            "the ring is closed there by inference"
        ],
    )


def _bidirectional_ring(g: _Graph) -> Optional[_Shape]:
    """Every host exchanges both ways with exactly two others, and the pairs close one cycle."""
    if g.n < 3 or not (g.udeg == 2).all() or not g.two_way:
        return None
    nbr: dict[str, list[str]] = {}
    for a, b in (tuple(p) for p in g.und):
        nbr.setdefault(a, []).append(b)
        nbr.setdefault(b, []).append(a)
    walk = [g.start, sorted(nbr[g.start])[0]]
    while len(walk) < g.n + 1:
        walk.append([x for x in nbr[walk[-1]] if x != walk[-2]][0])
    if walk[-1] != g.start or len(set(walk[:-1])) != g.n:
        return None
    order = walk[:-1]
    if g.launch and _ring_direction(order, g.launch) == "against_launch_order":
        order = [order[0]] + order[:0:-1]
    return _Shape("bidirectional_ring", order)


def _star(g: _Graph) -> Optional[_Shape]:
    """One host exchanges with every other, and they only with it: a parameter server."""
    if g.n < 3:
        return None
    center = g.udeg.idxmax()
    if g.udeg[center] != g.n - 1 or not (g.udeg.drop(center) == 1).all():
        return None
    return _Shape(
        "star",
        [center] + sorted(g.nodes - {center}),
        notes=[f"{center} exchanges with every other host and they only with it: a parameter server"],
    )


def _mesh(g: _Graph) -> Optional[_Shape]:
    """Nearly every pair of hosts exchanges."""
    return _Shape("mesh") if g.n >= 4 and len(g.und) >= 0.9 * g.n * (g.n - 1) / 2 else None


def _halving(g: _Graph) -> Optional[_Shape]:
    """Recursive halving and doubling: analyze.collective.halving's hypercube."""
    cube = hypercube(g.pair, g.start)
    if cube is None:
        return None
    note = (
        f"recursive halving over {g.n} hosts: {len(cube['classes'])} steps, each pairing every host once, each "
        f"step's pairs carrying {' then '.join(f'1/{r:.2f}' for r in cube['ratios'])} of the step before's "
        f"(1/2 in theory); {len(cube['swaps'])} pairs then swap blocks into rank order; order: the hosts by "
        "their number in the hypercube"
    )
    return _Shape("halving_doubling", cube["order"], trust=cube["confidence"], alike=cube["alike"], notes=[note])


def _tree(g: _Graph) -> Optional[_Shape]:
    """A spanning tree whose every edge carries data both ways."""
    return _Shape("tree") if g.two_way and len(g.und) == g.n - 1 and _connected(g.und, g.nodes) else None


def _double_binary_tree(g: _Graph) -> Optional[_Shape]:
    """Sparse, connected, two-way and of small degree; NCCL's own double binary tree where the edges match it."""
    n = g.n
    if not (g.two_way and n - 1 < len(g.und) <= 2 * (n - 1) and g.udeg.max() <= 6 and _connected(g.und, g.nodes)):
        return None
    names = g.launch if len([x for x in g.launch if x in g.nodes]) == n else [h for h in g.hosts if h in g.nodes]
    idx = {h: i for i, h in enumerate(x for x in names if x in g.nodes)}
    if len(idx) == n and {frozenset(idx[x] for x in p) for p in g.und} == nccl_dtree_pairs(n):
        which = "launch order" if names is g.launch else "host order"
        return _Shape("double_binary_tree", notes=[f"edges are exactly NCCL's double binary tree over the {which}"])
    return _Shape(
        "double_binary_tree",
        trust=0.6,
        notes=[
            "sparse, connected and of small degree like a double binary tree, but not NCCL's tree over the "
            "known host order"
        ],
    )


SHAPES = (_ring, _bidirectional_ring, _star, _mesh, _halving, _tree, _double_binary_tree)  # tried in this order


def classify(
    edges: pd.DataFrame, hosts: Sequence[str], addr_host: dict[str, str], launch_order: Optional[Sequence[str]] = None
) -> Topology:
    """Name the shape of the heavy-edge graph: the result's topology.

    `hosts` are the captured hosts in their given order (run.json order when there is one); the ring is
    reported as a cycle in the direction the data flows, starting at the first launch-order host. The shapes
    are tried in the order of SHAPES; the first that fits names it.
    """
    notes: list[str] = []
    total = float(edges["bytes"].sum()) if len(edges) else 0.0
    heavy = heavy_edges(edges)
    nodes = set(heavy["src"]) | set(heavy["dst"]) if len(heavy) else set()
    launch = align_launch_order(launch_order, nodes, addr_host, notes)
    if len(nodes) < 2:
        notes.append("fewer than two hosts exchange a significant share of the bytes")
        return Topology(kind="unknown", launch_order=list(launch_order or []), notes=notes)
    g = _graph(heavy, hosts, nodes, launch)
    if g.uncaptured:
        notes.append(
            f"{len(g.uncaptured)} peer(s) not captured ({', '.join(g.uncaptured[:5])}"
            f"{', ...' if len(g.uncaptured) > 5 else ''}); their edges are inferred from the captured side"
        )
    heavy_bytes = float(heavy["bytes"].sum())
    light = total - heavy_bytes
    if total and light / total > 0.01:
        notes.append(
            f"{light / total:.1%} of inter-host bytes are on light edges (control traffic, ACKs) "
            f"and not part of the shape"
        )
    shape = next((s for fits in SHAPES if (s := fits(g)) is not None), _Shape("unknown"))
    notes += shape.notes
    even = shape.alike if shape.alike is not None else float(heavy["bytes"].min() / heavy["bytes"].max())
    coverage = (heavy_bytes / total if total else 0.0) * shape.trust
    volume = min(1.0, heavy_bytes / MIN_COLLECTIVE_BYTES)
    if volume < 1:
        notes.append(
            f"only {int(heavy_bytes):,} bytes on the heavy edges: this may be control "
            f"traffic rather than a training collective"
        )
    topology = Topology(kind=shape.kind, launch_order=list(launch_order or []), notes=notes)
    if shape.kind == "unknown":
        notes.append(f"{g.n} hosts, {len(g.und)} heavy host pairs: no ring, tree, star or mesh fits")
    else:
        topology.confidence = round(min(1.0, coverage / 0.95) * (0.5 + 0.5 * even) * volume, 3)
    used = heavy
    if shape.kind in RING_KINDS:
        _place_ring(topology, shape.order, launch)
        position = {h: i for i, h in enumerate(shape.order)}
        used = heavy.assign(_k=[position.get(s, g.n) for s in heavy["src"]]).sort_values("_k", kind="stable")
    elif shape.kind in ("star", "halving_doubling"):
        topology.order = shape.order
    topology.edges = [
        TopologyEdge(
            src=r.src,
            dst=r.dst,
            bytes=int(r.bytes),
            payload_bytes=int(r.payload_bytes),
            flows=int(r.flows),
            share=round(float(r.bytes) / total, 6) if total else 0.0,
            inferred=bool(r.inferred),
        )
        for r in used.itertuples(index=False)
    ]
    return topology


def _place_ring(topology: Topology, order: list[str], launch: list[str]) -> None:
    """A ring's order, its direction against the launch order, and the notes that explain both."""
    notes = topology.notes
    topology.order = order
    fit = _launch_fit(order, launch) if launch else None
    direction = fit[0] if fit is not None else None
    topology.direction = "both" if topology.kind == "bidirectional_ring" else direction
    if launch:
        topology.matches_launch_order = direction is not None
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
    if topology.kind == "ring":
        notes.append(
            "order is the direction data flows: each host sends to the next, the last to the first"
            + (
                {
                    "with_launch_order": " (rank r sends to rank r+1, as NCCL does)",
                    "against_launch_order": " (rank r sends to rank r-1, as gloo's ring does)",
                }.get(direction or "", "")
            )
        )


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

"""How many ranks a job has and where they sit: theory is in ranks, not hosts.

S implied from a host's bytes depends on them: in a ring of W ranks each rank sends 2(W-1)/W x S, so a host sends
that once per rank of its whose ring successor is on another host. Two ranks per host read as one gave S 17 %
too high; placed round-robin (each host sends two rank streams), 134 %.

Where W comes from, first that says: each rank's own markers (its host, so any placement); what the user gave
(--world-size, --ranks-per-host), checked against the traffic; the NCCL log; the traffic; NCCL's bootstrap
(analyze.collective.bootstrap: a connection to its root per rank); the launch command run.json recorded; else one
rank per host, said as an assumption that leaves S unsure.

The traffic's sign (torch.distributed over gloo, measured on real runs): every rank but those on the store's
host opens one connection to the rendezvous store, and every rank pair one connection, so host h makes r_h store
connections and hosts a and b share r_a x r_b pair connections. Both counts must agree for the answer to be sure.
Each rank whose ring successor is on another host sends one heavy connection: their count per host is the
placement (two per host when ranks are interleaved over hosts). A mesh with more connections than one (process
subgroups) counts nothing: W given is used, but where its ranks sit is not known, and S from a ring is unsure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from analyze.model.findings import Bootstrap
from analyze.tables.flows import connection_ends

# a ring send carries the same bytes from every rank; the broadcast before the first step, a tenth of them or less
HEAVY_SHARE = 0.5
SUBGROUPS = (
    "S unsure: the connections are more than one rank mesh ({evidence}): process subgroups, such as pipeline "
    "stages each with its own ring over the same hosts, where the hosts' bytes are no one ring's; which ranks "
    "each host's ring sends come from is not known (a pipeline with two ranks per host placed round-robin read "
    "as one ring of 8 gave S 1.7x a stage's)"
)


@dataclass(frozen=True)
class RingRanks:
    """Who is in the ring: W ranks, ranks per host where known, and per host how many of its ranks send to a rank
    on another host (None: one each, as with one rank per host or ranks placed contiguously), with where that was
    learnt and whether it is sure."""

    world_size: int
    sends: Optional[dict[str, int]]
    source: str
    note: str = ""
    per_host: Optional[dict[str, int]] = None
    sure: bool = True
    placed: bool = True  # where the ranks sit (so how many ring sends each host makes) is known or safely assumed


@dataclass(frozen=True)
class TrafficRanks:
    """Ranks per host as the connections tell them, the heavy sends per host, and whether the counts agree."""

    per_host: dict[str, int]
    sends: dict[str, int]
    consistent: bool
    evidence: str


def ranks_from_connections(
    flows: pd.DataFrame, hosts: list[str], uncaptured: Sequence[str] = ()
) -> Optional[TrafficRanks]:
    """Ranks per host from a job's TCP connections between HOSTS (flows with src_host, dst_host, sport, dport,
    start_ns, payload_bytes, bytes); None where the traffic has no full mesh to count. A pair of two UNCAPTURED
    hosts is in no capture: the mesh is full without it."""
    f = flows[(flows["proto"] == "tcp") & (flows["src_host"] != flows["dst_host"])]
    f = f[f["src_host"].isin(hosts) & f["dst_host"].isin(hosts)]
    if len(hosts) < 2 or f.empty:
        return None
    lo, hi = connection_ends(f["src_host"], f["sport"], f["dst_host"], f["dport"])
    key = lo + "|" + hi
    conn = (
        f.assign(key=key)
        .groupby("key")
        .agg(
            payload=("payload_bytes", "sum"),
            start=("start_ns", "min"),
            src=("src_host", "first"),
            dst=("dst_host", "first"),
        )
    )
    conn = conn[conn["payload"] > 0].sort_values("start", kind="stable")
    if conn.empty:
        return None
    ends = conn.index.to_series().str.split("|", expand=True)
    uses = pd.concat([ends[0], ends[1]]).value_counts()
    first = ends.iloc[0]
    store = first[0] if uses[first[0]] >= uses[first[1]] else first[1]  # the end the earliest connection shares
    store_host = store.rsplit(":", 1)[0]
    at_store = (ends[0] == store) | (ends[1] == store)
    other_end = np.where(ends[0] == store, ends[1], ends[0])
    store_count = pd.Series(other_end[at_store.to_numpy()]).str.rsplit(":", n=1).str[0].value_counts()
    pairs = conn[~at_store.to_numpy()]
    pair_count = pd.Series([tuple(sorted(p)) for p in zip(pairs["src"], pairs["dst"])], dtype=object).value_counts()
    unseen = set(uncaptured)
    if any(
        (x, y) not in pair_count.index and (y, x) not in pair_count.index and not {x, y} <= unseen
        for i, x in enumerate(hosts)
        for y in hosts[i + 1 :]
    ):
        return None  # not every host pair connected: no full mesh (NCCL, a parameter server)
    per_host = {h: int(store_count.get(h, 0)) for h in hosts if h != store_host}
    if store_host in hosts:
        guesses = [pair_count.get(tuple(sorted((store_host, h))), 0) / r for h, r in per_host.items() if r]
        per_host[store_host] = int(round(float(np.median(guesses)))) if guesses else 0
    consistent = all(per_host.get(h, 0) >= 1 for h in hosts) and all(
        int(n) == per_host.get(x, 0) * per_host.get(y, 0) for (x, y), n in pair_count.items()
    )
    heavy = f.groupby(["src_host", "dport", "sport"])["bytes"].sum()
    top = heavy[heavy >= HEAVY_SHARE * heavy.max()]
    sends = {h: int(n) for h, n in top.groupby(level=0).size().items()}
    return TrafficRanks(
        per_host={h: per_host.get(h, 0) for h in hosts},
        sends=sends,
        consistent=consistent,
        evidence=f"{int(at_store.sum())} store connections to {store}, {len(pairs)} rank-pair connections",
    )


def ring_ranks(
    markers: pd.DataFrame,
    log: Any,
    hosts_in_ring: int,
    run: Optional[dict[str, Any]],
    *,
    traffic: Optional[TrafficRanks] = None,
    bootstrap: Optional[Bootstrap] = None,
    world_size: Optional[int] = None,
    ranks_per_host: Optional[int] = None,
) -> RingRanks:
    """The ring's ranks, from the first source that says (this module's docstring)."""
    if len(markers) and {"rank", "host"} <= set(markers.columns):
        placed = markers.groupby("rank")["host"].first().sort_index()
        hosts = placed.to_numpy()
        successor = np.roll(hosts, -1)
        sends: dict[str, int] = {}
        for host, nxt in zip(hosts, successor):
            if host != nxt:
                sends[str(host)] = sends.get(str(host), 0) + 1
        uneven = sends if any(v != 1 for v in sends.values()) else None
        per = {str(h): int(n) for h, n in placed.value_counts().sort_index().items()}
        return RingRanks(len(placed), uneven, "the markers' ranks and hosts", per_host=per)
    seen = _from_traffic(traffic) if traffic is not None and traffic.consistent else None
    if world_size or ranks_per_host:
        told = world_size or (ranks_per_host or 1) * hosts_in_ring
        source = "--world-size" if world_size else "--ranks-per-host"
        if seen is not None and seen.world_size != told:
            return RingRanks(
                seen.world_size,
                seen.sends,
                seen.source,
                f"DISAGREEMENT: {source} gives W = {told}, but the connections show {seen.world_size} ranks "
                f"({traffic.evidence if traffic else ''}); the traffic's W is used, unsure",
                seen.per_host,
                sure=False,
            )
        if seen is not None:
            return RingRanks(told, seen.sends, f"{source}, as the connections show", per_host=seen.per_host)
        if traffic is not None:  # a rank mesh, but more connections than one: subgroups (pipeline stages, ...)
            return RingRanks(told, None, source, SUBGROUPS.format(evidence=traffic.evidence), placed=False)
        return RingRanks(told, None, source)
    if log is not None and log.nranks:
        return RingRanks(int(log.nranks), None, "the NCCL log")
    if seen is not None:
        return seen
    if bootstrap is not None:
        return _from_bootstrap(bootstrap, launch_ranks_per_host(run))
    per_host = launch_ranks_per_host(run)
    if per_host:
        return RingRanks(per_host * hosts_in_ring, None, "the launch command")
    return RingRanks(
        hosts_in_ring,
        None,
        "assumed",
        "assumed one rank per host (no markers, --world-size, NCCL log, rank-pair connections or launch command "
        "says more): with R ranks per host, placed host by host, N is R x hosts and S is smaller than implied here; "
        "give --ranks-per-host or --world-size to be sure",
        sure=False,
    )


def _from_traffic(t: TrafficRanks) -> RingRanks:
    sends = {h: n for h, n in t.sends.items() if h in t.per_host}
    uneven = sends if any(v != 1 for v in sends.values()) and sum(sends.values()) <= sum(t.per_host.values()) else None
    return RingRanks(sum(t.per_host.values()), uneven, f"the connections: {t.evidence}", per_host=t.per_host)


def _from_bootstrap(b: Bootstrap, launched: Optional[int]) -> RingRanks:
    """W from NCCL's bootstrap: each other host's connections to the root. The root's host reaches it over
    loopback: its ranks are counted by its NCCL proxies where its capture holds its loopback (sure where the other
    hosts' proxies agree with their connections), else the others' where they agree, sure only where the launch
    command (LAUNCHED ranks per host) says so too."""
    others = ", ".join(f"{n} from {h}" for h, n in sorted(b.ranks_per_host.items()))
    source = f"NCCL's bootstrap: ranks reached its root {b.root} ({others})"
    per_host = dict(b.ranks_per_host)
    proxies = b.proxies or {}
    if b.root_host in proxies:  # a capture of its loopback holds its ranks' proxies: counted, not assumed
        agree = all(proxies[h] == n for h, n in per_host.items() if h in proxies)
        per_host[b.root_host] = proxies[b.root_host]
        counted = f"{source}; {proxies[b.root_host]} NCCL proxies on the root's host {b.root_host}"
        if agree:
            return RingRanks(sum(per_host.values()), None, counted, per_host=per_host)
        note = "the hosts' proxy listeners and their connections to the root count different ranks"
        return RingRanks(sum(per_host.values()), None, counted, note, per_host=per_host, sure=False)
    if b.root_host_ranks is None:
        note = f"the root's host {b.root_host} reaches it over loopback: its ranks are not counted (one assumed)"
        return RingRanks(sum(per_host.values()) + 1, None, source, note, sure=False)
    per_host[b.root_host] = b.root_host_ranks
    if launched == b.root_host_ranks:
        return RingRanks(sum(per_host.values()), None, f"{source} and the launch command", per_host=per_host)
    note = (
        f"the root's host {b.root_host} reaches it over loopback: its ranks are taken as the others' "
        f"({b.root_host_ranks}); --ranks-per-host or --world-size makes W sure"
    )
    return RingRanks(sum(per_host.values()), None, source, note, per_host=per_host, sure=False)


def launch_ranks_per_host(run: Optional[dict[str, Any]]) -> Optional[int]:
    """Ranks per host from the training command run.json recorded: torchrun's --nproc-per-node (or
    --nproc_per_node) N, or horovodrun's -H host:slots when every host has the same slots."""
    command = [str(a) for a in (run or {}).get("command") or []]
    for i, arg in enumerate(command):
        name, _, value = arg.partition("=")
        if name in ("--nproc-per-node", "--nproc_per_node"):
            value = value or (command[i + 1] if i + 1 < len(command) else "")
            return int(value) if value.isdigit() else None
        if name in ("-H", "--hosts") and (value or i + 1 < len(command)):
            slots = {part.rpartition(":")[2] for part in (value or command[i + 1]).split(",") if ":" in part}
            if len(slots) == 1 and next(iter(slots)).isdigit():
                return int(next(iter(slots)))
    return None

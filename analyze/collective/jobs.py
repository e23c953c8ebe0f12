"""Which connections are one job: a capture's traffic split into the jobs that made it, and the rest set aside.

Why: servers are shared. Two jobs on the same hosts read as one collective gave one "mesh" of no use, and a
checkpoint copy across a job's link was counted in its bytes per iteration (p95 57 MB against 30 MB).

How, from headers only (no payload, no ports known in advance):
- a *connection* is the two directions of one TCP 5-tuple between two captured hosts;
- a *listener* is an endpoint (address, port) that two or more connections share: one process listening (a
  rank's gloo listener, the job's rendezvous store, a copy server), so its connections are that process's;
- a job opens its rank-pair mesh at once, at start-up: connections whose opening (SYN) the capture saw, opened
  within OPEN_GAP_NS of each other, were opened by the same start-up (a listener whose connections opened over a
  longer time, the store, which each rank reaches as it starts, joins the mesh that opens right after its last
  connection: the rendezvous completes when the last rank arrives).
Connections joined by these links are one group. A group that opens soon after another over hosts of its, in
several separate meshes, is that job's subgroups (a pipeline stage's data-parallel group; one of two replicas is a
lone connection, and such connections are its subgroups where together they fall apart so). A group of two or
more connections over two or more hosts is a job, unless it is light (a hundredth of the heaviest group's
bytes) and its hosts are a job's: then it is part of that job; the rest (a lone copy, an ssh session,
connections opened before the capture and sharing no listener with a job) is other traffic. Where the capture
saw too few connections open to tell (it began after the job did, or a synthetic capture has no handshakes), or
no group is a job, all the traffic is one job, as before: nothing is set aside that could not be told apart.

Two jobs whose start-ups overlap to within OPEN_GAP_NS are one group here; their iterations then disagree and the
staircase says it is unsure, rather than one job's numbers being stated for both (two real jobs forced into one
group read as a mesh at 0.67-0.69 with iterations at 0.00, on four runs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyze.collective.groups import host_sets
from analyze.tables.flows import connection_ends

# Gloo opens a rank's pair connections within about a millisecond of each other, and a job's ranks open theirs
# within a few milliseconds (4 ms over 8 ranks on 4 hosts, gaps under 1 ms, measured; 27 ms with a gap of 21 ms
# while another job kept the cores busy); separate jobs start seconds apart, their meshes not within this.
OPEN_GAP_NS = 50_000_000
# A listener whose connections all opened within this is a rank's (its mesh); the rendezvous store's open as the
# ranks start, 100-700 ms apart on the runs measured.
COMPACT_NS = 250_000_000
# The mesh opens this soon after the last rank reaches the rendezvous store, or not because of it.
RENDEZVOUS_NS = 1_000_000_000
# A group of connections over a job's hosts carrying under this share of the heaviest group's bytes is part of
# that job, not a job: Horovod opens its rendezvous requests and gloo contexts (global, local, cross) apart in time,
# 343 HTTP connections and five small meshes beside the ring's on a 3-host run.
LIGHT_SHARE = 0.01
# A connection with this share of the heaviest connection's bytes carries a collective (a ring's neighbours).
HEAVY_CONNECTION = 0.1
# One collective's connections carry their last bytes within this of each other (its last step, then each rank's
# exit); a copy, or another job, stops at its own time.
END_TOGETHER_NS = 1_000_000_000
# Other traffic under this share of the bytes, beside one job, is not set aside: the job is read whole, as before.
OTHER_NEGLIGIBLE = 0.01
# Below this share of inter-host connections opened inside the capture, start-ups cannot be told apart.
OPENED_ENOUGH = 0.5


@dataclass
class Split:
    """Each flow's job (0, 1, ... heaviest first) or -1 for other traffic, and how the split was made."""

    flow_job: np.ndarray  # aligned with the flows table's rows
    jobs: int
    method: str  # "connections" (listeners and start-ups) or "whole" (one job: no split possible or needed)
    note: str


def split_jobs(flows: pd.DataFrame, hosts: pd.DataFrame) -> Split:
    """The jobs in FLOWS (the result's flows table) given HOSTS (flows' src_host, dst_host by flow_id, as
    analyze.tables.hosts.flow_hosts gives them, and `opened`: whether a capture saw the flow's SYN)."""
    n = len(flows)
    whole = Split(np.zeros(n, np.int64), 1 if n else 0, "whole", "")
    if not n:
        return whole
    src_h = hosts["src_host"].to_numpy(object)
    dst_h = hosts["dst_host"].to_numpy(object)
    # connections to a peer without a capture are the job's too (seen from the captured end); a capture whose
    # every connection leads out of it (one host's) has no jobs to tell apart
    inter = (flows["proto"] == "tcp").to_numpy() & (src_h != dst_h)
    if not (inter & ~hosts["inferred"].to_numpy(bool)).any():
        return whole
    conn = _connections(flows, inter)
    opened = pd.Series(hosts["opened"].to_numpy(bool)[inter]).groupby(conn.flow_conn).any().to_numpy()
    if opened.mean() < OPENED_ENOUGH:
        return Split(
            whole.flow_job,
            1,
            "whole",
            f"all traffic read as one job: the capture saw {int(opened.sum())} of {len(opened)} connections open, "
            "too few to tell jobs apart by their start-up",
        )
    label = _groups(conn, opened)
    # a job: two or more connections over two or more hosts, one of them between two captured hosts (a group all
    # of whose connections lead to uncaptured addresses, a storage or log server's, is other traffic)
    members = _members(label[conn.flow_conn], src_h[inter], dst_h[inter])
    conns = pd.Series(label).value_counts()
    spans = members.map(len)
    seen = pd.Series(~hosts["inferred"].to_numpy(bool)[inter]).groupby(label[conn.flow_conn]).any()
    is_job = (conns.reindex(spans.index).fillna(0) >= 2) & (spans >= 2) & seen.reindex(spans.index, fill_value=False)
    job_groups = spans.index[is_job.to_numpy()]
    if not len(job_groups):
        return whole
    pairs = pd.DataFrame({"g": label[conn.flow_conn], "a": src_h[inter], "b": dst_h[inter]})
    label = _subgroups_joined(label, conn.start_ns, members, job_groups, pairs)
    label = _pieces_joined(label, conn, flows[inter], pairs, job_groups)
    job_groups = np.unique(label[np.isin(label, job_groups)])
    flow_group = label[conn.flow_conn]
    members = _members(flow_group, src_h[inter], dst_h[inter])
    weight = pd.Series(flows["bytes"].to_numpy(np.int64)[inter]).groupby(flow_group).sum()
    ranked = weight.reindex(job_groups).sort_values(ascending=False, kind="stable").index.to_numpy()
    heavy = ranked[weight.reindex(ranked).to_numpy() >= LIGHT_SHARE * weight.max()]
    code = np.full(int(label.max()) + 1, -1, np.int64)
    code[heavy] = np.arange(len(heavy))
    for g in ranked[len(heavy) :]:  # a light group of a job's hosts: another of its contexts, its rendezvous
        home = [j for j, big in enumerate(heavy) if members[g] <= members[big]]
        code[g] = home[0] if home else -1
    ranked = heavy
    flow_job = np.full(n, -1, np.int64)
    flow_job[np.flatnonzero(inter)] = code[flow_group]
    total = int(flows["bytes"].sum())
    if len(ranked) == 1 and flows["bytes"].to_numpy(np.int64)[flow_job < 0].sum() < OTHER_NEGLIGIBLE * total:
        return whole  # one job, beside it only noise (neighbour discovery, a stray ssh line): read whole
    other = int((flow_job < 0).sum())
    return Split(
        flow_job,
        len(ranked),
        "connections",
        f"{len(ranked)} job(s) told apart by their listeners and start-ups; {other} flow(s) of other traffic",
    )


@dataclass
class _Connections:
    flow_conn: np.ndarray  # per inter-host flow, its connection
    listener: np.ndarray  # per connection, its listener's code, -1: none
    start_ns: np.ndarray  # per connection, its first packet


def _connections(flows: pd.DataFrame, inter: np.ndarray) -> _Connections:
    """Connections of the inter-host flows: a flow and its reverse share one; the listener is the end shared
    by more connections (ties: the lower port, where servers listen)."""
    f = flows[inter]
    lo, hi = connection_ends(f["src"], f["sport"], f["dst"], f["dport"])
    flow_conn, _ = pd.factorize(pd.Series(lo) + "|" + pd.Series(hi))
    first = pd.Series(f["start_ns"].to_numpy(np.int64)).groupby(flow_conn).min().to_numpy()
    one = pd.DataFrame({"c": flow_conn, "lo": lo, "hi": hi}).drop_duplicates("c").sort_values("c")
    endpoints = pd.concat([one["lo"], one["hi"]])
    uses = endpoints.groupby(endpoints).size()  # connections per endpoint
    lo_n, hi_n = uses.reindex(one["lo"]).to_numpy(), uses.reindex(one["hi"]).to_numpy()
    pick_lo = (lo_n > hi_n) | ((lo_n == hi_n) & (_port(one["lo"]) <= _port(one["hi"])))
    end = np.where(pick_lo, one["lo"].to_numpy(object), one["hi"].to_numpy(object))
    shared = np.maximum(lo_n, hi_n) >= 2
    codes, _ = pd.factorize(pd.Series(end))
    return _Connections(flow_conn, np.where(shared, codes, -1), first)


def _members(flow_group: np.ndarray, src: np.ndarray, dst: np.ndarray) -> pd.Series:
    """Per group, the set of hosts its flows join."""
    ends = pd.DataFrame({"g": np.concatenate([flow_group, flow_group]), "h": np.concatenate([src, dst])})
    return ends.groupby("g")["h"].agg(set)


def _subgroups_joined(
    label: np.ndarray, start_ns: np.ndarray, members: pd.Series, job_groups: np.ndarray, pairs: pd.DataFrame
) -> np.ndarray:
    """LABEL (per connection, its group) with each job group made part of an earlier one when it is that job's
    subgroups: it opens within RENDEZVOUS_NS of the earlier group's last opening, over hosts of that group's, and
    its host pairs (PAIRS: group, a, b per flow) fall apart into several meshes (torch's new_group per pipeline
    stage: a mesh among each stage's replicas, opened once the global mesh is: 66 ms after it on a 3-stage pipeline
    of 6 hosts, past OPEN_GAP_NS, and read as a second job over the same hosts before this). A second job over
    those hosts opens one mesh joining them all, and is kept apart however soon it starts."""
    first = pd.Series(start_ns).groupby(label).min()
    last = pd.Series(start_ns).groupby(label).max()
    out = label.copy()
    kept: list[int] = []  # job groups no earlier one took in, oldest first
    for g in sorted(job_groups, key=lambda x: first[x]):
        mine = pairs[pairs["g"] == g]
        apart = len(host_sets(list(zip(mine["a"], mine["b"])))) > 1
        home = [h for h in kept if apart and first[g] - last[h] <= RENDEZVOUS_NS and members[g] <= members[h]]
        if home:
            out[label == g] = home[0]
        else:
            kept.append(g)
    # groups that open after a job's mesh, over its hosts, and together fall apart into several meshes are its
    # subgroups, as a new_group per stage makes them: two stages of four ranks placed two to a host are each one
    # mesh over two hosts, opened apart (a CI capture read each stage's all-reduce as a job of its own). First
    # the groups that would be jobs (a second job over some of its hosts is one mesh: kept apart however soon it
    # opens), then lone connections: a subgroup of two ranks is one connection, no job of its own (the stages'
    # groups of a pipeline of two replicas opened 54 ms and 151 ms after the global mesh under load, 97 ms apart,
    # each a lone connection, and the job's all-reduces went to other traffic); a lone copy between two of its
    # hosts does not fall apart so
    size = pd.Series(label).value_counts()
    jobs = set(job_groups.tolist())
    lone = [g for g in size.index[size.to_numpy() == 1] if g not in jobs]
    for h in list(kept):
        if h not in kept:
            continue  # itself a subgroup of an older job
        for pool in (kept, lone):
            near = [g for g in pool if g != h and members[g] <= members[h] and 0 <= first[g] - last[h] <= RENDEZVOUS_NS]
            mine = pairs[pairs["g"].isin(near)]
            if len(host_sets(list(zip(mine["a"], mine["b"])))) > 1:
                out[np.isin(label, near)] = h
                pool[:] = [g for g in pool if g not in near]
    return out


def _pieces_joined(
    label: np.ndarray, conn: _Connections, flows: pd.DataFrame, pairs: pd.DataFrame, job_groups: np.ndarray
) -> np.ndarray:
    """LABEL with job groups that carry pieces of one collective made one group.

    Horovod over gloo connects each rank to the others as soon as it reaches the rendezvous, without waiting for
    the rest, in several contexts: 8 ranks on 8 hosts opened 22 of the global mesh's 28 host pairs within 65 ms and
    the two late ranks' pairs a second later, mixed with other contexts' openings, and the collective's connections
    fell in three groups: three jobs. One collective's pieces share hosts, carry it over different host pairs, and
    stop together with it; a second job over those hosts runs its collective over the same pairs (a ring is the
    shape of both), and one job's copy or another job stops at its own time. So a group whose heavy connections
    (at least HEAVY_CONNECTION of the heaviest's bytes; PAIRS: a, b, the hosts of each flow of FLOWS) join other
    host pairs than a heavier group's, over hosts of its connections, and whose last packets come within
    END_TOGETHER_NS of that group's, is that group's (the hosts of all its connections: a pipeline's global mesh,
    whose heavy pairs are one stage's all-reduce, is over the other stage's hosts too); taken heaviest first, over
    and over until none joins. Flows without their last packet's time (a synthetic table) join nothing."""
    if "end_ns" not in flows:
        return label
    a, b = pairs["a"].astype(str), pairs["b"].astype(str)
    conns = (
        pd.DataFrame(
            {
                "c": conn.flow_conn,
                "g": label[conn.flow_conn],
                "pair": np.where(a < b, a + "\0" + b, b + "\0" + a),
                "bytes": flows["bytes"].to_numpy(np.int64),
                "end": flows["end_ns"].to_numpy(np.int64),
            }
        )
        .groupby("c")
        .agg(g=("g", "first"), pair=("pair", "first"), bytes=("bytes", "sum"), end=("end", "max"))
    )
    heavy = conns[conns["bytes"] >= HEAVY_CONNECTION * conns["bytes"].max()]
    heavy = heavy[heavy["g"].isin(job_groups)]
    if heavy["g"].nunique() < 2:
        return label
    by = heavy.groupby("g").agg(pairs=("pair", set), end=("end", "median"), bytes=("bytes", "sum"))
    hosts = _members(label[conn.flow_conn], pairs["a"].to_numpy(object), pairs["b"].to_numpy(object))
    hosts = {g: set(hosts[g]) for g in by.index}
    out = label.copy()
    left = list(by.sort_values("bytes", ascending=False, kind="stable").index)
    joined = True
    while joined:  # until nothing joins: a piece sharing no host with a group may share one once another joined it
        joined = False
        kept: list[int] = []
        for g in left:
            home = [
                k
                for k in kept
                if not by.at[g, "pairs"] & by.at[k, "pairs"]
                and hosts[g] & hosts[k]
                and abs(by.at[g, "end"] - by.at[k, "end"]) <= END_TOGETHER_NS
            ]
            if home:
                out[out == g] = home[0]
                by.at[home[0], "pairs"] = by.at[home[0], "pairs"] | by.at[g, "pairs"]
                hosts[home[0]] |= hosts[g]
                joined = True
            else:
                kept.append(g)
        left = kept
    return out


def _port(ends: pd.Series) -> np.ndarray:
    """The port of each "name:port" end."""
    return ends.str.rsplit(":", n=1).str[1].astype(int).to_numpy()


def _compact(conn: _Connections) -> np.ndarray:
    """Per connection: whether its listener's connections all opened within COMPACT_NS (a rank's listener, which
    its peers reach at once), or it shares none. The rendezvous store's connections open as each rank starts (700 ms
    apart on 8 ranks): linked by start-up they chained one job's store to another job's mesh opening meanwhile
    (two jobs read as one in 2 of 6 real runs), so they join their job by their listener only."""
    out = np.ones(len(conn.start_ns), dtype=bool)
    has = conn.listener >= 0
    if has.any():
        ends = pd.Series(conn.start_ns[has]).groupby(conn.listener[has]).agg(["min", "max"])
        spread = (ends["max"] - ends["min"]).reindex(conn.listener[has]).to_numpy()
        out[has] = spread <= COMPACT_NS
    return out


def _rendezvous_links(conn: _Connections, spread: np.ndarray, meshes: np.ndarray) -> np.ndarray:
    """Each spread-out listener (a rendezvous store) linked to the mesh opening that follows its last connection
    within RENDEZVOUS_NS: the last rank to reach the store completes the rendezvous, and every rank then opens its
    pair connections (3-9 ms later, measured). MESHES: the compact opened connections in time order."""
    rows = np.flatnonzero(spread)
    if not len(rows) or not len(meshes):
        return np.zeros((2, 0), dtype=np.int64)
    last = pd.Series(conn.start_ns[rows]).groupby(conn.listener[rows]).agg(["max", "idxmax"])
    member = rows[last["idxmax"].to_numpy()]
    times = conn.start_ns[meshes]
    k = np.searchsorted(times, last["max"].to_numpy(), side="right")
    found = k < len(meshes)
    after = meshes[np.minimum(k, len(meshes) - 1)]
    close = found & (conn.start_ns[after] - last["max"].to_numpy() <= RENDEZVOUS_NS)
    return np.stack([member[close], after[close]])


def _groups(conn: _Connections, opened: np.ndarray) -> np.ndarray:
    """Each connection's group: connected components over shared listeners and start-ups, by label
    propagation (minimum label over the links, then pointer jumping) in whole-array steps."""
    m = len(conn.start_ns)
    links = []
    has = np.flatnonzero(conn.listener >= 0)
    if len(has):
        order = has[np.argsort(conn.listener[has], kind="stable")]
        same = conn.listener[order][1:] == conn.listener[order][:-1]
        links.append(np.stack([order[:-1][same], order[1:][same]]))
    compact = _compact(conn)
    seen = np.flatnonzero(opened & compact)
    if len(seen) > 1:
        order = seen[np.argsort(conn.start_ns[seen], kind="stable")]
        near = np.diff(conn.start_ns[order]) <= OPEN_GAP_NS
        links.append(np.stack([order[:-1][near], order[1:][near]]))
        links.append(_rendezvous_links(conn, opened & ~compact, order))
    label = np.arange(m, dtype=np.int64)
    if not links:
        return label
    a, b = np.concatenate(links, axis=1)
    while True:
        low = np.minimum(label[a], label[b])
        new = label.copy()
        np.minimum.at(new, a, low)
        np.minimum.at(new, b, low)
        new = new[new]
        if np.array_equal(new, label):
            return label
        label = new

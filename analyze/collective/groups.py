"""Groups inside one job: data-parallel groups, and the pipeline links between them.

Why: a pipeline-parallel job with a data-parallel group per stage is not one collective, and read as one it
gives no answer or a wrong one: its four hosts in two stages of two replicas exchange data with two peers each,
both ways, which is the shape of a sharded data-parallel ring. What tells them apart is the bytes. Each stage's
replicas all-reduce that stage's gradients (S_stage per iteration, the heavy pairs), and between the stages run
point-to-point activations forward and their gradients back (micro-batch × width per micro-batch each way, the
lighter pairs), one link from each replica's stage to the same replica's next stage: a matching between two groups.

So: pairs of hosts exchanging data both ways, ranked by bytes; the first split where the ranking drops by
GAP or more whose heavier pairs fall apart into two or more groups of two or more hosts, and whose next class of
pairs links those groups host to host (each host of one group to exactly one of the other), is read as data-parallel
groups joined by pipeline links. Anything else (one connected collective, an uneven link, a host left out) is not
a set of groups, and the caller keeps the job whole. The confidence is the drop: 0.5 at GAP, 1 at twice GAP.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from analyze.model.findings import Group, IterationRecord

GAP = 2.0  # the heavier class of pairs carries at least this many times the lighter's bytes
SPREAD = 0.03  # a group's bytes per iteration over the whole capture and over the interior windows may differ so much
FLOOR = 0.01  # pairs under this share of the heaviest pair's bytes are control traffic (a rank mesh, a store)
HEAVY_SEND = 0.5  # a connection on a group's edges with this share of its heaviest one's bytes carries its ring


def host_sets(pairs: list[tuple[str, str]]) -> list[set[str]]:
    """Connected host sets of PAIRS (also how analyze.collective.jobs tells a job's subgroups from a job)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in pairs:
        parent[find(a)] = find(b)
    out: dict[str, set[str]] = {}
    for x in list(parent):
        out.setdefault(find(x), set()).add(x)
    return sorted(out.values(), key=lambda s: sorted(s))


def _links(light: pd.DataFrame, groups: list[set[str]]) -> Optional[list[tuple[int, int, list[tuple[str, str]]]]]:
    """The pipeline links between GROUPS from the LIGHT pairs: per pair of groups linked, (i, j, host pairs) when
    they match the groups host to host; None when any light pair joins hosts of one group, or a link is partial."""
    where = {h: i for i, g in enumerate(groups) for h in g}
    by: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for a, b in zip(light["a"], light["b"]):
        if a not in where or b not in where:
            return None
        i, j = where[a], where[b]
        if i == j:
            return None
        key = (min(i, j), max(i, j))
        by.setdefault(key, []).append((a, b) if i < j else (b, a))
    out = []
    for (i, j), hosts in sorted(by.items()):
        left, right = [a for a, _ in hosts], [b for _, b in hosts]
        if sorted(left) != sorted(groups[i]) or sorted(right) != sorted(groups[j]):
            return None  # a matching covering both groups, or not a stage boundary
        out.append((i, j, sorted(hosts)))
    linked = host_sets([(str(i), str(j)) for i, j, _ in out])
    if not out or len(linked) != 1 or len(linked[0]) != len(groups):
        return None
    return out


def find_groups(edges: pd.DataFrame) -> Optional[dict[str, Any]]:
    """Data-parallel groups joined by pipeline links, from a job's host edges (src, dst, payload_bytes), or None
    (this module's docstring). Returns {groups: [{kind, hosts, edges, bytes}], confidence, evidence}: groups of
    kind data_parallel (hosts, their heavy edges, their bytes both ways) then pipeline (the boundary's host
    pairs as src -> dst edges both ways, and their bytes)."""
    if edges.empty:
        return None
    directed = {(s, d): float(b) for s, d, b in zip(edges["src"], edges["dst"], edges["payload_bytes"])}
    counted = edges["bytes"] if "bytes" in edges else edges["payload_bytes"]  # in the result's byte mode
    carried = {(s, d): int(b) for s, d, b in zip(edges["src"], edges["dst"], counted)}
    rows = []
    for (s, d), b in directed.items():
        back = directed.get((d, s), 0.0)
        if s < d and b > 0 and back > 0:
            rows.append((s, d, b + back))
    pairs = pd.DataFrame(rows, columns=["a", "b", "bytes"]).sort_values("bytes", ascending=False, ignore_index=True)
    pairs = pairs[pairs["bytes"] >= FLOOR * pairs["bytes"].max()] if len(pairs) else pairs
    if len(pairs) < 3:
        return None
    w = pairs["bytes"].to_numpy()
    drops = w[:-1] / w[1:]
    for cut in np.flatnonzero(drops >= GAP):
        heavy, rest = pairs.iloc[: cut + 1], pairs.iloc[cut + 1 :]
        groups = host_sets(list(zip(heavy["a"], heavy["b"])))
        if len(groups) < 2 or min(len(g) for g in groups) < 2:
            continue
        later = np.flatnonzero(drops[cut + 1 :] >= GAP)
        light = rest.iloc[: later[0] + 1] if len(later) else rest
        links = _links(light, groups)
        if links is None:
            continue
        margin = min(float(drops[cut]), float(drops[cut + 1 + later[0]]) if len(later) else np.inf)
        confidence = float(np.clip(0.5 + 0.5 * (min(margin, 2 * GAP) - GAP) / GAP, 0.5, 1.0))
        out: list[Group] = []
        for g in groups:
            inner = [(s, d) for (s, d) in directed if s in g and d in g and directed[(s, d)] > 0]
            out.append(
                Group(
                    kind="data_parallel",
                    hosts=sorted(g),
                    edges=[[s, d] for s, d in sorted(inner)],
                    bytes=sum(carried[e] for e in inner),
                )
            )
        for i, j, hosts in links:
            both = sorted([(a, b) for a, b in hosts] + [(b, a) for a, b in hosts])
            out.append(
                Group(
                    kind="pipeline",
                    hosts=sorted({h for pair in hosts for h in pair}),
                    edges=[[s, d] for s, d in both],
                    bytes=sum(carried.get(e, 0) for e in both),
                    between=[i, j],
                )
            )
        evidence = {
            "drop_to_pipeline_links": round(float(drops[cut]), 3),
            "drop_below_pipeline_links": round(float(drops[cut + 1 + later[0]]), 3) if len(later) else None,
        }
        return {"groups": out, "confidence": round(confidence, 3), "evidence": evidence}
    return None


def ring_sends(flows: pd.DataFrame, groups: list[Group]) -> dict[tuple[str, ...], int]:
    """Per data-parallel group (by its hosts), the connections on its edges that carry its ring: one per rank whose
    ring successor is on another host (FLOWS: src_host, dst_host, sport, dport, bytes, a connection once per view).

    Why counted: only those ring edges are on the wire. Two ranks per host placed host by host send one heavy
    connection per host, and the group's edges carry 2 x 2(W_g-1)/W_g x S_g for a group of 4 ranks on 2 hosts, not
    2(W_g-1) x S_g; read as 2 ranks, S_g came out 1.5x (6.0 MB for 4.0)."""
    out: dict[tuple[str, ...], int] = {}
    if flows.empty:
        return out
    one = flows.drop_duplicates(["src_host", "dst_host", "sport", "dport"])
    pair = one["src_host"].astype(str) + "\0" + one["dst_host"].astype(str)
    for g in groups:
        if g.kind != "data_parallel":
            continue
        on = one[pair.isin([f"{s}\0{d}" for s, d in g.edges]).to_numpy()]
        if len(on):
            out[tuple(g.hosts)] = int((on["bytes"] >= HEAVY_SEND * on["bytes"].max()).sum())
    return out


def per_iteration_bytes(
    groups: list[Group],
    per_it: list[IterationRecord],
    ranks_per_host: Optional[dict[str, int]],
    confidence: float,
    ranks_sure: bool,
    sends: Optional[dict[tuple[str, ...], int]] = None,
) -> None:
    """Fill each group's bytes per iteration and its theory, as sure as CONFIDENCE (a data-parallel group's, which
    counts W_g, half sure at most unless RANKS_SURE): a data-parallel group of W_g ranks all-reduces its stage's
    S_g, each ring edge carrying 2(W_g-1)/W_g x S_g, and SENDS of those edges cross hosts (ring_sends; every
    edge where not counted); a pipeline boundary's bytes per link per direction are its activations (or their
    gradients) times the micro-batches.

    Bytes per iteration are the group's bytes over the whole capture over the count. Why not per window: the
    windows are cut at the heaviest group's pauses, and a boundary's bursts fall in those pauses, so a cut splits
    them between iterations unevenly (whole bursts of 45 kB moved between windows on a live capture: a median
    3.4 % high, a mean over the interior windows 2.2 %). Set-up and teardown on the group's edges count too: where
    the whole-capture figure and the interior windows' mean differ by more than SPREAD, it is unsure."""
    inner = per_it[1:-1] if len(per_it) >= 4 else per_it
    if not inner:
        return
    for g in groups:
        keys = [f"{s}->{d}" for s, d in g.edges]
        windows = float(np.mean([sum(it.bytes_by_edge.get(k, 0) for k in keys) for it in inner]))
        bpi = g.bytes / len(per_it)
        g.bytes_per_iteration = round(bpi, 1)
        dp = g.kind == "data_parallel"
        if dp:
            w = sum((ranks_per_host or {}).get(h, 1) for h in g.hosts)
            crossing = min((sends or {}).get(tuple(g.hosts), w), w) or w
            g.implied_bytes = round(bpi * w / (2 * (w - 1) * crossing), 1) if w > 1 else None
            g.formula = (
                f"the stage's gradients all-reduced over W_g = {w} ranks: 2(W_g-1)/W_g x S_g on each of its "
                f"{crossing} ring edges between hosts"
            )
        else:
            g.implied_bytes = round(bpi / max(1, len(keys)), 1)
            g.formula = "activations forward and their gradients back: bytes per link per direction per iteration"
        sure = confidence if windows and abs(bpi / windows - 1) <= SPREAD else min(confidence, 0.5)
        g.confidence = round(min(sure, 0.5) if dp and not ranks_sure else sure, 3)

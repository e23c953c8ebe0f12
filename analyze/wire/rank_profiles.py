"""The ranks' own timing, from the profiler traces given beside the captures, set against who the packets say was
late (analyze.wire.stragglers).

Why: the packets infer a rank's entry into the collective from when its edges begin to send; a rank's own profile
(torch.profiler's Kineto trace, `--trace-beside`) records when it called the collective. Per step, a rank's entry is
its first collective call (a `c10d::` operator, or a backend's `gloo:` / `nccl:` event) after its previous
optimizer step; its lag is that entry less the median of the other ranks' entries of the same step, on a common
clock (the hosts' offsets the packets gave). A rank late in MOST of the steps by the stragglers' threshold or more
is late in its profile. Each compute straggler then says whether the profile agrees (its rank's median lag within
AGREE of its lost time, or two bins); a disagreement, either way, lowers it to half sure and is said.

The same calls time the backward pass for the what-if (analyze.whatif.wire_replay): in a data-parallel step the
collective calls are the buckets' hand-offs, so a step's last call less its first is how long the backward ran
after the first bucket was ready, which the wire cannot see where the link was busy all through (a DDP comm hook
recording the hand-offs agreed with these calls within 0.3 ms).

Ranks are placed on hosts by the launch order (rank r on its r-th host, one rank per host); without it the profiles
cannot be placed and the result says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from bisect import bisect_left, bisect_right
from functools import lru_cache
from typing import Sequence

import numpy as np

from analyze.read.trace_file import read_trace
from analyze.model.result import Result
from capture.layout import RunManifest
from analyze.wire.stragglers import LATE_BINS, LATE_SHARE, MOST

__all__ = ["RankEntries", "read_entries", "check_with_profiles", "backward_spans"]

COLLECTIVE = re.compile(r"^(c10d::|gloo:|nccl:)")
ALL_REDUCE = re.compile(r"^(c10d::allreduce|gloo:all_reduce|nccl:all_reduce)")
STEP = "Optimizer.step"  # the optimizer step's record_function name begins so (torch.optim)
AGREE = 0.2  # a profile's lag within this share of the packets' lost time (or two bins) agrees with it


@dataclass
class RankEntries:
    """One rank's first collective call of each step (ns on its host's wall clock), from its profile, and per
    step its last all-reduce call less its first (ns)."""

    rank: int
    entries: list[int]
    spans: list[int]


def read_entries(path: Path) -> RankEntries | str:
    """The rank's entries from its Kineto trace, or why it holds none (a trace of one process, no collective calls).
    ValueError (one line, naming the file) when it is no trace at all. The what-if and the straggler check read
    the same traces: each is parsed once while it stays the same file (path, size and change time)."""
    try:
        stat = Path(path).stat()
    except OSError:
        return _read_entries(Path(path), -1, -1)  # read_trace names the file and the cause
    return _read_entries(Path(path), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=256)
def _read_entries(path: Path, _size: int, _mtime_ns: int) -> RankEntries | str:
    """read_entries, once per version of the file."""
    doc = read_trace(path)
    rank = (doc.get("distributedInfo") or {}).get("rank")
    if not isinstance(rank, int):
        return f"{path}: no distributedInfo.rank, not a profile of one rank of a distributed job"
    base = int(doc.get("baseTimeNanoseconds") or 0)
    calls: list[int] = []
    reduces: list[int] = []  # the all-reduces alone: DDP's buckets (not its buffers' broadcast before forward)
    steps: list[int] = []
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
            continue
        name = str(e.get("name", ""))
        if COLLECTIVE.match(name):
            calls.append(base + round(float(e["ts"]) * 1000))
            if ALL_REDUCE.match(name):
                reduces.append(calls[-1])
        elif name.startswith(STEP):
            steps.append(base + round((float(e["ts"]) + float(e.get("dur", 0))) * 1000))
    if not calls or not steps:
        return f"{path}: no collective calls or optimizer steps in the profile"
    calls.sort()
    reduces.sort()
    entries = [first for first, _ in _per_step(calls, sorted(steps))]
    spans = [last - first for first, last in _per_step(reduces, sorted(steps))]
    return RankEntries(rank, entries, spans)


def _per_step(times: list[int], step_ends: list[int]) -> list[tuple[int, int]]:
    """The first and last of TIMES (sorted) in each step: after one optimizer step's end, before the next (the
    last step: to the last time)."""
    out = []
    after = -1
    for end in step_ends + ([times[-1] + 1] if times else []):
        i, j = bisect_right(times, after), bisect_left(times, end)
        if i < j:
            out.append((times[i], times[j - 1]))
        after = end
    return out


def backward_spans(profiles: Sequence[Path]) -> list[float]:
    """Per rank and step, seconds from its first all-reduce call to its last (the first step of each rank left
    out: DDP rebuilds its buckets and broadcasts there); empty without profiles that hold steps."""
    read = [read_entries(p) for p in profiles]
    return [span / 1e9 for r in read if isinstance(r, RankEntries) for span in r.spans[1:]]


def check_with_profiles(result: Result, profiles: Sequence[Path]) -> None:
    """Set each compute straggler's agreement with the ranks' profiles, and say what the profiles show that the
    packets did not. ValueError (one line) for a file that is no trace."""
    if not profiles or result.stragglers is None or result.iterations is None or not result.iterations.period_ns:
        return
    order = RunManifest(result.run).launch_order
    per_host = result.iterations.ranks_per_host or {}
    read = [read_entries(p) for p in profiles]
    ranks = [r for r in read if isinstance(r, RankEntries)]
    result.assumptions += [f"{r}: not checked against the stragglers" for r in read if isinstance(r, str)]
    if not ranks:
        return
    if not order or any(per_host.get(h, 1) != 1 for h in order) or any(r.rank >= len(order) for r in ranks):
        result.assumptions.append(
            "the profiles given beside the captures cannot be placed on hosts (no launch order with one rank per "
            "host): the stragglers are not checked against them"
        )
        return
    offsets = {h.name: h.offset_ns or 0 for h in (result.clock.hosts if result.clock else [])}
    late_ns = max(LATE_SHARE * float(result.iterations.period_ns), LATE_BINS * float(result.bin_ns))
    lags = _lags({order[r.rank]: [t - offsets.get(order[r.rank], 0) for t in r.entries] for r in ranks})
    named = {s.host: s for s in result.stragglers if s.kind == "compute"}
    for host, s in named.items():
        lag = lags.get(host)
        if lag is None:
            continue
        rank = order.index(host)
        if abs(lag - s.lost_ns_per_iteration) <= max(AGREE * s.lost_ns_per_iteration, 2 * float(result.bin_ns)):
            s.evidence.append(
                f"the ranks' profiles agree: rank {rank}'s first collective call of a step comes {lag / 1e6:.0f} ms "
                "after the others' (median)"
            )
        else:
            s.evidence.append(
                f"DISAGREEMENT: rank {rank}'s profile has its first collective call of a step {lag / 1e6:.0f} ms "
                f"after the others' (median), the packets {s.lost_ns_per_iteration / 1e6:.0f} ms"
            )
            s.confidence = min(s.confidence, 0.5)
    for host, lag in sorted(lags.items()):
        if lag >= late_ns and host not in named:
            result.warnings.append(
                f"DISAGREEMENT: rank {order.index(host)}'s profile has it entering the collective {lag / 1e6:.0f} ms "
                f"after the others (median) on {host}, which the packets did not name a straggler"
            )


def _lags(entries: dict[str, list[int]]) -> dict[str, float]:
    """Per host, its median lag over the steps it is late in, where that is MOST of them (else its median lag)."""
    steps = min((len(v) for v in entries.values()), default=0)
    if steps < 2 or len(entries) < 2:
        return {}
    hosts = sorted(entries)
    grid = np.array([entries[h][:steps] for h in hosts], dtype=np.float64)[:, 1:]  # the first step warms up
    out: dict[str, float] = {}
    for i, h in enumerate(hosts):
        lag = grid[i] - np.median(np.delete(grid, i, axis=0), axis=0)
        late = lag > 0
        out[h] = float(np.median(lag[late])) if late.mean() >= MOST else float(np.median(lag))
    return out

"""Read the ring and tree NCCL states in its NCCL_DEBUG=INFO output, to cross-check the packet ring.

NCCL says which ring it built, but not which socket carries it; packets say which sockets carried data,
but not why. When both agree the ring is certain; when they differ, a host list or NCCL_SOCKET_IFNAME
is usually wrong. Both log generations are read:

- old (2.4):  ``Channel 00 :    0   1   2   3``, ``Ring 00 : 3 -> 4 [send] via NET/Socket/0``,
  ``Ring 00 : 5[1] -> 6[2] via P2P/IPC``, ``Trees [0] -1->0->1/4/-1`` (parent->rank->children)
- new (2.7+): ``Channel 00/02 :    0   1   2``, ``Channel 00/0 : 3[3] -> 4[0] [send] via NET/Socket/0``,
  ``Trees [0] 1/-1/-1->0->-1`` (children->rank->parent)

Ranks are tied to hosts by the line prefix (``host:pid:tid [dev]``, plus mpirun's ``[1,R]<stdout>:``) and
the ``comm 0x.. rank R nranks N`` lines; the ``Bootstrap : Using [0]ens3:172.31.89.192<0>`` lines give each
host's address, which is how log hosts are matched to captured hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from analyze.model.findings import NcclComparison, NcclNetEdge

_PREFIX = re.compile(
    r"(?:\[\d+,(?P<mpirank>\d+)\]<std(?:out|err)>:)?(?P<host>[\w.\-]+):(?P<pid>\d+):\d+ \[\d+\] NCCL INFO "
)
_CHANNEL = re.compile(r"(?:Channel|Ring) (?P<ch>\d+)(?:/\d+)? :(?P<ranks>(?:\s+\d+)+)\s*$")
_EDGE = re.compile(
    r"(?:Channel|Ring) (?P<ch>\d+)(?:/\d+)? : (?P<src>\d+)(?:\[\w+\])? -> (?P<dst>\d+)(?:\[\w+\])?"
    r"(?: \[(?P<kind>send|receive)\])? via (?P<via>\S+)"
)
_TREES = re.compile(r"Trees((?: \[\d+\] \S+)+)")
_TREE_ONE = re.compile(r"\[(\d+)\] (\S+)")
_COMM = re.compile(r"comm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+)")
_BOOT = re.compile(r"(?:Bootstrap|NET/Socket) : Using \[\d+\]\w+:(?P<addr>[0-9a-fA-F.:]+)<")
_SOCKETS = re.compile(r"NET/Socket: Using (?P<threads>\d+) threads and (?P<socks>\d+) sockets per thread")


@dataclass
class NcclLog:
    """What one NCCL_DEBUG=INFO log states about the communicator."""

    nranks: Optional[int] = None
    rings: dict[int, list[int]] = field(default_factory=dict)  # channel -> rank order
    edges: list[dict[str, Any]] = field(default_factory=list)  # {channel, src, dst, via, kind}
    trees: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)  # tree -> rank -> {parent, children}
    rank_host: dict[int, str] = field(default_factory=dict)
    host_address: dict[str, str] = field(default_factory=dict)
    sockets_per_peer: Optional[int] = None

    def host_of(self, rank: int) -> str:
        """The host a rank ran on, as its address when the log gave one (else the log's host name)."""
        host = self.rank_host.get(rank, f"rank{rank}")
        return self.host_address.get(host, host)

    def host_ring(self, channel: Optional[int] = None) -> list[str]:
        """A channel's ring collapsed to hosts: the order the ring visits servers (GPUs of one server merged)."""
        if not self.rings:
            return []
        ranks = self.rings[min(self.rings) if channel is None else channel]
        hosts = [self.host_of(r) for r in ranks]
        out = [h for i, h in enumerate(hosts) if i == 0 or h != hosts[i - 1]]
        while len(out) > 1 and out[-1] == out[0]:
            out.pop()
        return out

    def ranks_per_host(self) -> int:
        """The most ranks any one host ran (1 when unknown)."""
        counts: dict[str, int] = {}
        for h in self.rank_host.values():
            counts[h] = counts.get(h, 0) + 1
        return max(counts.values(), default=1)


def parse_nccl_log(text: str) -> NcclLog:
    """Parse the INFO lines of a (possibly interleaved, mpirun-prefixed) NCCL log."""
    log = NcclLog()
    pid_rank: dict[tuple[str, str], int] = {}
    pending: list[tuple[str, str, str]] = []  # (host, pid, trees text) until the pid's rank is known
    for line in text.splitlines():
        m = _PREFIX.search(line)
        if not m:
            continue
        host, pid, body = m["host"], m["pid"], line[m.end() :]
        if m["mpirank"] is not None:
            pid_rank.setdefault((host, pid), int(m["mpirank"]))
        if c := _COMM.search(body):
            pid_rank[(host, pid)] = int(c["rank"])
            log.nranks = int(c["nranks"])
        if b := _BOOT.search(body):
            log.host_address.setdefault(host, b["addr"])
        if s := _SOCKETS.search(body):
            log.sockets_per_peer = int(s["threads"]) * int(s["socks"])
        if e := _EDGE.search(body):
            log.edges.append(
                {
                    "channel": int(e["ch"]),
                    "src": int(e["src"]),
                    "dst": int(e["dst"]),
                    "via": e["via"],
                    "kind": e["kind"],
                }
            )
        elif ch := _CHANNEL.search(body):
            log.rings.setdefault(int(ch["ch"]), [int(x) for x in ch["ranks"].split()])
        if t := _TREES.search(body):
            pending.append((host, pid, t.group(1)))
    for (host, pid), rank in pid_rank.items():
        log.rank_host[rank] = host
    for host, pid, text in pending:
        known = pid_rank.get((host, pid))
        if known is not None:
            for tree, spec in _TREE_ONE.findall(text):
                log.trees.setdefault(int(tree), {})[known] = _tree_links(spec, known)
    if log.nranks is None and log.rings:
        log.nranks = max(len(r) for r in log.rings.values())
    return log


def _tree_links(spec: str, rank: int) -> dict[str, Any]:
    """One rank's tree links: old 'up->rank->d0/d1/d2' or new 'd0/d1/d2->rank->up'."""
    parts = spec.split("->")
    if len(parts) != 3:
        return {"parent": None, "children": []}
    left, _, right = parts
    if "/" in right or ("/" not in left and "/" not in right):
        up, downs = left, right
    else:
        up, downs = right, left
    children = [int(x) for x in downs.split("/") if x.lstrip("-").isdigit() and int(x) >= 0]
    parent = int(up) if up.lstrip("-").isdigit() and int(up) >= 0 else None
    return {"parent": parent, "children": children}


def read_nccl_log(path: Path) -> NcclLog:
    """Read and parse a log file (undecodable bytes replaced: logs mix progress bars and binary noise)."""
    return parse_nccl_log(Path(path).read_text(errors="replace"))


def compare_rings(log: NcclLog, packet_order: Sequence[str], addr_host: dict[str, str]) -> NcclComparison:
    """Compare the log's host ring with the packet ring (same cycle and direction, any rotation)."""
    net = sorted({(e["src"], e["dst"]) for e in log.edges if e["via"].startswith("NET")})
    host_ring = [addr_host.get(h, h) for h in log.host_ring()]
    matches = None
    if host_ring and packet_order:
        ring = list(packet_order)
        matches = (
            len(ring) == len(host_ring)
            and ring[0] in host_ring
            and (host_ring[host_ring.index(ring[0]) :] + host_ring[: host_ring.index(ring[0])] == ring)
        )
    return NcclComparison(
        nranks=log.nranks,
        rings={str(k): v for k, v in sorted(log.rings.items())},
        host_ring=host_ring,
        net_edges=[
            NcclNetEdge(
                src=s,
                dst=d,
                src_host=addr_host.get(log.host_of(s), log.host_of(s)),
                dst_host=addr_host.get(log.host_of(d), log.host_of(d)),
            )
            for s, d in net
        ],
        sockets_per_peer=log.sockets_per_peer,
        ranks_per_host=log.ranks_per_host(),
        matches=matches,
    )


__all__ = ["NcclLog", "parse_nccl_log", "read_nccl_log", "compare_rings"]

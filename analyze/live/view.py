"""What a running capture shows so far: per host its tx/rx rate against its link, the heaviest ring edges and the
iterations its ranks have finished (from markers, else found in the ring edges' bytes, with how sure that is), from
the capture folders as tcpdump and the markers grow.

Why from the folders: the agents already write them, so a live view costs the training hosts nothing more; each
poll reads only the bytes written since the last (analyze.read.scan.Follow) and the markers' new lines.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import pandas as pd

from analyze.tables.flows import address_key, address_text, key_ports, local_mask, proto_name
from analyze.live.now import HEAVY_EDGE, HostNow, JobNow, Now
from analyze.read import layouts as L
from analyze.read.formats import is_capture
from analyze.read.scan import Follow
from analyze.confidence.thresholds import CONFIDENT
from analyze.collective.jobs import split_jobs
from analyze.collective.staircase import EdgeSeries, Staircase, infer
from capture import layout

BIN_NS = 10_000_000  # the bins the ring edges' series are kept in, as analyze's default
# Without markers, iterations are found in the ring edges' bytes (analyze.collective.staircase, as analyze does):
# that costs more than a poll and grows with the run, so it is redone every TRAFFIC_EVERY_S, or TRAFFIC_SHARE times
# as long as the last search took when that is longer (a 20th of a core at most), and at the last poll.
# Edges under HEAVY_EDGE of the heaviest one's bytes (control traffic, ACKs) are left out, as the topology leaves
# out light edges.
TRAFFIC_EVERY_S = 5.0
TRAFFIC_SHARE = 20.0


@dataclass
class _Host:
    name: str
    folder: Path
    link_speed_bps: Optional[float]
    own: list[tuple[int, int]]
    follow: Follow
    sent: np.ndarray = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64)
    )  # per flow row, IP bytes at the last poll
    tx: int = 0
    rx: int = 0
    markers_at: int = 0  # bytes of markers.jsonl read
    last_iteration: int = -1
    last_iteration_ns: Optional[int] = None  # its length, as its rank recorded it
    # (peer, flow row): (bins, bytes) parts, a flow's own so that a capture's jobs can be told apart
    edges: dict[tuple[str, int], list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    keys: np.ndarray = field(default_factory=lambda: np.zeros((0, 5), dtype=np.uint64))  # flow rows at the last poll


class LiveRun:
    """The hosts' capture folders (each with the agent's meta.json and its growing pcap files), polled in turn."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders
        self._hosts = [_host(f) for f in folders]
        self._owner = {a: h.name for h in self._hosts for a in h.own}
        self._index = {h.name: i for i, h in enumerate(self._hosts)}
        self._start = self._last = time.monotonic()
        self._polls = 0
        self._stairs: list[Staircase] = []  # per job, heaviest first (one where the traffic is one job)
        self._jobs_hosts: list[int] = []
        self._stairs_at = self._start
        self._stairs_every = TRAFFIC_EVERY_S

    def poll(self, final: bool = False) -> Now:
        """Read what was written since the last poll; the run as it stands (FINAL: the last poll, whose
        iterations are found anew whenever they were last)."""
        now = time.monotonic()
        span = max(now - self._last, 1e-3)
        self._last = now
        hosts: list[HostNow] = []
        edges: dict[tuple[str, str], float] = {}
        sent: dict[tuple[str, str], int] = {}
        for h in self._hosts:
            cells = h.follow.poll([p for p in sorted(h.folder.iterdir()) if _is_pcap(p)])
            keys, nbytes = h.follow.flows()
            delta = nbytes.copy()  # a flow keeps its row in the table between polls; new flows come last
            delta[: len(h.sent)] -= h.sent
            h.sent, h.keys = nbytes, keys
            tx, rx = local_mask(keys, h.own, src=True), local_mask(keys, h.own, src=False)
            h.tx, h.rx = int(nbytes[tx].sum()), int(nbytes[rx].sum())
            packets, resent = h.follow.counts()
            host = HostNow(h.name, h.link_speed_bps, h.tx, h.rx, None, None, int(packets.sum()), int(resent[tx].sum()))
            _read_health(h, host)
            if self._polls:  # the first poll reads the backlog: no rate yet
                host.tx_bps, host.rx_bps = float(delta[tx].sum()) * 8 / span, float(delta[rx].sum()) * 8 / span
            hosts.append(host)
            peers = np.full(len(keys), -1, dtype=np.int64)  # per flow row: the peer it sends to, by index
            for row, k, d, b in zip(np.flatnonzero(tx).tolist(), keys[tx].tolist(), delta[tx], nbytes[tx].tolist()):
                peer = self._owner.get((k[2], k[3]))
                if peer and peer != h.name:
                    peers[row] = self._index[peer]
                    sent[(h.name, peer)] = sent.get((h.name, peer), 0) + int(b)
                    if self._polls and d > 0:
                        edges[(h.name, peer)] = edges.get((h.name, peer), 0.0) + float(d) * 8 / span
            _keep_edge_cells(h, cells, peers, self._hosts)
            _read_markers(h)
        self._polls += 1
        ranked = sorted(((a, b, v) for (a, b), v in edges.items()), key=lambda e: -e[2])
        heaviest = max(sent.values(), default=0)
        carried = sorted(((a, b, v) for (a, b), v in sent.items() if v >= HEAVY_EDGE * heaviest), key=lambda e: -e[2])
        seen = Now(now - self._start, hosts, ranked, None, edge_bytes=carried)
        last = max(self._hosts, key=lambda h: h.last_iteration)
        if last.last_iteration >= 0:
            seen.iterations, seen.iterations_source = last.last_iteration + 1, "markers"
            seen.iterations_confidence, seen.iterations_sure = 1.0, True
            seen.last_iteration_s = None if last.last_iteration_ns is None else last.last_iteration_ns / 1e9
            return seen
        if final or now - self._stairs_at >= self._stairs_every:
            job_of = _jobs(self._hosts)
            self._stairs = [
                infer(_edge_series(self._hosts, job_of, j), BIN_NS) for j in range(max(job_of.values(), default=0) + 1)
            ]
            self._jobs_hosts = [len({h for (h, _), k in job_of.items() if k == j}) for j in range(len(self._stairs))]
            self._stairs_at = now
            self._stairs_every = max(TRAFFIC_EVERY_S, TRAFFIC_SHARE * (time.monotonic() - now))
        stairs = self._stairs[0] if self._stairs else None
        if len(self._stairs) > 1:
            seen.jobs = [
                JobNow(
                    f"job {j + 1}",
                    n,
                    st.count or None,
                    round(st.confidence, 2) if st.count else None,
                    bool(st.count) and st.confidence >= CONFIDENT,
                )
                for j, (st, n) in enumerate(zip(self._stairs, self._jobs_hosts))
            ]
        if stairs is None or not stairs.count:
            return seen
        seen.iterations, seen.iterations_source = stairs.count, "traffic"
        seen.iterations_confidence = round(stairs.confidence, 2)
        seen.iterations_sure = stairs.confidence >= CONFIDENT
        seen.last_iteration_s, seen.last_iteration_bytes = _last_iteration(stairs)
        return seen


def _last_iteration(stairs: Staircase) -> tuple[Optional[float], dict[str, int]]:
    """The last iteration found in the traffic: its length (the median over the edges, each on its own clock)
    and what each host sent in it."""
    spans = [float(e.cut_ns[-1] - e.cut_ns[-2]) for e in stairs.edges if len(e.cut_ns) >= 2]
    sent: dict[str, int] = {}
    for e in stairs.edges:
        if len(e.bytes_per_iteration):
            sent[e.src] = sent.get(e.src, 0) + int(e.bytes_per_iteration[-1])
    return (float(np.median(spans)) / 1e9 if spans else None), sent


def _read_health(h: _Host, host: HostNow) -> None:
    """The agent's status and, once it stopped, tcpdump's drops and the packets lost at the end (meta.json)."""
    try:
        meta = layout.read_meta(h.folder / layout.META_FILE)
    except layout.LayoutError:  # being rewritten by the agent, or not there yet: the next poll reads it
        return
    host.status = meta.status
    drops = (meta.counters or {}).get("dropped_by_kernel")
    host.kernel_drops = int(drops) if isinstance(drops, int) else None
    host.lost_packets = meta.lost_packets


def _keep_edge_cells(
    h: _Host, cells: tuple[np.ndarray, np.ndarray, np.ndarray], peers: np.ndarray, hosts: list[_Host]
) -> None:
    """File the series cells of H's flows to other hosts under their peer and flow row."""
    flow, bins, nbytes = cells
    keep = peers[flow] >= 0 if len(flow) else np.zeros(0, bool)
    if not keep.any():
        return
    flow, bins, nbytes = flow[keep], bins[keep], nbytes[keep]
    order = np.argsort(flow, kind="stable")
    cuts = np.flatnonzero(np.r_[True, flow[order][1:] != flow[order][:-1], True])
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        rows = order[lo:hi]
        row = int(flow[rows[0]])
        h.edges.setdefault((hosts[int(peers[row])].name, row), []).append((bins[rows], nbytes[rows]))


def _jobs(hosts: list[_Host]) -> dict[tuple[str, int], int]:
    """Each (host, flow row) sent to another captured host: its job (0 the heaviest; analyze.collective.jobs),
    or -1 for other traffic. All 0 where the traffic is one job."""
    rows = []
    for h in hosts:
        starts, opened = h.follow.openings()
        for (peer, row), parts in h.edges.items():
            k = h.keys[row]
            rows.append(
                (
                    h.name,
                    row,
                    address_text(int(k[0]), int(k[1])),
                    address_text(int(k[2]), int(k[3])),
                    h.name,
                    peer,
                    *(int(x[0]) for x in key_ports(k[4:5])[:2]),
                    proto_name(int(k[4] & np.uint64(0xFF))),
                    int(sum(float(v.sum()) for _, v in parts)),
                    int(starts[row]),
                    bool(opened[row]),
                )
            )
    if not rows:
        return {}
    cols = [
        "host",
        "row",
        "src",
        "dst",
        "src_host",
        "dst_host",
        "sport",
        "dport",
        "proto",
        "bytes",
        "start_ns",
        "opened",
    ]
    flows = pd.DataFrame(rows, columns=cols)
    split = split_jobs(flows, flows.assign(inferred=False))
    return {(h, r): int(j) for h, r, j in zip(flows["host"], flows["row"], split.flow_job)}


def _edge_series(hosts: list[_Host], job_of: dict[tuple[str, int], int], job: int) -> list[EdgeSeries]:
    """Each host's edges to its peers in JOB as bytes per bin, on its own clock, the light ones left out; the
    parts kept per flow are summed into one per distinct bin, so memory grows with the bins that held bytes."""
    out = []
    for h in hosts:
        per_peer: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for (peer, row), parts in h.edges.items():
            if len(parts) > 1:
                h.edges[(peer, row)] = parts = [_summed(parts)]
            if job_of.get((h.name, row), 0) == job:
                per_peer.setdefault(peer, []).extend(parts)
        for peer, parts in per_peer.items():
            bins, nbytes = _summed(parts)
            out.append(EdgeSeries(h.name, peer, h.name, bins * BIN_NS, nbytes))
    heaviest = max((float(e.nbytes.sum()) for e in out), default=0.0)
    return [e for e in out if float(e.nbytes.sum()) >= HEAVY_EDGE * heaviest > 0]


def _summed(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(bins, bytes) parts as one: each distinct bin once, its bytes summed."""
    bins, inverse = np.unique(np.concatenate([b for b, _ in parts]), return_inverse=True)
    return bins, np.bincount(inverse, weights=np.concatenate([v for _, v in parts]).astype(np.float64))


def _host(folder: Path) -> _Host:
    meta_path = folder / layout.META_FILE
    meta = layout.read_meta(meta_path) if meta_path.is_file() else layout.HostMeta({})
    addresses = layout.peer_addresses(meta) or {a.split("/")[0] for a in meta.addresses}
    own = [address_key(a) for a in sorted(addresses)]
    return _Host(
        name=meta.host or folder.name,
        folder=folder,
        link_speed_bps=meta.link_speed_bps,
        own=own,
        follow=Follow(bin_ns=BIN_NS, byte_mode=L.BYTE_MODES["ip"]),
    )


def _is_pcap(path: Path) -> bool:
    return path.is_file() and path.suffix not in (".json", ".jsonl") and is_capture(path)


def _read_markers(h: _Host) -> None:
    """The markers' whole new lines since the last poll (a line being written waits)."""
    path = h.folder / layout.MARKERS_FILE
    try:
        with open(path, "rb") as fh:
            fh.seek(h.markers_at)
            chunk = fh.read()
    except OSError:
        return
    whole = chunk[: chunk.rfind(b"\n") + 1]
    h.markers_at += len(whole)
    for line in whole.splitlines():
        try:
            record = json.loads(line)
            iteration = int(record["iteration"])
        except (ValueError, KeyError, TypeError):
            continue
        if iteration > h.last_iteration:
            h.last_iteration = iteration
            start, end = record.get("start_ns"), record.get("end_ns")
            h.last_iteration_ns = end - start if isinstance(start, int) and isinstance(end, int) else None


def host_folders(paths: list[Path]) -> list[Path]:
    """The host capture folders behind PATHS: a host folder (its meta.json), a run folder (its hosts' folders,
    gathered or, while `capture run` is still capturing, the agents' staging folders when they are on this
    machine), or a folder of host folders. ValueError when none is found, saying why."""
    found: list[Path] = []
    for path in paths:
        if (path / layout.META_FILE).is_file():
            found.append(path)
        elif (path / layout.RUN_FILE).is_file():
            found += _run_hosts(path)
        else:
            inner = sorted(d for d in path.iterdir() if (d / layout.META_FILE).is_file()) if path.is_dir() else []
            if not inner:
                raise ValueError(f"{path}: no capture folder here (a host folder with meta.json, or a run folder)")
            found += inner
    return found


def _run_hosts(run: Path) -> list[Path]:
    manifest = layout.read_json(run / layout.RUN_FILE)
    hosts = [str(h) for h in manifest.get("hosts") or []]
    gathered = [run / h for h in hosts if (run / h / layout.META_FILE).is_file()]
    if hosts and len(gathered) == len(hosts):
        return gathered
    template = str(manifest.get("markers_dir") or "")
    staged = [Path(template.replace("{host}", h)) for h in hosts]
    if template and staged and all((d / layout.META_FILE).is_file() for d in staged):
        return staged
    raise ValueError(
        f"{run}: the hosts' capture folders are not on this machine yet (staged on each host while capturing): "
        f"run `ringscope capture top FOLDER` where a host's folder is"
    )


def open_live(folders: list[Path], interval: float) -> LiveRun:
    """The running capture in FOLDERS, ready to poll every INTERVAL seconds; ValueError (one line) for a bad
    interval or folders that hold no capture."""
    if interval <= 0:
        raise ValueError(f"bad --interval {interval}: must be more than 0")
    try:
        return LiveRun(host_folders(folders))
    except OSError as exc:
        raise ValueError(str(exc)) from None


def follow(live: LiveRun, interval: float, seconds: Optional[float], show: Callable[[Now, bool], None]) -> None:
    """`ringscope capture top`'s loop: poll every INTERVAL seconds and SHOW each poll (and whether it is the last),
    until SECONDS have passed or SIGINT/SIGTERM arrives; then poll once more (what was written meanwhile) and stop."""
    stopping: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda number, _frame: stopping.append(number))
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        until = time.monotonic() + interval
        while time.monotonic() < until and not stopping and (deadline is None or time.monotonic() < deadline):
            time.sleep(min(0.05, interval))
        last = bool(stopping) or (deadline is not None and time.monotonic() >= deadline)
        show(live.poll(final=last), last)
        if last:
            return

"""NCCL's own traffic beside the data: RAS keep-alives, told apart and read for hung or dead ranks (issue 47).

Why: NCCL from 2.24 runs RAS, one thread per process that keeps a TCP connection to its neighbours in a ring of
all the job's processes (sorted by address, so a host's processes sit together and only its two ends cross the
network) on the bootstrap interface. While a connection is idle each end sends one 60-byte keep-alive a second
(NCCL src/ras: RAS_KEEPALIVE_INTERVAL, a 4-byte length and a 56-byte body). It is not training traffic, and read
as such it is a tiny TCP ring that could pass for an all-reduce. Read as what it is, it tells what the data cannot
when the data moves over RDMA the capture does not see: a process that stopped talking. RAS itself warns after
5 s without a keep-alive, closes the connection and retries it every second after 20 s, and declares the peer
dead after 60 s; a silence is named by the longest of these it reached.

A connection is RAS's when, over at least MIN_SPAN_NS, its payload comes in MESSAGE-byte messages at about one a
second in each direction: payload / MESSAGE messages PER_SECOND, and that payload over the bins that hold a
message within SIZE_SLACK of MESSAGE (PyTorch's TCP store, also a message a second, sends other sizes).
The processes per host cannot be counted from it: same-host neighbours talk over loopback, which a NIC's capture
does not hold (NCCL's bootstrap counts them: analyze.collective.bootstrap).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from analyze.model.findings import KeepAlives, Silence
from analyze.model.result import Result
from analyze.tables.hosts import address_hosts, flow_hosts

MESSAGE = 60  # bytes of TCP payload in a keep-alive
PER_SECOND = (0.5, 1.5)  # keep-alives a second a direction: one while idle, a late one or a busy spell aside
MIN_SPAN_NS = 8_000_000_000  # the period needs a few of them to show
SILENCES = (
    (60.0, "declared dead by its peers (RAS: 60 s)"),
    (20.0, "its connections dropped and retried (RAS: 20 s)"),
    (5.0, "late enough for RAS to warn (5 s)"),
)
HEADER_SLACK = 48  # a cell holding a keep-alive has at least this much more than a bare ACK's headers
SIZE_SLACK = 4  # payload per message within this of MESSAGE (the connection's 12- and 16-byte greetings spread)


def find_keepalives(result: Result) -> tuple[Optional[KeepAlives], np.ndarray]:
    """The RAS keep-alive finding (None without any) and the flow ids of its connections, both directions, so
    the collective leaves them out."""
    tables = result.tables
    none = np.zeros(0, np.int64)
    if tables is None or tables.flows is None or tables.flows.empty:
        return None, none
    flows = tables.flows
    tcp = (flows["proto"] == "tcp").to_numpy()
    span = (flows["end_ns"] - flows["start_ns"]).to_numpy(np.float64)
    per_s = flows["payload_bytes"].to_numpy(np.float64) / MESSAGE / np.maximum(span / 1e9, 1e-9)
    talking = tcp & (span >= MIN_SPAN_NS) & (per_s >= PER_SECOND[0]) & (per_s <= PER_SECOND[1])
    if not talking.any():  # the common case, and the cheap one at thousands of hosts
        return None, none
    sends = _message_times(flows[talking], tables.flow_series)
    # each message its own: a store's or a launcher's chatter at one message a second has other sizes
    messages = flows["flow_id"].map({f: len(t) for f, t in sends.items()}).fillna(0).to_numpy(np.float64)
    talking &= np.abs(flows["payload_bytes"].to_numpy(np.float64) / np.maximum(messages, 1) - MESSAGE) <= SIZE_SLACK
    both = pd.Series(talking).groupby(_connection_keys(flows)).transform("sum").to_numpy() == 2  # each way
    chosen = flows[both & talking]
    if chosen.empty:
        return None, none
    ends = flow_hosts(flows, address_hosts(result.hosts))
    src = ends["src_host"].to_numpy()[both & talking]
    dst = ends["dst_host"].to_numpy()[both & talking]
    end_ns = int(chosen["end_ns"].max())
    silences = _silences(chosen["flow_id"].tolist(), src, dst, sends, end_ns, int(result.bin_ns))
    found = KeepAlives(
        connections=len(chosen) // 2,
        hosts=sorted({str(h) for h in np.concatenate([src, dst])}),
        messages=int(chosen["payload_bytes"].sum() // MESSAGE),
        silences=silences,
        notes=[
            "set apart from the collective: one 60-byte message a second each way (NCCL's RAS; the processes "
            "per host are not countable from it, as same-host neighbours talk over loopback)"
        ],
    )
    return found, chosen["flow_id"].to_numpy(np.int64)


def _message_times(flows: pd.DataFrame, series: pd.DataFrame) -> dict[int, np.ndarray]:
    """Per flow: the start of each bin that holds a message (more than a bare ACK's headers), in order."""
    header = (flows["bytes"] - flows["payload_bytes"]).to_numpy(np.float64) / flows["packets"].to_numpy()
    cells = series[series["flow_id"].isin(flows["flow_id"])]
    floor = dict(zip(flows["flow_id"].tolist(), (header + HEADER_SLACK).tolist()))
    cells = cells[cells["bytes"].to_numpy() >= cells["flow_id"].map(floor).to_numpy()]
    return {int(fid): np.sort(g["t_ns"].to_numpy(np.int64)) for fid, g in cells.groupby("flow_id")}


def _connection_keys(flows: pd.DataFrame) -> np.ndarray:
    """One key per TCP connection, the same for both directions."""
    a = flows["src"].astype(str) + ":" + flows["sport"].astype(str)
    b = flows["dst"].astype(str) + ":" + flows["dport"].astype(str)
    lo = np.where(a < b, a, b)
    hi = np.where(a < b, b, a)
    return pd.factorize(pd.Series(lo) + "|" + pd.Series(hi) + "|" + flows["proto"].astype(str).to_numpy())[0]


def _silences(
    ids: list[int], src: np.ndarray, dst: np.ndarray, sends: dict[int, np.ndarray], end_ns: int, bin_ns: int
) -> list[Silence]:
    """Per sending host: the stretches in which none of its keep-alive connections carried one, from 5 s on."""
    out = []
    for host in sorted({str(h) for h in src}):
        mine = [i for i, s in zip(ids, src) if str(s) == host]
        peers = sorted({str(d) for i, s, d in zip(ids, src, dst) if str(s) == host})
        times = np.unique(np.concatenate([sends.get(i, np.zeros(0, np.int64)) for i in mine]))
        if not len(times):
            continue
        after = np.concatenate([times[1:], [end_ns]])
        gaps = (after - times - bin_ns) / 1e9
        for k in np.flatnonzero(gaps >= SILENCES[-1][0]):
            seconds = float(gaps[k])
            meaning = next(text for limit, text in SILENCES if seconds >= limit)
            out.append(
                Silence(
                    host=host,
                    peers=peers,
                    start_ns=int(times[k]),
                    seconds=round(seconds, 1),
                    until_end=bool(k == len(times) - 1),
                    meaning=meaning,
                )
            )
    return out

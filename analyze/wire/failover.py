"""Bytes an RDMA failover moved twice: READs of a buffer again on another device, soon after the first.

Why from the packets: when a NIC or its path fails mid-operation, a library with failover (NCCL's IB plugin
replaying on another rail, RCCL's) reissues the operation's RDMA READs on queue pairs of another device, and the
same buffer's bytes cross the network again. Counted as transfers they look like goodput; they are not, and the
NIC counters of either device cannot tell. Every READ request's RDMA Extended Transport Header names the remote
buffer (virtual address) and length: the read path files each request's PSN, a 24-bit key of buffer and length,
and the length, and each response's first packet with the PSN it answers (analyze.read.layouts ROCE_EV_READ*),
unthinned.

A READ is a replay where the same host pair read the same key last on another device (another address pair), that
read was answered, and it came within REPLAY_WINDOW of the iteration period (a second if the period is unknown): a
buffer read every iteration is read again once per period, on one device, and a failover's reissue follows its
first read within the operation. A reissue of a read the failed device never answered moves its bytes once:
goodput. A replay's length is the bytes moved again; the edge that carried them (responder to requester) keeps
them out of its payload, as it does resent bytes.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

__all__ = ["replayed_reads", "REPLAY_WINDOW"]

REPLAY_WINDOW = 0.5  # of the iteration period: a READ of a key read this recently on another device is a replay
UNKNOWN_PERIOD_NS = 1_000_000_000  # where the iterations are not known


def replayed_reads(events: Optional[pd.DataFrame], qps: pd.DataFrame, period_ns: Optional[float]) -> pd.DataFrame:
    """Per READ replay: requester and responder host (src_host, dst_host), its queue pair's flow_id, time and
    length, and the flow of the answered read it repeats (first_flow_id); from EVENTS (Tables.rdma_events) in each
    requester's own capture (one clock for all its devices). QPS: each queue pair's flow_id, its src and dst
    addresses (which device) and src_host, dst_host."""
    columns = ["src_host", "dst_host", "flow_id", "t_ns", "length", "first_flow_id"]
    what = events["what"].to_numpy(object) if events is not None else np.zeros(0, object)
    if events is None or not (what == "read").any():
        return pd.DataFrame(columns=columns)
    ends = qps[["flow_id", "src", "dst", "src_host", "dst_host"]]
    reads = _requests(events, what).merge(ends, on="flow_id")
    reads = reads[reads["host"] == reads["src_host"]].sort_values("t_ns", kind="stable")
    reads["answered"] = _answered(reads, events[what == "read_answer"].merge(ends, on="flow_id"), period_ns)
    reads["device"] = reads["src"].astype(str) + ">" + reads["dst"].astype(str)
    before = reads.groupby(["src_host", "dst_host", "key"], sort=False)[["device", "t_ns", "flow_id", "answered"]]
    before = before.shift()
    window = REPLAY_WINDOW * (period_ns or UNKNOWN_PERIOD_NS)
    replay = (
        before["device"].notna()
        & (before["device"] != reads["device"])
        & (reads["t_ns"] - before["t_ns"] <= window)
        & before["answered"].fillna(False).astype(bool)
    ).to_numpy(bool)
    out = reads[replay]
    return pd.DataFrame(
        {
            "src_host": out["src_host"].to_numpy(object),
            "dst_host": out["dst_host"].to_numpy(object),
            "flow_id": out["flow_id"].to_numpy(np.int64),
            "t_ns": out["t_ns"].to_numpy(np.int64),
            "length": out["length"].to_numpy(np.int64),
            "first_flow_id": before["flow_id"][replay].to_numpy(np.int64),
        }
    )


def _requests(events: pd.DataFrame, what: np.ndarray) -> pd.DataFrame:
    """Each READ request's flow_id, host, t_ns, psn, key and length: the kernel files the three at the same time,
    in that order, so the n-th of each kind at one (flow, capture, time) belong together."""
    keys = ["flow_id", "host", "t_ns"]
    parts = []
    for kind, name in (("read", "psn"), ("read_key", "key"), ("read_len", "length")):
        rows = events[what == kind][[*keys, "value"]].rename(columns={"value": name})
        parts.append(rows.assign(n=rows.groupby(keys).cumcount()))
    return parts[0].merge(parts[1], on=[*keys, "n"]).merge(parts[2], on=[*keys, "n"])


def _answered(reads: pd.DataFrame, answers: pd.DataFrame, period_ns: Optional[float]) -> np.ndarray:
    """Whether each of READS (requester's capture) got a response: a first response packet in the same capture,
    the other way between the same two addresses, naming its PSN, within the window after it."""
    answers = answers.rename(columns={"src": "dst", "dst": "src", "value": "psn", "t_ns": "t_answer"})
    both = reads.reset_index()[["index", "host", "src", "dst", "psn", "t_ns"]].merge(
        answers[["host", "src", "dst", "psn", "t_answer"]], on=["host", "src", "dst", "psn"]
    )
    late = both["t_answer"] - both["t_ns"]
    hit = both.loc[(late > 0) & (late <= REPLAY_WINDOW * (period_ns or UNKNOWN_PERIOD_NS)), "index"]
    return reads.index.isin(hit.to_numpy())

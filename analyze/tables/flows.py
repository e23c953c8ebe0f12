"""Flow keys in words and hosts' own addresses: address text, protocol names, local-address masks.

A flow seen in two captures (sender's and receiver's) is reported once (analyze.api): the sender's view
(what the host actually put on its link), else the receiver's, else the largest; every host keeps its own
counts in `flow_views` for its link utilization. Folding a host's scans is analyze.read.fold.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

import numpy as np
import pandas as pd

from analyze.read import layouts as L
from analyze.read.fold import HostFlows, unique_rows


IPV4_MAPPED_HI = 0
IPV4_MAPPED_TAG = 0x0000FFFF00000000
PROTO_NAMES = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6", L.PROTO_ROCE: "roce"}
LID_PREFIX = "lid:"  # an InfiniBand local ID as an address (a packet routed without a GRH)


@lru_cache(maxsize=65536)
def address_text(hi: int, lo: int) -> str:
    """Text form of a 128-bit key address; IPv4-mapped keys print as dotted quads."""
    if hi == IPV4_MAPPED_HI and (lo >> 32) == 0xFFFF:
        return str(ipaddress.IPv4Address(lo & 0xFFFFFFFF))
    if hi == L.LID_KEY_HI_VALUE and lo < 0x10000:
        return f"{LID_PREFIX}{lo}"
    if hi == 0 and lo == 0:
        return "0.0.0.0"
    return str(ipaddress.IPv6Address((hi << 64) | lo))


def address_key(text: str) -> tuple[int, int]:
    """Inverse of address_text; accepts 'addr' or 'addr/prefix'."""
    if text.startswith(LID_PREFIX):
        return L.LID_KEY_HI_VALUE, int(text[len(LID_PREFIX) :], 0)
    ip = ipaddress.ip_address(text.split("/")[0].split("%")[0])
    if ip.version == 4:
        return IPV4_MAPPED_HI, IPV4_MAPPED_TAG | int(ip)
    value = int(ip)
    return value >> 64, value & 0xFFFFFFFFFFFFFFFF


def key_ports(word: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source port, destination port, destination QP) of flow keys' last word (int64 arrays; QP -1 for a flow
    that is not a queue pair). A queue pair's key holds its QP where other flows hold their ports: its ports
    show as 0."""
    w = np.asarray(word, dtype=np.uint64)
    roce = (w & np.uint64(0xFF)) == np.uint64(L.PROTO_ROCE)
    sport = np.where(roce, 0, (w >> np.uint64(24)) & np.uint64(0xFFFF)).astype(np.int64)
    dport = np.where(roce, 0, (w >> np.uint64(8)) & np.uint64(0xFFFF)).astype(np.int64)
    qp = np.where(roce, (w >> np.uint64(8)) & np.uint64(0xFFFFFF), np.uint64(0)).astype(np.int64)
    return sport, dport, np.where(roce, qp, -1)


def proto_name(proto: int) -> str:
    """'tcp', 'udp', 'icmp', ... or 'ip-N' for the rest."""
    return PROTO_NAMES.get(proto, f"ip-{proto}")


def infer_local(hf: HostFlows) -> list[tuple[int, int]]:
    """A host's own address when no meta.json says: the one address present in the most packets."""
    if len(hf.keys) == 0:
        return []
    pk = hf.agg[:, L.AGG_PACKETS]
    both = np.concatenate([hf.keys[:, 0:2], hf.keys[:, 2:4]])
    addrs, inv = unique_rows(both)
    counts = np.bincount(inv, weights=np.concatenate([pk, pk]), minlength=len(addrs))
    top = int(np.argmax(counts))
    return [(int(addrs[top, 0]), int(addrs[top, 1]))]


def local_mask(keys: np.ndarray, local: list[tuple[int, int]], src: bool) -> np.ndarray:
    """Rows whose source (or destination) address is one of the host's own."""
    c = 0 if src else 2
    mask = np.zeros(len(keys), dtype=bool)
    for hi, lo in local:
        mask |= (keys[:, c] == np.uint64(hi)) & (keys[:, c + 1] == np.uint64(lo))
    return mask


def connection_ends(
    src: pd.Series, sport: pd.Series, dst: pd.Series, dport: pd.Series
) -> tuple[np.ndarray, np.ndarray]:
    """Per flow, its connection's two ends as "name:port" text, the lower first: a flow and its reverse get the
    same pair (what the jobs, the ranks and the jobs' connection counts all key on). SRC and DST are addresses
    or host names."""
    a = (src.astype(str) + ":" + sport.astype(str)).to_numpy(object)
    b = (dst.astype(str) + ":" + dport.astype(str)).to_numpy(object)
    first = a < b
    return np.where(first, a, b), np.where(first, b, a)

"""Did every host capture the job? Hosts whose capture cannot hold the training's traffic, said first.

Why: an agent on the wrong interface (`lo`, or the management NIC while the job talks over another) leaves a
capture that reads cleanly and describes the wrong network: ssh chatter summarised as flows, utilization of
an idle link. Every host of a distributed job exchanges its gradients with the other hosts, so a captured
host that exchanged no byte with any other captured host, or (with markers) moved no byte in any marked
iteration, did not capture the job. The summary, the verdict and the what-if's doubt carry it, ahead of
any number computed from those captures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from analyze.model.findings import Iterations
from analyze.model.result import HostSummary
from capture import layout

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

CAPTURE_PROBLEMS = "capture_problems"  # the result's key, present only when there are some
FIX = "capture on the interface the job uses (--iface NAME, or the job's NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME)"


def capture_problems(
    hosts: Sequence[HostSummary],
    metas: Sequence[layout.HostMeta | None],
    views: "pd.DataFrame",
    iterations: Iterations | None,
) -> list[str]:
    """One line per captured host that did not capture the job (empty for a single host). VIEWS: the flows
    as each host's capture saw them (Tables.flow_views), so a host is judged by its own capture only (the
    other hosts' captures see its peers' side)."""
    if len(hosts) < 2:
        return []
    own = [layout.peer_addresses(m or layout.HostMeta({}), h.addresses) for h, m in zip(hosts, metas)]
    everyone = set().union(*own)
    with_others = _bytes_with_other_hosts(own, [h.name for h in hosts], views)
    problems = []
    for i, host in enumerate(hosts):
        if not own[i] or not everyone - own[i]:
            continue  # hosts sharing one machine's addresses, or unknown ones: nothing to tell them apart
        if with_others[i]:
            continue
        problems.append(
            f"{host.name}: its capture holds no traffic with the other captured hosts "
            f"({host.tx_bytes + host.rx_bytes:,} bytes of other traffic): it missed the job's network; {FIX}"
        )
    if iterations is not None and iterations.source == "markers":
        per = iterations.per_iteration
        for host in hosts:
            if per and all(not it.bytes_by_host.get(host.name) for it in per):
                if not any(p.startswith(f"{host.name}:") for p in problems):
                    problems.append(
                        f"{host.name}: it sent no byte in any of the {len(per)} marked iterations: its capture "
                        f"missed the job's traffic; {FIX}"
                    )
    return problems


def _bytes_with_other_hosts(own: list[set[str]], names: list[str], views: "pd.DataFrame") -> "np.ndarray":
    """Per host, the bytes its own capture holds between its addresses (OWN) and another captured host's, one
    pass over every host's views at once (a set test per host took 2.7 s at 512 hosts). An address may belong
    to several hosts (ranks of one machine): membership is the (address, host) pairs."""
    import numpy as np
    import pandas as pd

    out = np.zeros(len(names), np.int64)
    if not len(views):
        return out
    addresses = sorted(set().union(*own))
    code = {a: k for k, a in enumerate(addresses)}
    n = len(names)
    owned = np.array(sorted(code[a] * n + i for i, mine in enumerate(own) for a in mine), dtype=np.int64)
    anyone = np.zeros(len(addresses), bool)
    anyone[owned // n] = True
    h = pd.Index(names).get_indexer(views["host"])
    s = pd.Index(addresses).get_indexer(views["src"])
    d = pd.Index(addresses).get_indexer(views["dst"])
    keep = (h >= 0) & (s >= 0) & (d >= 0)
    h, s, d = h[keep], s[keep], d[keep]
    src_own, dst_own = np.isin(s * n + h, owned), np.isin(d * n + h, owned)
    mine = (src_own & anyone[d] & ~dst_own) | (dst_own & anyone[s] & ~src_own)
    nbytes = views["bytes"].to_numpy(np.float64)[keep]
    return np.bincount(h[mine], weights=nbytes[mine], minlength=n).astype(np.int64)

"""Did every host capture the job? Hosts whose capture cannot hold the training's traffic, said first.

Why: an agent on the wrong interface (`lo`, or the management NIC while the job talks over another) leaves a
capture that reads cleanly and describes the wrong network: ssh chatter summarised as flows, utilization of
an idle link. Every host of a distributed job exchanges its gradients with the other hosts, so a captured
host that exchanged no byte with any other captured host, or (with markers) moved no byte in any marked
iteration, did not capture the job. The summary, the verdict and the what-if's doubt carry it, ahead of
any number computed from those captures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from analyze.findings import Iterations
from analyze.result import HostSummary
from capture import layout

if TYPE_CHECKING:
    import pandas as pd

CAPTURE_PROBLEMS = "capture_problems"  # the result's key, present only when there are some
FIX = "capture on the interface the job uses (--iface NAME, or the job's NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME)"


def capture_problems(
    hosts: Sequence[HostSummary],
    metas: Sequence[Mapping[str, Any] | None],
    views: "pd.DataFrame",
    iterations: Iterations | None,
) -> list[str]:
    """One line per captured host that did not capture the job (empty for a single host). VIEWS: the flows
    as each host's capture saw them (Tables.flow_views), so a host is judged by its own capture only (the
    other hosts' captures see its peers' side)."""
    if len(hosts) < 2:
        return []
    own = [layout.peer_addresses(dict(m or {}), h.addresses) for h, m in zip(hosts, metas)]
    everyone = set().union(*own)
    seen = dict(tuple(views.groupby("host", sort=False))) if len(views) else {}
    problems = []
    for i, host in enumerate(hosts):
        others = everyone - own[i]
        if not own[i] or not others:
            continue  # hosts sharing one machine's addresses, or unknown ones: nothing to tell them apart
        v = seen.get(host.name)
        if v is not None:
            src, dst = v["src"], v["dst"]
            mine = (src.isin(own[i]) & dst.isin(others)) | (dst.isin(own[i]) & src.isin(others))
            if int(v["bytes"][mine].sum()):
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

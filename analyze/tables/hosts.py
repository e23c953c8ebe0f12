"""Which captured host an address belongs to, and flows named by their hosts: what the topology, the transport and
the collective inference all join on. Apart from flows (which folds scans) so that naming hosts needs no read path.
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd


def address_hosts(hosts: Sequence[Any]) -> dict[str, str]:
    """Map each captured host's own addresses to its name (Result.hosts items: .name, .addresses)."""
    return {a: h.name for h in hosts for a in h.addresses}


def flow_hosts(flows: pd.DataFrame, addr_host: dict[str, str]) -> pd.DataFrame:
    """Flows with src_host/dst_host; uncaptured endpoints keep their address as their name."""
    src = flows["src"].map(addr_host)
    dst = flows["dst"].map(addr_host)
    return flows.assign(
        src_host=src.fillna(flows["src"]), dst_host=dst.fillna(flows["dst"]), inferred=src.isna() | dst.isna()
    )

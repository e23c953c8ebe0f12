"""What each capture missed: records its sniffer never wrote, measured from the traffic itself (issue 47).

Why: a sniffer on a busy link (tcpdump on an RDMA device, a NIC's sniffer flag, a switch mirror) drops records
silently, its drop counter often at 0, and every byte count, rate and iteration computed from such a capture comes
out short with nothing to say so. Two things the traffic carries tell what was never captured:

- TCP: the sequence numbers. Payload inside a flow's sequence span that no record of this capture carried
  (analyze.read.fold.seq_missing) was sent but not captured here; a network loss is sent again and does not count.
- RDMA: the PSNs. A request PSN skipped and never sent again (no NAK answered it, no resend filled it) reached the
  receiver, or the queue pair would have stalled: the capture lost it. Each counts as the queue pair's mean
  payload per request packet.

A capture's coverage is the payload it holds over that plus what it missed, the weaker of that and the share
tcpdump's own counters say it kept (meta.json). The flows of a capture short by more than GAPPED are taken from
another capture that saw them (analyze.api), and the summary says so first.
When it missed them: analyze.tables.hole_times.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from analyze.read import layouts as L
from capture.layout import HostMeta
from analyze.model.result import Coverage

# a view missing more than this share of a flow's payload yields to a fuller one; a capture below 1 - GAPPED is
# named first in the summary. Whole captures read 0.0000-0.0003 short (re-sent segments' lost first sendings)
GAPPED = 0.01


def missing_payload(agg: np.ndarray) -> np.ndarray:
    """Per flow row of a folded scan: payload the capture missed (TCP sequence holes, RDMA PSNs never resent)."""
    requests = agg[:, L.AGG_ROCE_WRITE_BYTES] + agg[:, L.AGG_ROCE_SEND_BYTES] + agg[:, L.AGG_ROCE_READ_BYTES]
    skipped = np.maximum(agg[:, L.AGG_ROCE_PSN_GAPS] - agg[:, L.AGG_ROCE_RESENT], 0)
    per_packet = requests / np.maximum(agg[:, L.AGG_PACKETS], 1)
    return agg[:, L.AGG_SEQ_MISSING] + np.round(skipped * per_packet).astype(np.int64)


def view_shortfall(views: pd.DataFrame) -> np.ndarray:
    """Per views row: the share of the flow's payload that capture missed (0 where it held it all)."""
    missing = views["missing_payload"].to_numpy(np.float64)
    held = views["payload_bytes"].to_numpy(np.float64)
    return np.divide(missing, held + missing, out=np.zeros(len(views)), where=(held + missing) > 0)


def gapped_views(views: pd.DataFrame) -> np.ndarray:
    """Per views row: True where that capture missed more than GAPPED of the flow."""
    return view_shortfall(views) > GAPPED


def host_coverage(names: Sequence[str], metas: Sequence[HostMeta | None], views: pd.DataFrame) -> list[Coverage]:
    """Each host's capture, in NAMES order: what its flows show it missed, and its counters' drops."""
    host = views["host_index"].to_numpy() if len(views) else np.zeros(0, np.int64)
    held = np.bincount(host, weights=views["payload_bytes"].to_numpy(np.float64), minlength=len(names))
    missed = np.bincount(host, weights=views["missing_payload"].to_numpy(np.float64), minlength=len(names))
    out = []
    for i, meta in enumerate(metas):
        counters = (meta.counters if meta is not None else None) or {}
        dropped = [counters.get(k) for k in ("dropped_by_kernel", "dropped_by_interface")]
        counted = sum(int(d) for d in dropped if d) if any(d is not None for d in dropped) else None
        kept = int(counters.get("captured") or 0)
        from_flows = held[i] / (held[i] + missed[i]) if held[i] + missed[i] > 0 else 1.0
        from_counters = kept / (kept + counted) if counted and kept else 1.0
        source = "sequence numbers" if from_flows <= from_counters else "tcpdump's drop counters"
        out.append(Coverage(min(from_flows, from_counters), int(held[i]), int(missed[i]), counted, source))
    return out


def incomplete_lines(names: Sequence[str], holes: Sequence[Coverage], start_ns: int = 0) -> list[str]:
    """One line per capture short by more than GAPPED, for the summary's first lines; where its holes could be
    placed in time, when (seconds from START_NS, the run's first record)."""
    return [
        f"{name}: its capture holds {h.fraction:.1%} of what it should ({h.source}: "
        f"{h.missing_payload_bytes:,} payload bytes of its flows never captured"
        + (f", {h.dropped_by_tcpdump:,} packets dropped by tcpdump's count" if h.dropped_by_tcpdump else "")
        + ")"
        + when_missing(h, start_ns)
        + "; its flows are read from their other end's capture where one saw them, and no loss, limit or "
        "straggler is judged from its holes"
        for name, h in zip(names, holes)
        if h.fraction < 1 - GAPPED
    ]


def when_missing(h: Coverage, start_ns: int) -> str:
    """Where a capture's holes fell, in words: its stretches in seconds from START_NS."""
    if not h.holes:
        return ""
    shown = ", ".join(
        f"{(a - start_ns) / 1e9:.3f}-{(b - start_ns) / 1e9:.3f} s ({held:.0%} held)" for a, b, held in h.holes[:4]
    )
    more = f" and {len(h.holes) - 4} more" if len(h.holes) > 4 else ""
    return f"; missing in {shown}{more} into the run (where the flows' other ends hold more)"

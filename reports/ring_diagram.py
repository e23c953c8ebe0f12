"""The ring topology as an inline SVG: hosts on a circle in ring order, directed edges sized by bytes.

Reads the result's Topology (analyze.model.findings): its ring `order`, its `edges` (src, dst, bytes, flows, share) and
the `launch_order`. An edge joining two hosts that are not neighbours in the launch order is drawn red and
dashed: that is the launch-order mismatch Horovod users need to see.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from analyze.model.findings import Topology

MISMATCH_COLOR = "#d62728"
EDGE_COLOR = "#1f77b4"
LABELLED = 48  # up to this many hosts every node is drawn with its position and name


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def launch_neighbours(launch: Sequence[str]) -> set[frozenset[str]]:
    """Unordered host pairs adjacent in the launch order, read as a cycle."""
    n = len(launch)
    if n < 2:
        return set()
    return {frozenset((launch[i], launch[(i + 1) % n])) for i in range(n)}


def mismatched_edges(topology: Topology) -> set[tuple[str, str]]:
    """Edges (src, dst) whose hosts are not launch-order neighbours (empty without a launch order)."""
    launch = list(topology.launch_order or [])
    pairs = launch_neighbours(launch)
    if not pairs:
        return set()
    out = set()
    for e in topology.edges or []:
        src, dst = e.src, e.dst
        if src in launch and dst in launch and frozenset((src, dst)) not in pairs:
            out.add((src, dst))
    return out


def ring_svg(topology: Topology, size: int = 400) -> str:
    """The diagram: nodes labelled with the host and its launch position, arrows in the data's direction."""
    order = list(topology.order or [])
    edges = list(topology.edges or [])
    for e in edges:  # hosts seen only in edges still get a place on the circle
        for h in (e.src, e.dst):
            if h not in order:
                order.append(h)
    launch = list(topology.launch_order or [])
    bad = mismatched_edges(topology)
    n = len(order)
    if n == 0:
        return '<p class="muted">The topology names no hosts.</p>'
    pad = 110  # room for labels left and right of the circle
    cx, cy = size / 2 + pad, size / 2
    radius = size / 2 - 60
    pos = {
        h: (cx + radius * math.sin(2 * math.pi * i / n), cy - radius * math.cos(2 * math.pi * i / n))
        for i, h in enumerate(order)
    }
    dense = n > LABELLED  # beyond, every node a dot, a label on every step-th, no arrowheads (4,096 drew a blob)
    step = -(-n // (LABELLED // 3)) if dense else 1
    node_r = 26 if n <= 16 else (max(6, 300 / n) if not dense else 2.5)
    max_bytes = max((float(e.bytes or 0) for e in edges), default=0) or 1.0
    parts = [
        f'<svg class="ring" viewBox="0 0 {size + 2 * pad} {size}" width="{size + 2 * pad}" height="{size}" role="img" '
        f'aria-label="ring topology diagram">',
        "<defs>"
        f'<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" '
        f'markerWidth="18" markerHeight="18" orient="auto-start-reverse">'
        f'<path d="M0,0 L10,5 L0,10 z" fill="{EDGE_COLOR}"/></marker>'
        f'<marker id="arrow-bad" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" '
        f'markerWidth="18" markerHeight="18" orient="auto-start-reverse">'
        f'<path d="M0,0 L10,5 L0,10 z" fill="{MISMATCH_COLOR}"/></marker></defs>',
    ]
    for e in edges:
        src, dst = e.src, e.dst
        if src not in pos or dst not in pos or src == dst:
            continue
        (x1, y1), (x2, y2) = pos[src], pos[dst]
        dx, dy = x2 - x1, y2 - y1
        dist = math.hypot(dx, dy) or 1.0
        ux, uy = dx / dist, dy / dist
        # start and end on the node's rim; bow to the right of the direction so A→B and B→A do not overlap
        sx, sy = x1 + ux * node_r, y1 + uy * node_r
        ex, ey = x2 - ux * (node_r + 2), y2 - uy * (node_r + 2)
        bow = min(40.0, dist * 0.18)
        mx, my = (sx + ex) / 2 - uy * bow, (sy + ey) / 2 + ux * bow
        width = (1.5 + 5.5 * float(e.bytes or 0) / max_bytes) / (4 if dense else 1)
        is_bad = (src, dst) in bad
        color = MISMATCH_COLOR if is_bad else EDGE_COLOR
        dash = ' stroke-dasharray="7 4"' if is_bad else ""
        share = e.share
        tip = (
            f"{src} → {dst}: {_bytes(e.bytes)}, {e.flows} flow(s)"
            + (f", {share:.1%} of ring bytes" if share is not None and math.isfinite(share) else "")
            + (" — not neighbours in the launch order" if is_bad else "")
        )
        parts.append(
            f'<path class="edge{" mismatch" if is_bad else ""}" data-src="{_e(src)}" data-dst="{_e(dst)}" '
            f'd="M{sx:.1f},{sy:.1f} Q{mx:.1f},{my:.1f} {ex:.1f},{ey:.1f}" fill="none" stroke="{color}" '
            f'stroke-width="{width:.1f}" stroke-opacity="0.85"{dash} '
            + ("" if dense else f'marker-end="url(#{"arrow-bad" if is_bad else "arrow"})"')
            + f"><title>{_e(tip)}</title></path>"
        )
    for i, h in enumerate(order):
        x, y = pos[h]
        rank = f"launch #{launch.index(h) + 1}" if h in launch else "not in launch order"
        label = h if len(h) <= 24 else h[:23] + "…"
        lx, ly = (
            cx + (radius + node_r + 14) * math.sin(2 * math.pi * i / n),
            cy - (radius + node_r + 14) * math.cos(2 * math.pi * i / n),
        )
        anchor = "middle" if abs(lx - cx) < 20 else ("start" if lx > cx else "end")
        index = (
            "" if dense else f'<text class="node-index" x="{x:.1f}" y="{y + 5:.1f}" text-anchor="middle">{i + 1}</text>'
        )
        text = (
            f'<text class="node-label" x="{lx:.1f}" y="{ly + 4:.1f}" text-anchor="{anchor}">{_e(label)}</text>'
            if i % step == 0
            else ""
        )
        parts.append(
            f'<g class="node" data-host="{_e(h)}" data-ring-index="{i}"><title>{_e(h)} — ring position {i + 1}, '
            f'{_e(rank)}</title><circle cx="{x:.1f}" cy="{y:.1f}" r="{node_r:.1f}"/>{index}{text}</g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _bytes(value: float | None) -> str:
    if value is None:
        return "? B"
    v = float(value)
    for factor, prefix in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if v >= factor:
            return f"{v / factor:.3g} {prefix}"
    return f"{v:.0f} B"

"""The analyzer's one result object and its versioned JSON form (schema 1).

Reports and `--json` both render this object; later features add keys (topology, iterations,
scaling) but never change the ones here. The JSON Schema lives beside it in result.schema.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported lazily by the code that builds tables
    import pandas as pd

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("result.schema.json")
_FIELDS: dict[type, tuple[str, ...]] = {}
_LEAVES = {str, int, float, bool, type(None)}
LINE = 100  # a JSON array longer than this is written one item per line


def plain(value: Any) -> Any:
    """A result dataclass as JSON-ready dicts and lists (what dataclasses.asdict gives, tuples as lists):
    asdict deep-copies every leaf, 0.18 s for 10,000 flow records against 0.03 s here."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is list or kind is tuple:
        return [plain(v) for v in value]
    if kind is dict:
        return {k: plain(v) for k, v in value.items()}
    names = _FIELDS.get(kind)
    if names is None:
        if not is_dataclass(kind):
            return value
        names = _FIELDS[kind] = tuple(f.name for f in fields(kind))
    return {n: plain(getattr(value, n)) for n in names}


@dataclass
class Utilization:
    """One link direction as fractions of link speed, from the binned rate series."""

    mean: float  # bytes over the whole capture span / capacity
    busy_fraction: float  # share of bins at or above the busy threshold
    while_busy: float  # mean utilization over busy bins only: how well the job fills the link when it talks
    peak: float
    p50: float
    p99: float


@dataclass
class HostSummary:
    """A captured host's link: how much it sent and received and how full the link was."""

    name: str
    addresses: list[str]
    link_speed_bps: float
    link_speed_source: str  # "meta" | "cli" | "assumed"
    tx_bytes: int
    rx_bytes: int
    tx_packets: int
    rx_packets: int
    first_ns: int
    last_ns: int
    tx_utilization: Utilization
    rx_utilization: Utilization
    drops: dict[str, int | None] = field(default_factory=dict)


@dataclass
class FlowRecord:
    """A directed 5-tuple, counted once from one capture's view (`view`), seen by `seen_by`."""

    src: str
    dst: str
    sport: int
    dport: int
    proto: str
    packets: int
    bytes: int
    payload_bytes: int
    start_ns: int
    end_ns: int
    mean_bps: float
    retransmitted_bytes: int
    seen_by: list[str]
    view: str


@dataclass
class CaptureSummary:
    """One file read: what it was and how healthy."""

    path: str
    host: str
    format: str
    linktypes: list[str]
    packets: int
    bytes: int
    first_ns: int
    last_ns: int
    frame_kinds: dict[str, int]
    warnings: list[str]


@dataclass
class Tables:
    """The pandas tables behind the summary, for notebooks, `--out` and the report."""

    flows: "pd.DataFrame"
    flow_views: "pd.DataFrame"
    flow_series: "pd.DataFrame"
    host_series: "pd.DataFrame"
    markers: "pd.DataFrame"  # iteration markers from markers.jsonl (empty when none)
    transport: "pd.DataFrame | None" = None  # per TCP data flow, its sender's TCP counters (analyze.transport)
    transport_samples: "pd.DataFrame | None" = None  # (flow_id, t_ns, what, value): round trips, in flight, re-sent


@dataclass
class Result:
    """Everything `ringscope analyze` found; `to_json()` is the stable, versioned form."""

    byte_mode: str
    bin_ns: int
    busy_threshold: float
    hosts: list[HostSummary]
    flows: list[FlowRecord]
    captures: list[CaptureSummary]
    warnings: list[str]
    assumptions: list[str]
    run: dict[str, Any] | None = None
    tables: Tables | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys added by later analyses (topology, ...)

    def to_json(self) -> dict[str, Any]:
        """The JSON form: plain types only, schema version first."""
        from analyze import __version__

        out: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "ringscope_version": __version__,
            "byte_mode": self.byte_mode,
            "bin_ns": self.bin_ns,
            "busy_threshold": self.busy_threshold,
            "run": self.run,
            "hosts": plain(self.hosts),
            "flows": plain(self.flows),
            "captures": plain(self.captures),
            "warnings": list(self.warnings),
            "assumptions": list(self.assumptions),
        }
        out.update(self.extra)
        return out

    @property
    def topology(self) -> Topology | None:
        """The collective's shape, typed (None when no collective was looked for)."""
        d = self.extra.get("topology")
        return Topology.from_json(d) if d else None

    @property
    def iterations(self) -> Iterations | None:
        """The iterations, typed (None when none were looked for)."""
        d = self.extra.get("iterations")
        return Iterations.from_json(d) if d else None

    @property
    def whatif(self) -> WhatIf | None:
        """The what-if at the run's own N and link, typed (None when the run does not allow one)."""
        d = self.extra.get("scaling")
        return WhatIf.from_json(d) if d else None

    def write_json(self, path: Path) -> None:
        """Write the JSON form; '-' means stdout."""
        text = json_text(self.to_json())
        if str(path) == "-":
            print(text)
        else:
            path.write_text(text + "\n")


def json_text(doc: Any, depth: int = 0) -> str:
    """JSON with the top two levels of objects spread over lines and each item of a long array on a line of
    its own (a flow, a host, an iteration, a note): as easy to read and grep as indent=2, and written by
    json's C encoder (indent=2 runs its pure-Python one: 0.24 s for a 128-host run)."""
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(doc, dict) and doc and depth < 2 and all(type(k) is str for k in doc):
        items = [f"{inner}{json.dumps(k)}: {json_text(v, depth + 1)}" for k, v in doc.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(doc, list) and depth <= 2:
        items = [json.dumps(v, allow_nan=False) for v in doc]
        if sum(len(i) + 2 for i in items) > LINE:
            return "[\n" + ",\n".join(inner + i for i in items) + f"\n{pad}]"
        return "[" + ", ".join(items) + "]"
    return json.dumps(doc, allow_nan=False)


# ---- typed views of the analyses' keys --------------------------------------------------------------
# topology, iterations and the what-if are written into Result.extra as their JSON form (that is what
# `--json` writes, byte for byte); these frozen dataclasses are the same data typed, for code that reads it:
# r.topology.order, r.iterations.per_iteration[0].bytes_by_host, r.whatif.scaling_factor.


@dataclass(frozen=True)
class TopologyEdge:
    """A heavy directed host pair of the collective."""

    src: str
    dst: str
    bytes: int
    payload_bytes: int
    flows: int
    share: float  # of all inter-host bytes
    inferred: bool  # an end was not captured: seen from one side only


@dataclass(frozen=True)
class Topology:
    """The collective's shape: `order` is the direction data flows (ring kinds), `confidence` how sure."""

    kind: str
    order: list[str]
    direction: str | None
    edges: list[TopologyEdge]
    launch_order: list[str]
    matches_launch_order: bool | None
    confidence: float
    notes: list[str]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Topology":
        return cls(
            kind=d["kind"],
            order=list(d["order"]),
            direction=d.get("direction"),
            edges=[TopologyEdge(**{k: e[k] for k in _EDGE_KEYS}) for e in d["edges"]],
            launch_order=list(d.get("launch_order") or []),
            matches_launch_order=d.get("matches_launch_order"),
            confidence=float(d["confidence"]),
            notes=list(d.get("notes") or []),
        )


_EDGE_KEYS = ("src", "dst", "bytes", "payload_bytes", "flows", "share", "inferred")


@dataclass(frozen=True)
class IterationRecord:
    """One iteration: its window, what each host sent and received, and each edge's bytes."""

    index: int
    start_ns: int
    end_ns: int
    bytes_by_host: dict[str, int]
    rx_bytes_by_host: dict[str, int]
    bytes_by_edge: dict[str, int]
    comm_start_ns: int
    comm_ns: int
    rate_bps: float


@dataclass(frozen=True)
class Iterations:
    """The iterations: found from markers or inferred, how sure (`confident`: stated as fact), the per-host
    bytes per iteration and the ring theory check."""

    source: str | None
    method: str | None
    count: int
    confidence: float
    confident: bool
    period_ns: float | None
    per_iteration: list[IterationRecord]
    bytes_per_iteration_per_host: dict[str, float | None]
    implied_gradient_bytes: float | None
    theory_ratio: float | None
    notes: list[str]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Iterations":
        return cls(
            source=d.get("source"),
            method=d.get("method"),
            count=int(d.get("count") or 0),
            confidence=float(d.get("confidence") or 0.0),
            confident=bool(d.get("confident", d.get("source") == "markers")),
            period_ns=d.get("period_ns"),
            per_iteration=[IterationRecord(**{k: it[k] for k in _ITERATION_KEYS}) for it in d["per_iteration"]],
            bytes_per_iteration_per_host=dict(d.get("bytes_per_iteration_per_host") or {}),
            implied_gradient_bytes=d.get("implied_gradient_bytes"),
            theory_ratio=d.get("theory_ratio"),
            notes=list(d.get("notes") or []),
        )


_ITERATION_KEYS = (
    "index",
    "start_ns",
    "end_ns",
    "bytes_by_host",
    "rx_bytes_by_host",
    "bytes_by_edge",
    "comm_start_ns",
    "comm_ns",
    "rate_bps",
)


@dataclass(frozen=True)
class WhatIf:
    """The what-if at the run's own N and link: scaling factors, the verdict, and whether it is sure."""

    model: str
    single_iteration_time_s: float
    scaling_factor: float | None  # T / (T + overhead) with the link fully used
    scaling_factor_at_measured_efficiency: float | None
    measured_scaling_factor: float | None
    verdict: str
    unsure: dict[str, Any] | None  # why it is not sure, and what would make it so (analyze.doubt)
    replay: dict[str, Any] | None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "WhatIf":
        m = d.get("measured") or {}
        return cls(
            model=d["model"],
            single_iteration_time_s=float(d["single_iteration_time_s"]),
            scaling_factor=m.get("full_utilization_scaling_factor"),
            scaling_factor_at_measured_efficiency=m.get("scaling_factor_at_measured_efficiency"),
            measured_scaling_factor=m.get("measured_scaling_factor"),
            verdict=str(d.get("verdict") or ""),
            unsure=d.get("unsure"),
            replay=d.get("replay"),
        )

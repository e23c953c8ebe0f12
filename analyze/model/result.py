"""The analyzer's one result object and its versioned JSON form (schema 2).

Every face renders this object: the summary, the HTML report, the trace and `--json`. Its records are typed all
the way down: hosts, flows and captures here, what the analyses find in analyze.model.findings. One function writes the
JSON (Result.to_json, through analyze.model.jsonform) and one reads it back (Result.from_json). Within a schema version
later features add keys but never change the ones here; the JSON Schema beside it, result.schema.json, is generated
from these records (analyze.model.schema).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from analyze.model.findings import (
    Bootstrap,
    Clock,
    Iterations,
    Job,
    KeepAlives,
    LinkBound,
    OtherTraffic,
    Rdma,
    Straggler,
    Topology,
    Transport,
    Verdict,
    WhatIf,
)
from analyze.model.jsonform import from_plain, optional, plain
from analyze.model.older import upgraded

if TYPE_CHECKING:  # pandas is imported lazily by the code that builds tables
    import pandas as pd

SCHEMA_VERSION = 2  # 2: every duration in integer ns (issue 46); 1 is read through analyze.model.older
SCHEMA_PATH = Path(__file__).with_name("result.schema.json")
LINE = 100  # a JSON array longer than this is written one item per line


@dataclass(frozen=True)
class Given:
    """What the user said about the job (the heaviest one, where there are several): the options of `ringscope
    analyze` and of analyze.api.analyze, checked here once, so that a bad value from Python gets the line the
    command prints (`analyze(paths, world_size=0)` was taken and analyzed as if unset)."""

    launch_order: Sequence[str] | None = None
    gradient_bytes: float | None = None
    nccl_log: str | Path | None = None
    single_iteration_time_s: float | None = None
    iterations: int | None = None
    world_size: int | None = None
    ranks_per_host: int | None = None
    profiles: Sequence[Path] = ()  # the ranks' torch.profiler traces (--trace-beside)

    def __post_init__(self) -> None:
        """ValueError, in the command's words, for a value no job can have."""
        if self.iterations is not None and self.iterations < 1:
            raise ValueError(f"bad --iterations {self.iterations}: must be at least 1")
        for name, value in (("--world-size", self.world_size), ("--ranks-per-host", self.ranks_per_host)):
            if value is not None and value < 1:
                raise ValueError(f"bad {name} {value}: must be at least 1")
        if self.world_size is not None and self.ranks_per_host is not None:
            raise ValueError("give --world-size or --ranks-per-host, not both")
        if self.single_iteration_time_s is not None and self.single_iteration_time_s <= 0:
            raise ValueError(f"bad --single-iteration-time {self.single_iteration_time_s} s: must be longer than 0")
        if self.gradient_bytes is not None and self.gradient_bytes <= 0:
            raise ValueError(f"bad --gradient-bytes {self.gradient_bytes}: must be positive")
        if self.nccl_log is not None and not Path(self.nccl_log).is_file():
            raise ValueError(f"{self.nccl_log}: no such NCCL log file")
        object.__setattr__(self, "profiles", tuple(self.profiles))


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
    qp: int | None = optional()  # an RDMA queue pair's destination QP (its ports show as 0)
    # issue 47: where the view read missed part of the flow too, the share of its payload it holds (its figures
    # are marked so); and the captures that saw the flow with holes (a queue pair's PSNs, a TCP sequence)
    held: float | None = optional()
    short_in: list[str] | None = optional()


@dataclass
class Coverage:
    """How much of its host's traffic a capture holds (analyze.tables.capture_holes): the payload of the flows it
    saw, what their sequence numbers or PSNs show it missed (a lower bound), and tcpdump's own drop count."""

    fraction: float
    seen_payload_bytes: int
    missing_payload_bytes: int
    dropped_by_tcpdump: int | None
    source: str  # "sequence numbers" or "tcpdump's drop counters": whichever shows more missing
    # when: each stretch of the capture's span whose windows held under 1 - GAPPED of their payload, as
    # [start_ns, end_ns, share held] on its own clock (capture_holes.hole_stretches), and the missing payload no
    # other capture of the same flows could place in time
    holes: list[list[float]] | None = optional()
    untimed_missing_bytes: int | None = optional()


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
    coverage: Coverage | None = optional()  # its host's capture as a whole (one stream of rotated files)


@dataclass
class Tables:
    """The pandas tables behind the summary, for notebooks, `--out` and the report."""

    flows: "pd.DataFrame"
    flow_views: "pd.DataFrame"
    flow_series: "pd.DataFrame"
    host_series: "pd.DataFrame"
    markers: "pd.DataFrame"  # iteration markers from markers.jsonl (empty when none)
    transport: "pd.DataFrame | None" = None  # per TCP data flow, its sender's TCP counters (analyze.wire.transport)
    transport_samples: "pd.DataFrame | None" = None  # (flow_id, t_ns, what, value): round trips, in flight, re-sent
    rdma: "pd.DataFrame | None" = None  # per RDMA queue pair and capture: its counters (analyze.wire.rdma)
    rdma_events: "pd.DataFrame | None" = None  # (flow_id, host, t_ns, what, value): ACK rtts, NAKs, CNPs, resends
    # the flow series at the width chosen from the traffic where --bin gave another (analyze.read.bin_choice):
    # the links' fill is judged at it (flow_id, t_ns, bytes); None where flow_series is at that width
    judged_series: "pd.DataFrame | None" = None
    judged_bin_ns: int | None = None

    def fill_series(self, bin_ns: int) -> tuple["pd.DataFrame", int]:
        """The flow series the links' fill is judged from and its width: judged_series where there is one, else
        flow_series at BIN_NS (the result's)."""
        if self.judged_series is not None and self.judged_bin_ns:
            return self.judged_series, self.judged_bin_ns
        return self.flow_series, bin_ns


@dataclass
class Result:
    """Everything `ringscope analyze` found; `to_json()` is the stable, versioned form and `from_json()` reads it
    back, so a saved result.json renders as the analysis that wrote it did (`ringscope report RESULT.json`)."""

    byte_mode: str
    bin_ns: int
    busy_threshold: float
    hosts: list[HostSummary]
    flows: list[FlowRecord]
    captures: list[CaptureSummary]
    warnings: list[str]
    assumptions: list[str]
    run: dict[str, Any] | None = None
    bin_choice: str | None = optional()  # why bin_ns is the width it is (analyze.read.bin_choice)
    capture_problems: list[str] | None = optional()  # hosts whose capture missed the job (analyze.confidence)
    clock: Clock | None = optional()
    topology: Topology | None = optional()
    iterations: Iterations | None = optional()
    scaling: WhatIf | None = optional()  # the what-if at the run's own N and link, when the run allows one
    # the what-if of a pattern the ring model does not cover (sharded, pipeline): bounds (analyze.whatif.link_bound)
    link_bound: LinkBound | None = optional()
    # who holds the ring back (analyze.wire.stragglers): empty when no one does, absent where it cannot be told
    stragglers: list[Straggler] | None = optional()
    transport: Transport | None = optional()
    rdma: Rdma | None = optional()  # RDMA queue pairs and their transport, where the capture holds any
    verdict: Verdict | None = optional()  # the one answer every face renders (analyze.verdict)
    # where the capture holds several jobs or other traffic (analyze.collective.jobs): each job, heaviest first (the
    # top-level topology, iterations, transport and scaling are the first's), and the traffic of none
    jobs: list[Job] | None = optional()
    other_traffic: OtherTraffic | None = optional()
    keepalives: KeepAlives | None = optional()  # NCCL's RAS connections and their silences (analyze.collective)
    bootstrap: Bootstrap | None = optional()  # NCCL's bootstrap connections and the ranks they count
    tables: Tables | None = field(default=None, metadata={"table": True})

    def to_json(self) -> dict[str, Any]:
        """The JSON form: plain types only, schema version first; the tables are not part of it."""
        from analyze import __version__

        body = plain(replace(self, tables=None))
        body.pop("tables")
        head = {
            k: body.pop(k) for k in ("byte_mode", "bin_ns", "bin_choice", "busy_threshold", "run") if k in body
        }  # the run first
        return {"schema": SCHEMA_VERSION, "ringscope_version": __version__, **head, **body}

    @classmethod
    def from_json(cls, doc: dict[str, Any], complete: bool = False) -> "Result":
        """The result a JSON form holds, without its tables (those live beside it, as CSV or Parquet). ValueError
        where a value has the wrong shape, with COMPLETE where a required key is missing, and where this very
        version wrote it, at a key it does not know: a misspelt one (analyze.model.jsonform); another version's
        keys it does not know are left aside, as the JSON only gains keys."""
        from analyze import __version__

        body = {k: v for k, v in doc.items() if k not in ("schema", "ringscope_version", "tables")}
        body = upgraded(body, doc.get("schema"))
        own = doc.get("ringscope_version") == __version__ and doc.get("schema") == SCHEMA_VERSION
        return from_plain(cls, body, complete, strict=own)

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

"""What the analyses find, typed: the collective's topology, its iterations, the hosts' clocks, the transport's
diagnosis, the what-if and the captures that missed the job. Each is a field of analyze.model.result.Result, built by
its room (collective, wire, whatif, confidence) and written to JSON by analyze.model.jsonform, field for field under
the keys the JSON has (schema 2; analyze.model.older reads schema 1's).

Why here, below the rooms: the reports, the trace, `report RESULT.json` and the rooms that read another room's
finding (the transport reads the iterations, the what-if reads everything) all name these types, and none of
them may import the room that builds it. Units are in the names (_ns, _bps, _bytes), and every duration is in
integer nanoseconds (issue 46), whatever unit the analysis computed it in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analyze.model.jsonform import optional

# ---- topology (analyze.collective.topology) ---------------------------------------------------------------


@dataclass
class TopologyEdge:
    """A heavy directed host pair of the collective."""

    src: str
    dst: str
    bytes: int
    payload_bytes: int
    flows: int
    share: float  # of all inter-host bytes
    inferred: bool  # an end was not captured: seen from one side only


@dataclass
class NcclNetEdge:
    """A ring edge the NCCL log says leaves a server: its two ranks, and the hosts they run on."""

    src: int
    dst: int
    src_host: str
    dst_host: str


@dataclass
class NcclComparison:
    """The NCCL log's rings beside the ring the packets took (analyze.collective.nccl_log)."""

    nranks: int | None  # None: the log did not say
    rings: dict[str, list[int]]  # channel -> ranks in ring order
    host_ring: list[str]
    net_edges: list[NcclNetEdge]
    sockets_per_peer: int | None
    ranks_per_host: int
    matches: bool | None  # None: one of the two rings is unknown


@dataclass
class Group:
    """A part of one job with its own bytes theory (analyze.collective.groups): a data-parallel group (one
    pipeline stage's replicas all-reducing that stage's gradients) or a pipeline boundary between two groups
    (point-to-point activations one way, their gradients back). `implied_bytes`: a data-parallel group's stage
    gradient bytes S_g, a boundary's bytes per link per direction, per iteration; None until iterations are sure."""

    kind: str  # data_parallel | pipeline
    hosts: list[str]
    edges: list[list[str]]  # [src, dst] host pairs
    bytes: int  # over the whole capture, both ways
    between: list[int] | None = optional()  # pipeline: the two data-parallel groups it joins (indices)
    bytes_per_iteration: float | None = optional()  # its edges' bytes over the capture, per iteration
    implied_bytes: float | None = optional()
    confidence: float | None = optional()  # of implied_bytes: its groups', its iterations' and its ranks' least
    formula: str | None = optional()
    # pipeline: its micro-batches per iteration, how many in flight, the schedule (analyze.collective.microbatches)
    micro_batches: int | None = optional()
    in_flight: int | None = optional()
    schedule: str | None = optional()  # one_at_a_time | gpipe | 1f1b
    bubble_share: float | None = optional()  # the model's, for the job's stages of equal time
    schedule_confidence: float | None = optional()
    schedule_evidence: str | None = optional()


@dataclass
class Topology:
    """The collective's shape: `order` is the direction data flows (ring kinds), `confidence` how sure."""

    # ring | bidirectional_ring | tree | double_binary_tree | star | mesh | halving_doubling | pipeline_groups | unknown
    kind: str
    order: list[str] = field(default_factory=list)
    direction: str | None = None  # with_launch_order | against_launch_order | both
    edges: list[TopologyEdge] = field(default_factory=list)
    launch_order: list[str] = field(default_factory=list)
    matches_launch_order: bool | None = None
    confidence: float = 0.0
    notes: list[str] = field(default_factory=list)
    nccl: NcclComparison | None = optional()
    groups: list[Group] | None = optional()  # data-parallel groups and pipeline links, where the job has them


# ---- iterations (analyze.collective.inference) -----------------------------------------------------------


@dataclass
class IterationRecord:
    """One iteration: its window, what each host sent and received, and each edge's bytes ("src->dst")."""

    index: int
    start_ns: int
    end_ns: int
    bytes_by_host: dict[str, int]
    rx_bytes_by_host: dict[str, int]
    bytes_by_edge: dict[str, int]
    comm_start_ns: int
    comm_ns: int
    rate_bps: float


@dataclass
class TimelineIteration:
    """One iteration as one host sent it (analyze.wire.timeline): the time from the cut before it to the cut
    after it, and the bytes of each bin from its first busy bin to its last."""

    index: int
    host: str
    period_ns: int
    comm_start_ns: int  # the first busy bin's start, from the cut before the iteration
    bytes_per_bin: list[int]  # the host's bytes to the job's other hosts, bin by bin
    idle_bins: list[int] = field(default_factory=list)  # bins it neither sent nor received in: it computed


@dataclass
class WireTimeline:
    """When each sampled iteration's bytes left (analyze.wire.timeline): the what-if reads compute, the
    communication window and what overlapped from it (analyze.whatif.wire_replay)."""

    bin_ns: int
    hosts: int  # the hosts sampled
    link_speed_bps: float  # the slowest of the job's links
    peak_rate_bps: float  # the sampled hosts' 99th-percentile bin rate: the fastest the job was seen to send
    iterations: list[TimelineIteration] = field(default_factory=list)
    # per rank and step, from the ranks' profiles: the last collective call less the first (analyze.wire.rank_profiles)
    profiled_backward_ns: list[int] | None = optional()


@dataclass
class Percentiles:
    """A per-host quantity over the iterations (None without iterations)."""

    median: float | None = None
    p5: float | None = None
    p95: float | None = None
    by_host: dict[str, float] = field(default_factory=dict)  # each host's median over the iterations


@dataclass
class Pattern:
    """What a job's collective traffic is (analyze.collective.pattern): its kind, the bytes theory S is implied
    from (`factor`: the multiple of S each rank sends per iteration per ring send; None where no theory applies),
    how sure, and the evidence."""

    kind: str  # ring_allreduce | sharded_data_parallel | sharded_grad_op | pipeline | reduce_scatter | ... | unknown
    formula: str
    factor: float | None
    confidence: float
    evidence: dict[str, float] = field(default_factory=dict)


@dataclass
class Phase:
    """Traffic of the job outside its iterations: set-up (rendezvous, parameter broadcast) or teardown."""

    name: str  # set-up | teardown
    start_ns: int
    end_ns: int
    bytes: int


@dataclass
class Iterations:
    """The iterations: from markers or inferred from the bytes, how sure (`confident`: stated as fact), the
    bytes each host sent per iteration and the ring theory check (2(N-1)/N x S per host)."""

    source: str | None = None  # markers | inferred
    method: str | None = None  # markers | bytes_staircase
    confidence: float = 0.0
    confident: bool = False
    count: int = 0
    period_ns: float | None = None
    per_iteration: list[IterationRecord] = field(default_factory=list)
    bytes_per_iteration_per_host: Percentiles = field(default_factory=Percentiles)
    rx_bytes_per_iteration_per_host: Percentiles = field(default_factory=Percentiles)
    # what each host sent per iteration less what it re-sent (analyze.collective.resent): S is implied from these
    unique_bytes_per_iteration_per_host: Percentiles | None = optional()
    implied_gradient_bytes: float | None = None
    theory_ratio: float | None = None
    evidence: dict[str, float] = field(default_factory=dict)  # the staircase's checks, each 0..1
    notes: list[str] = field(default_factory=list)
    comm_ns_median: float | None = None
    rate_bps_median: float | None = None
    gradient_bytes: float | None = None
    gradient_bytes_source: str | None = None  # option | markers
    ring_size: int | None = None
    implied_params_fp32: float | None = None
    implied_params_fp16: float | None = None
    theory_bytes_per_host: float | None = None
    implied_gradient_bytes_confidence: float | None = None
    # per host, how many of its ranks send to a rank on another host, where not one each (interleaved ranks)
    ring_sends_per_host: dict[str, int] | None = None
    # W: where it was learnt (analyze.collective.ranks), whether that is sure, and the ranks per host where known
    ring_size_source: str | None = optional()
    ring_size_sure: bool | None = optional()
    ranks_per_host: dict[str, int] | None = optional()
    phases: list[Phase] | None = optional()  # the job's bytes before its first iteration and after its last
    period_bytes_per_edge: float | None = optional()  # inferred: the bytes an edge carries per iteration
    pattern: Pattern | None = optional()  # the parallelism its bytes theory comes from
    clock: str | None = optional()  # inferred: the host whose capture the iterations are timed on
    # each sampled iteration as the wire shows it, for the what-if (analyze.wire.timeline)
    timeline: WireTimeline | None = optional()


# ---- clocks (analyze.tables.clocks) ----------------------------------------------------------------------------


@dataclass
class HostClock:
    """One host's clock against the reference host's (None where its packets could not tell)."""

    name: str
    offset_ns: int | None
    drift_ppm: float | None
    uncertainty_ns: int | None
    samples: int


@dataclass
class Clock:
    """The hosts' clock offsets and drifts against the reference host, from packets both ends captured."""

    reference: str
    t0_ns: int
    hosts: list[HostClock] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---- transport (analyze.wire.transport) ------------------------------------------------------------------------


@dataclass
class EdgeIterations:
    """An edge's transport per iteration, one list entry per iteration it carried data in."""

    index: list[int] = field(default_factory=list)
    idle_share: list[float] = field(default_factory=list)
    rate_while_busy: list[float] = field(default_factory=list)
    start_ns: list[int] = field(default_factory=list)  # its first busy bin, on the reference clock
    end_ns: list[int] = field(default_factory=list)  # the end of its last busy bin
    tail_ns: list[int | None] = field(default_factory=list)  # its last run of busy bins after a pause (None: one run)
    rtt_median_ns: list[int | None] = field(default_factory=list)
    resent_bytes: list[int] = field(default_factory=list)


@dataclass
class EdgeSeries:
    """An edge's transport over time, thinned for the report: utilization, round trips, in flight, re-sent."""

    t_ns: list[int] = field(default_factory=list)
    utilization: list[float] = field(default_factory=list)
    rtt_t_ns: list[int] = field(default_factory=list)
    rtt_ns: list[int] = field(default_factory=list)
    inflight_t_ns: list[int] = field(default_factory=list)
    inflight_bytes: list[int] = field(default_factory=list)
    resent_t_ns: list[int] = field(default_factory=list)
    resent_bytes: list[int] = field(default_factory=list)


@dataclass
class Socket:
    """One TCP connection of an edge carried over several (NCCL's socket transport): its share of the edge's
    bytes and its pace while sending; `lags` when the edge waits for it (analyze.wire.transport)."""

    sport: int
    dport: int
    payload_bytes: int
    share: float
    rate_while_busy: float | None  # share of line rate, byte-weighted over the bins it sent in
    data: bool  # carries a quarter of the edge's busiest socket's bytes or more (else control, a mesh, a store)
    lags: bool


@dataclass
class TransportEdge:
    """One host pair's TCP, from its sender's capture: loss, windows, round trips, rate, and what limits it."""

    src: str
    dst: str
    flows: int
    payload_bytes: int
    retransmitted_bytes: int
    retransmitted_fraction: float
    out_of_order_bytes: int
    dup_acks: int
    sack_acks: int
    zero_windows: int
    zero_window_ns: int | None
    zero_window_share: float | None
    inflight_mean_bytes: int
    inflight_max_bytes: int
    window_scale_known: bool
    window_mean_bytes: int | None
    window_full_fraction: float | None
    rtt_samples: int
    rtt_min_ns: int | None
    rtt_median_ns: int | None
    rtt_p99_ns: int | None
    rate_while_busy: float | None  # share of line rate, byte-weighted over the bins it sent in
    busy_share: float | None
    link_speed_bps: float
    idle_in_communication: float | None
    per_iteration: EdgeIterations
    limiter: str | None
    evidence: list[str]
    confidence: float
    series: EdgeSeries
    sockets: list[Socket] = field(default_factory=list)  # where the edge runs over several connections
    pace_bps: float | None = optional()  # its rate while sending: the 90th percentile of its bins with bytes
    # share of line rate its bursts left at, from packet times: the same at any bin (analyze.wire.send_rate)
    burst_rate: float | None = optional()


@dataclass
class Transport:
    """Why the links are not full: the job's limiter (link, loss, window, sender, latency, shared, socket, none)
    and each edge's own, with the evidence."""

    limiter: str | None = None
    confidence: float = 0.0
    evidence: list[str] = field(default_factory=list)
    edges: list[TransportEdge] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class RdmaQp:
    """One RDMA queue pair (source, destination, destination QP): what it carried and how its transport went,
    each counter the largest any capture of it saw (the receiver sees the CE marks and gaps, the sender every
    packet it sent), its ACKs, NAKs and CNPs from the reverse queue pair that answers it."""

    src: str
    dst: str
    qp: int
    transport: str  # RoCEv2, RoCEv1 or InfiniBand
    reverse_qp: int | None  # the QP its ACKs go to: learnt from ACK PSNs matching its requests
    packets: int
    payload_bytes: int  # RDMA payload, resends included
    write_bytes: int
    send_bytes: int
    read_bytes: int
    messages: int
    immediate: int
    resent_packets: int
    resent_bytes: int
    psn_gaps: int
    resends: int
    timeouts: int
    acks: int
    naks: int
    rnr_naks: int
    nak_errors: int
    cnps: int
    ce_marks: int
    fecn: int
    becn: int
    ack_rtt_samples: int
    ack_rtt_median_ns: int | None
    udp_sport: int | None = optional()  # RoCEv2: the UDP source port a switch's ECMP hash reads


@dataclass
class QpRate:
    """One queue pair's share of its edge's line rate per bin, thinned for the report."""

    qp: int
    t_ns: list[int] = field(default_factory=list)
    utilization: list[float] = field(default_factory=list)


@dataclass
class RdmaSeries:
    """An RDMA edge over time, from its sender's capture, thinned for the report: the edge's and each queue pair's
    rate per bin, and the instants of CNPs, NAKs and resends, and ACK round trips."""

    t_ns: list[int] = field(default_factory=list)
    utilization: list[float] = field(default_factory=list)
    qp_rates: list[QpRate] = field(default_factory=list)
    cnp_t_ns: list[int] = field(default_factory=list)
    nak_t_ns: list[int] = field(default_factory=list)
    resent_t_ns: list[int] = field(default_factory=list)
    rtt_t_ns: list[int] = field(default_factory=list)
    rtt_ns: list[int] = field(default_factory=list)


@dataclass
class RdmaEdge:
    """One host pair's RDMA: its queue pairs folded into one edge, its rate, loss and congestion, its limiter."""

    src: str
    dst: str
    qps: list[int]
    qp_udp_sports: list[int] | None  # RoCEv2, per QP in `qps`' order: what a switch's ECMP hash reads
    qp_payload_bytes: list[int]  # per QP in `qps`' order: very unequal shares are shown, not explained
    qp_imbalance: float | None  # the busiest QP's bytes over the least busy one's
    payload_bytes: int
    packets: int
    resent_packets: int
    resent_fraction: float
    naks: int
    timeouts: int
    cnps: int
    cnps_per_s: float | None  # over the edge's busy time
    ce_marks: int
    ce_fraction: float
    ack_rtt_median_ns: int | None
    rate_while_busy: float | None  # share of line rate, byte-weighted over the bins it sent in
    busy_share: float | None
    link_speed_bps: float
    limiter: str | None  # loss | congestion | link | sender
    confidence: float
    evidence: list[str]
    series: RdmaSeries = field(default_factory=RdmaSeries)
    # share of line rate its bursts left at, from packet times: the same at any bin (analyze.wire.send_rate)
    burst_rate: float | None = optional()
    # NCCL's receiver-driven exchange (analyze.wire.clear_to_send): WRITE chunks whose grants the sender's capture
    # holds, and per chunk (median) how long the link idled waiting on the receiver's grant, then on the sender
    chunks: int | None = optional()
    grant_wait_ns: int | None = optional()
    send_wait_ns: int | None = optional()
    # a failover's READs of buffers just read on another device (analyze.wire.failover): not in payload_bytes
    replayed_reads: int | None = optional()
    replayed_bytes: int | None = optional()


@dataclass
class Rdma:
    """RDMA traffic (RoCE, InfiniBand): queue pairs, edges, and the limiter they point to (analyze.wire.rdma)."""

    limiter: str | None = None
    confidence: float = 0.0
    evidence: list[str] = field(default_factory=list)
    edges: list[RdmaEdge] = field(default_factory=list)
    qps: list[RdmaQp] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Straggler:
    """Who holds the ring back (analyze.wire.stragglers): a host late into the collective (compute) or a slow link,
    the time each iteration loses to it, and how sure."""

    host: str
    rank: int | None
    kind: str  # compute | link
    lost_ns_per_iteration: float
    iterations_affected: int
    evidence: list[str]
    confidence: float
    # compute: per affected iteration [index, start_ns, end_ns] on the reference clock: from the others' first sends
    # to its entry, the time the ring waited for it
    waits: list[list[int]] | None = optional()


@dataclass
class LinkFix:
    """The per-link what-if: the iteration if this host's link (or this edge) ran at line rate where it is slow,
    and if it ran only as fast as the other edges do (their usual pace, USUAL_BPS)."""

    host: str | None
    src: str | None
    dst: str | None
    iteration_ns_if_fixed: float
    saving_ns: float
    saving_share: float  # of the iteration period
    iteration_ns_if_usual: float | None = None
    saving_ns_if_usual: float | None = None
    usual_bps: float | None = None
    # how much faster the ring's slowest edge runs with the fix (at line rate; at the usual pace): what the wire
    # model replays (analyze.whatif.link_fixes)
    ring_speedup: float | None = None
    ring_speedup_if_usual: float | None = None
    # the saving's interval where the wire model priced it (what the capture cannot tell), and who priced it:
    # "wire model" or "edge sums" (the edges' own needs per iteration, analyze.wire.stragglers)
    saving_ns_low: float | None = None
    saving_ns_high: float | None = None
    priced_by: str | None = None


# ---- the what-if (analyze.whatif) -----------------------------------------------------------------------------


@dataclass
class Unsure:
    """Why a conclusion is not sure, how sure it is, and what would make it sure (analyze.confidence.doubt)."""

    because: list[str]
    confidence: float
    would_make_sure: list[str]


@dataclass
class Measured:
    """The run as measured, beside the model at full and at measured utilization of its own link."""

    workers: int | None = None
    link_speed_bps: float | None = None
    iteration_time_ns: int | None = None
    gradient_bytes: float | None = None
    comm_time_ns: int | None = None
    transport_efficiency: float | None = None
    achieved_rate_bps: float | None = None
    full_utilization_scaling_factor: float | None = optional()
    scaling_factor_at_measured_efficiency: float | None = optional()
    measured_scaling_factor: float | None = optional()  # T / the measured period, when T was given


@dataclass
class ReplayCheck:
    """The measured iteration reproduced by the model at the run's own N and rate (the replay error)."""

    measured_iteration_ns: int
    modelled_iteration_ns: int
    error: float  # modelled / measured - 1
    flagged: bool  # |error| above analyze.whatif.calculation.REPLAY_TOLERANCE
    workers: int
    bandwidth_bps: float
    single_iteration_time_given: bool


@dataclass(frozen=True)
class ScalingPoint:
    """One what-if: the scaling factor for N workers on a fully used link of B bit/s with compression c."""

    workers: int
    bandwidth_bps: float
    compression: float
    backward_ns: int
    overhead_ns: int
    comm_ns: int
    scaling_factor: float
    # the iteration predicted (T + overhead) and the interval the capture cannot narrow (analyze.whatif.wire_replay)
    iteration_ns: int | None = optional()
    iteration_ns_low: int | None = optional()
    iteration_ns_high: int | None = optional()


@dataclass
class NeededCompression:
    """The compression ratio that reaches a target scaling factor (None where none can)."""

    workers: int
    bandwidth_bps: float
    target: float
    compression: float | None


@dataclass
class HideBandwidth:
    """The link speed from which communication hides behind backward, for N workers."""

    workers: int
    bandwidth_bps: float | None


@dataclass
class SweepCurve:
    """Scaling factor over the sweep's bandwidths for one N and compression."""

    workers: int
    compression: float
    scaling_factor: list[float | None]


@dataclass
class Sweep:
    """The scaling factor over 0.1-400 Gbit/s for the N asked and others."""

    bandwidths_bps: list[float] = field(default_factory=list)
    curves: list[SweepCurve] = field(default_factory=list)


@dataclass
class WireFit:
    """What the what-if read from the wire (analyze.whatif.wire_replay), medians over the sampled iterations:
    the link idle (forward, optimizer, backward before the first bucket), the communication window, the
    backward's end inside it (a range where the link was busy all through and hid when buckets became ready),
    and the transport's efficiency while communicating."""

    iterations: int  # host-iterations sampled (analyze.wire.timeline)
    period_ns: int
    idle_ns: int  # the link idle per iteration: compute nothing overlapped
    window_ns: int  # first to last busy bin of the iteration
    backward_end_ns: int  # from the window's start: the point estimate
    backward_end_ns_low: int  # the last busy run's start: no bucket of it was ready before
    backward_end_ns_high: int  # the window's end: every byte ready only as it was sent
    hidden: bool  # the range is wide (over HIDDEN_SHARE of the period): the capture cannot tell when backward ended
    efficiency: float  # bytes per busy time of the window, against line rate
    efficiency_low: float
    efficiency_high: float
    hidden_comm_ns: int  # communication already overlapped with compute at the capture's speed (point)
    rate_ceiling_bps: float | None = None  # where the transport, not the link, set the pace: no faster elsewhere
    # the scaling factor with the capture's link fully used, at the interval's two edges
    scaling_factor_low: float | None = None
    scaling_factor_high: float | None = None
    notes: list[str] = field(default_factory=list)
    backward_profiled_steps: int | None = optional()  # the profiles' rank-steps the end was read from (else: idle)
    # "chained": the compute waits on the communication (sharded, pipeline), the idle stretches inside the window
    # move with the link and the backward_end_ns fields hold the window's length at an infinitely fast link
    readiness: str | None = optional()


@dataclass
class WhatIf:
    """The full-utilization what-if (JSON key `scaling`): the scaling factor at any N, link and compression,
    the verdict, and whether it is sure. `model_options` and `profile` are the model's own and vary with it."""

    model: str
    model_options: dict[str, Any]
    single_iteration_time_ns: int
    profile: dict[str, Any]
    points: list[ScalingPoint]
    needed_compression: list[NeededCompression]
    hide_bandwidth_bps: float | None
    hide_bandwidth: list[HideBandwidth]
    sweep: Sweep
    measured: Measured | None
    assumptions: list[str] = field(default_factory=list)
    verdict: str = ""
    replay: ReplayCheck | None = optional()
    unsure: Unsure | None = optional()
    # each host's link at the other edges' pace, the largest saving first (analyze.wire.stragglers)
    per_edge: list[LinkFix] | None = optional()
    wire: WireFit | None = optional()  # what the wire model read from the capture (analyze.whatif.wire_replay)

    @property
    def scaling_factor(self) -> float | None:
        """T / (T + overhead) at the run's own N with its link fully used."""
        return self.measured.full_utilization_scaling_factor if self.measured else None


@dataclass
class LinkLoad:
    """One host's link in the link-bound what-if: what it sends per iteration and how long that takes at line rate."""

    host: str
    bytes_per_iteration: float  # to the job's other hosts, counted as the result's byte mode
    link_speed_bps: float
    line_rate_ns: float  # bytes_per_iteration at link_speed_bps
    groups: list[str] = field(default_factory=list)  # pipeline: the groups its bytes belong to


@dataclass
class BuyBound:
    """The link speed that reaches a scaling factor with the communication fully overlapped, and with none of it."""

    target: float
    full_overlap_bps: float
    no_overlap_bps: float


@dataclass
class LinkBound:
    """The what-if for parallelism the ring model does not cover (analyze.whatif.link_bound; JSON `link_bound`):
    the step at any link speed B lies between max(T, c(B)) and T + c(B), c(B) the busiest link's bytes per
    iteration at B; the scaling factor T / step between the two."""

    pattern: str
    formula: str
    period_ns: float
    compute_ns: list[float]  # T, [least, most]: as given, or between the period less its communication and the period
    compute_source: str  # given | bracketed
    links: list[LinkLoad]  # every host's link, the busiest first
    scaling_factor: list[float]  # at the job's own link speeds: [least (no overlap), most (full overlap)]
    buy: list[BuyBound]
    stages: int | None = optional()  # pipeline: data-parallel groups joined by pipeline links
    assumptions: list[str] = field(default_factory=list)
    verdict: str = ""
    unsure: Unsure | None = optional()
    per_edge: list[LinkFix] | None = optional()  # each host's link at line rate (analyze.wire.stragglers)


# ---- jobs and other traffic (analyze.collective.jobs, analyze.each_job) ------------------------------------------


@dataclass
class ImpliedBytes:
    """The gradient bytes S a job's bytes per iteration imply, the formula that gave them and how sure they are."""

    bytes: float | None
    formula: str
    confidence: float | None


@dataclass
class Job:
    """One job of the capture, analyzed as a run of its own: its hosts, ranks, shape, iterations and what-if."""

    name: str
    hosts: list[str]
    flows: int
    connections: int
    bytes: int
    world_size: int | None
    ranks_per_host: dict[str, int] | None
    ranks_source: str | None
    topology: Topology | None
    pattern: Pattern | None  # the parallelism (its iterations' pattern), named at the job's level
    iterations: Iterations | None
    implied_parameter_bytes: ImpliedBytes | None
    phases: list[Phase] | None
    transport: Transport | None
    scaling: WhatIf | None
    capture_problems: list[str] | None
    confidence: float
    notes: list[str] = field(default_factory=list)
    link_bound: LinkBound | None = optional()  # the what-if of a sharded or pipeline job (analyze.whatif.link_bound)
    stragglers: list[Straggler] | None = optional()  # who holds its ring back (analyze.wire.stragglers)
    rdma: Rdma | None = optional()  # its RDMA queue pairs and their transport (analyze.wire.rdma)


@dataclass
class OtherConnection:
    """A flow of no job (one direction of a copy, a data loader, ssh): its ends and bytes."""

    src: str
    dst: str
    sport: int
    dport: int
    proto: str
    bytes: int
    start_ns: int
    end_ns: int


@dataclass
class SharedLink:
    """A job's host whose link other traffic used while the job's edges from it were busy."""

    job: str
    host: str
    direction: str  # tx | rx
    job_bytes: int  # the job's bytes on that link in the bins it was busy
    other_bytes: int  # other traffic's bytes on that link in the same bins
    share: float  # other / (job + other)
    other_rate_bps: float  # other traffic's mean rate over those bins


@dataclass
class OtherTraffic:
    """The traffic that belongs to no job, set aside from every job's numbers."""

    bytes: int
    flows: int
    connections: list[OtherConnection] = field(default_factory=list)  # the heaviest, up to 20
    shared_links: list[SharedLink] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Silence:
    """A stretch in which a host sent none of its keep-alives (analyze.collective.keepalives)."""

    host: str
    peers: list[str]  # the hosts its silent keep-alive connections lead to
    start_ns: int  # its last keep-alive before the silence
    seconds: float  # to its next one, or to the end of the capture
    until_end: bool  # the capture ended before the host spoke again
    meaning: str  # what NCCL's RAS makes of a silence this long


@dataclass
class KeepAlives:
    """NCCL's RAS keep-alive connections between a job's hosts: set apart from the data, and their silences."""

    connections: int
    hosts: list[str]
    messages: int  # keep-alives seen (one 60-byte message a second each way while a connection is idle)
    silences: list[Silence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Bootstrap:
    """NCCL's bootstrap between a job's hosts (analyze.collective.bootstrap): its root, the ranks each other host
    sent it (one connection each), and the connections set apart from the data with it."""

    root: str  # host:port
    root_host: str
    ranks_per_host: dict[str, int]  # hosts other than the root's: the root's own reach it over loopback
    root_host_ranks: int | None  # taken as the others' where two or more agree; None: not known
    connections: int
    notes: list[str] = field(default_factory=list)
    # each host's NCCL proxies (analyze.collective.proxies): one listener per rank, seen only by a capture that
    # holds the host's loopback; and their connections, set apart with the bootstrap
    proxies: dict[str, int] | None = optional()
    proxy_connections: int | None = optional()


# ---- the answer (analyze.verdict) -------------------------------------------------------------------------------


@dataclass
class Verdict:
    """Is the network the bottleneck: the answer, its headline, and the paragraph that says why."""

    answer: str  # yes | no | transport | unclear
    headline: str
    text: str

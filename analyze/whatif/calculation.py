"""The full-utilization scaling calculation (what-if): would training scale if the network were fully used?

Given a backward profile, the single-GPU iteration time T and a model (`PaperModel` or `RingscopeModel`),
this replays the all-reduce queue for every (workers, bandwidth, compression) asked, and derives:

* the scaling factor T / (T + overhead), overhead = end of the last all-reduce − end of backward;
* a sweep over 0.1–400 Gbit/s for the N asked and other N;
* the compression ratio needed for scaling factor 0.90 / 0.95 / 0.99 (None where even infinite compression
  cannot reach it: the reduction, latency and last bucket remain);
* the bandwidth at which communication hides behind backward: the smallest B whose overhead is within
  ``HIDE_TOLERANCE``·T of the overhead at infinite bandwidth, i.e. above it a faster link gains less than
  0.1 % scaling factor (for the paper's ResNets this is the ≈25 Gbit/s plateau of its Figure).
* with a measured backward profile and a measured run, the replay error: the same model at the run's own N
  and rate while communicating gives T + overhead per iteration, set beside the measured iteration period, as
  trace-replay simulators check themselves (Lumos: 3.3 % on 512 H100s; dPRO: < 5 %). A miss above
  ``REPLAY_TOLERANCE`` is flagged: the counterfactuals then rest on a model that does not reproduce the job.

Everything is vectorized over points, so the calculation is pure numpy after bucket formation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from itertools import product
from typing import Optional, Sequence

import numpy as np

from analyze.whatif.backward_profile import BackwardProfile
from analyze.whatif.inputs import WhatIfInputs
from analyze.whatif.model import ScalingModel
from analyze.model.findings import (
    HideBandwidth,
    Measured,
    NeededCompression,
    ReplayCheck,
    ScalingPoint,
    Sweep,
    SweepCurve,
    WhatIf,
)
from analyze.whatif.replay import HIDE_TOLERANCE, Counterfactual, Replay
from analyze.whatif.wire_replay import WireReplays, wire_assumptions, wire_replays
from analyze.whatif.verdict import verdict_text
from capture.units import ns_of

__all__ = ["what_if", "wire_what_if", "wire_scaling", "TARGETS", "REPLAY_TOLERANCE", "SWEEP_WORKERS"]

TARGETS: tuple[float, ...] = (0.90, 0.95, 0.99)
REPLAY_TOLERANCE = 0.03  # a replay missing the measured iteration by more (either way) is flagged
SWEEP_WORKERS: tuple[int, ...] = (8, 16, 32, 64, 128)
SWEEP_BANDWIDTHS_BPS: np.ndarray = np.unique(
    np.concatenate([np.logspace(np.log10(0.1e9), np.log10(400e9), 37), [1e9, 10e9, 25e9, 40e9, 100e9, 200e9, 400e9]])
)


def what_if(
    profile: BackwardProfile,
    single_iteration_time_s: float,
    model: ScalingModel,
    workers: Sequence[int],
    bandwidths_bps: Sequence[float],
    compressions: Sequence[float] = (1.0,),
    measured: Optional[WhatIfInputs] = None,
    single_worker_measured: bool = False,
    profile_measured: bool = False,
    assumptions: Sequence[str] = (),
) -> WhatIf:
    """Run the full what-if of a backward PROFILE under MODEL for every combination asked; see the module
    docstring for what comes out.

    ``single_worker_measured`` says T was given by the user (then a measured scaling factor T / period is
    reported when the run's iteration period is known). ``profile_measured`` says the profile was recorded,
    not made up from the run's totals: only then is the replay error computed, because a stand-in profile is
    built from the very measurement it would be checked against.
    """
    if single_iteration_time_s <= 0:
        raise ValueError("the single-GPU iteration time must be positive")
    replay = Replay(model, profile)
    result = _evaluate(
        replay,
        float(single_iteration_time_s),
        Asked(workers, bandwidths_bps, compressions),
        measured,
        single_worker_measured,
    )
    result.model, result.model_options = model.name, model.describe()
    result.profile = {
        "source": profile.source,
        "tensors": profile.tensors,
        "gradient_bytes": profile.gradient_bytes,
        "backward_ns": ns_of(replay.backward_s),
        "batches": int(profile.wait_s.shape[0]),
        "buckets": [bk.count for bk in replay.batches],
    }
    result.assumptions = [*assumptions, *model.assumptions(), *result.assumptions]
    if profile_measured and measured is not None:
        result.replay = _replay_measured(replay, float(single_iteration_time_s), measured, single_worker_measured)
    result.verdict = verdict_text(result, replay)
    return result


def wire_what_if(
    replays: WireReplays,
    workers: Sequence[int],
    bandwidths_bps: Sequence[float],
    compressions: Sequence[float] = (1.0,),
    measured: Optional[WhatIfInputs] = None,
    assumptions: Sequence[str] = (),
) -> WhatIf:
    """The what-if of the capture's own timeline (analyze.whatif.wire_replay): T and the overlap read from the
    wire, every point with its interval, and the replay of the measured iteration always checked."""
    replay = replays.point
    t = replay.single_iteration_time_s
    result = _evaluate(replay, t, Asked(workers, bandwidths_bps, compressions), measured, False, replays)
    fit = replays.fit
    if measured is not None and measured.link_speed_bps:
        link = measured.link_speed_bps
        edges = [
            float(edge.scaling_factor(edge.single_iteration_time_s, replay.workers, link / edge.efficiency)[0])
            for edge in (replays.fast, replays.slow, replay)
        ]
        fit = replace(fit, scaling_factor_low=min(edges), scaling_factor_high=max(edges))
    result.model, result.model_options = "wire", asdict(fit)
    del result.model_options["notes"]
    for key in ("backward_profiled_steps", "readiness"):  # as the wire fit itself writes them: only where set
        if result.model_options[key] is None:
            del result.model_options[key]
    result.wire = fit
    result.profile = {
        "source": "the capture's own iterations (analyze.wire.timeline)",
        "iterations": fit.iterations,
        "backward_ns": ns_of(replay.backward_s),
    }
    result.assumptions = [*assumptions, *wire_assumptions(fit), *result.assumptions]
    if measured is not None:
        result.replay = _replay_measured(replay, t, measured, False)
    result.verdict = verdict_text(result, replay)
    return result


def wire_scaling(
    measured: WhatIfInputs, workers: Sequence[int], bandwidths_bps: Sequence[float], compressions: Sequence[float]
) -> Optional[WhatIf]:
    """The wire what-if of a measured run whose iterations the wire shows (None where its timeline has no
    iteration that sent); the efficiency it measured replaces the hosts' utilization in MEASURED's record."""
    if measured.timeline is None or not measured.iteration_time_s or not measured.workers:
        return None
    replays = wire_replays(
        measured.timeline, measured.workers, measured.iteration_time_s, measured.transport_limited, measured.chained
    )
    if replays is None:
        return None
    unsure = measured.chained_unsure if measured.chained else measured.unsure
    inputs = replace(measured, transport_efficiency=replays.fit.efficiency, unsure=unsure)
    notes = [a for a in measured.assumptions if not a.startswith("transport efficiency")]
    if measured.chained and any(n != measured.workers for n in workers):
        notes.append(
            "at another worker count every byte is scaled as a collective's (N−1)/N: a pipeline's activations "
            "between stages do not scale so"
        )
    return wire_what_if(replays, workers, bandwidths_bps, compressions, inputs, notes)


@dataclass(frozen=True)
class Asked:
    """The (workers, bandwidth, compression) values asked, each list checked."""

    workers: Sequence[int]
    bandwidths_bps: Sequence[float]
    compressions: Sequence[float]

    def __post_init__(self) -> None:
        if not self.workers or not self.bandwidths_bps or not self.compressions:
            raise ValueError("give at least one value each for workers, bandwidth and compression")
        if (
            any(int(n) < 1 for n in self.workers)
            or any(c < 1 for c in self.compressions)
            or any(b <= 0 for b in self.bandwidths_bps)
        ):
            raise ValueError("workers must be ≥ 1, compression ≥ 1 and bandwidth > 0")


def _evaluate(
    replay: Counterfactual,
    t: float,
    asked: Asked,
    measured: Optional[WhatIfInputs],
    single_worker_measured: bool,
    bounds: Optional[WireReplays] = None,
) -> WhatIf:
    """Every point, the needed compression, the hiding bandwidth and the sweep of one replay (the model-specific
    fields are left for the caller)."""
    workers, bandwidths_bps, compressions = asked.workers, asked.bandwidths_bps, asked.compressions
    combos = list(
        product([int(n) for n in workers], [float(b) for b in bandwidths_bps], [float(c) for c in compressions])
    )
    w, b, c = (np.array(x) for x in zip(*combos))
    overhead, comm = replay.overhead_s(w, b, c), replay.comm_s(w, b, c)
    low, high = bounds.interval_s(w, b, c) if bounds is not None else (t + overhead, t + overhead)
    points = [
        ScalingPoint(
            int(n),
            float(bw),
            float(cr),
            ns_of(replay.backward_s),
            ns_of(float(o)),
            ns_of(float(cm)),
            t / (t + float(o)),
            iteration_ns=ns_of(t + float(o)),
            iteration_ns_low=ns_of(float(lo)),
            iteration_ns_high=ns_of(float(hi)),
        )
        for n, bw, cr, o, cm, lo, hi in zip(w, b, c, overhead, comm, low, high)
    ]

    nb = list(product(sorted({int(n) for n in workers}), sorted({float(x) for x in bandwidths_bps}), TARGETS))
    nw, nbw, nt = (np.array(x) for x in zip(*nb))
    needed = replay.needed_compression(t, nw, nbw, nt)
    needed_rows = [
        NeededCompression(int(n), float(bw), float(tau), None if np.isnan(x) else float(x))
        for n, bw, tau, x in zip(nw, nbw, nt, needed)
    ]

    asked_n = sorted({int(n) for n in workers})
    hide = replay.hide_bandwidth_bps(t, asked_n)
    hide_rows = [HideBandwidth(n, float(h)) for n, h in zip(asked_n, hide)]

    sweep_n = sorted(set(asked_n) | set(SWEEP_WORKERS))
    sweep_b = np.unique(np.concatenate([SWEEP_BANDWIDTHS_BPS, np.asarray(bandwidths_bps, dtype=np.float64)]))
    curves = []
    for n, cr in product(sweep_n, sorted({float(x) for x in compressions})):
        sf = replay.scaling_factor(t, n, sweep_b, cr)
        curves.append(SweepCurve(n, cr, sf.tolist()))

    return WhatIf(
        model="",
        model_options={},
        single_iteration_time_ns=ns_of(t),
        profile={},
        points=points,
        needed_compression=needed_rows,
        hide_bandwidth=hide_rows,
        hide_bandwidth_bps=float(hide[-1]),
        sweep=Sweep(sweep_b.tolist(), curves),
        measured=_measured(replay, t, measured, single_worker_measured) if measured is not None else None,
        assumptions=[
            f"hide bandwidth: above it a faster link gains < {HIDE_TOLERANCE:.1%} scaling factor; "
            f"given for N = {asked_n[-1]} (the largest N asked)",
        ],
        unsure=measured.unsure if measured is not None else None,
    )


def _measured(replay: Counterfactual, t: float, inputs: WhatIfInputs, single_worker_measured: bool) -> Measured:
    """The run as measured beside the model at full and at measured utilization of its own link."""
    out = Measured(
        workers=inputs.workers,
        link_speed_bps=inputs.link_speed_bps,
        iteration_time_ns=None if inputs.iteration_time_s is None else ns_of(inputs.iteration_time_s),
        gradient_bytes=inputs.gradient_bytes,
        comm_time_ns=None if inputs.comm_time_s is None else ns_of(inputs.comm_time_s),
        transport_efficiency=inputs.transport_efficiency,
        achieved_rate_bps=inputs.achieved_rate_bps(),
    )
    if inputs.workers and inputs.link_speed_bps:
        # a replay that sends at its own measured efficiency is asked for line rate as the speed it would
        # take that efficiency to reach it
        out.full_utilization_scaling_factor = float(
            replay.scaling_factor(t, inputs.workers, inputs.link_speed_bps / replay.efficiency)[0]
        )
        if inputs.transport_efficiency:
            out.scaling_factor_at_measured_efficiency = float(
                replay.scaling_factor(
                    t, inputs.workers, inputs.link_speed_bps * inputs.transport_efficiency / replay.efficiency
                )[0]
            )
    if single_worker_measured and inputs.iteration_time_s:
        out.measured_scaling_factor = t / inputs.iteration_time_s
    return out


def _replay_measured(
    replay: Counterfactual, t: float, inputs: WhatIfInputs, single_worker_measured: bool
) -> Optional[ReplayCheck]:
    """The measured iteration reproduced: the model at the run's N and rate while communicating (line rate ×
    measured efficiency, as ``scaling_factor_at_measured_efficiency``) gives T + overhead, beside the period.

    None when the run lacks a period, N or link speed: there is nothing to reproduce, or no condition to
    reproduce it at. Without a measured efficiency the replay runs at line rate. The error is taken from the
    two whole nanoseconds written beside it, so a replay that matches reads 0, not a rounding residue's sign.
    """
    measured_ns = round((inputs.iteration_time_s or 0.0) * 1e9)
    if not (measured_ns > 0 and inputs.workers and inputs.link_speed_bps):
        return None
    rate = inputs.link_speed_bps * (inputs.transport_efficiency or 1.0)
    modelled_ns = round((t + float(replay.overhead_s(inputs.workers, rate / replay.efficiency)[0])) * 1e9)
    error = modelled_ns / measured_ns - 1.0
    return ReplayCheck(
        measured_iteration_ns=measured_ns,
        modelled_iteration_ns=modelled_ns,
        error=error,
        flagged=abs(error) > REPLAY_TOLERANCE,
        workers=inputs.workers,
        bandwidth_bps=rate,
        single_iteration_time_given=single_worker_measured,
    )

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

from dataclasses import dataclass, field
from itertools import product
from typing import Any, Optional, Sequence

import numpy as np

from analyze.whatif.backward_profile import BackwardProfile
from analyze.whatif.inputs import WhatIfInputs
from analyze.whatif.model import ScalingModel
from analyze.whatif.gradient_buckets import fifo_finish_s

__all__ = [
    "Replay",
    "ScalingPoint",
    "WhatIfResult",
    "what_if",
    "TARGETS",
    "HIDE_TOLERANCE",
    "REPLAY_TOLERANCE",
    "SWEEP_WORKERS",
]

TARGETS: tuple[float, ...] = (0.90, 0.95, 0.99)
HIDE_TOLERANCE = 0.001
REPLAY_TOLERANCE = 0.10  # a replay missing the measured iteration by more (either way) is flagged
SWEEP_WORKERS: tuple[int, ...] = (8, 16, 32, 64, 128)
SWEEP_BANDWIDTHS_BPS: np.ndarray = np.unique(
    np.concatenate([np.logspace(np.log10(0.1e9), np.log10(400e9), 37), [1e9, 10e9, 25e9, 40e9, 100e9, 200e9, 400e9]])
)
_MAX_COMPRESSION = 1e6
_INFINITE_BPS = 1e18


class Replay:
    """A model bound to a profile: buckets formed once, then overheads for any array of points."""

    def __init__(self, model: ScalingModel, profile: BackwardProfile) -> None:
        self.model = model
        self.profile = profile
        self.batches = model.buckets(profile)
        self.backward_s = profile.backward_s

    def overhead_s(self, workers: Any, bandwidth_bps: Any, compression: Any = 1.0) -> np.ndarray:
        """Exposed communication after backward (seconds), averaged over profiled batches, one per point."""
        w, b, c = (
            np.atleast_1d(np.asarray(x, dtype=np.float64))
            for x in np.broadcast_arrays(workers, bandwidth_bps, compression)
        )
        total = np.zeros(w.shape[0])
        for buckets in self.batches:
            cost = self.model.cost_s(buckets.size_bytes, w, b, c)
            total += fifo_finish_s(buckets, cost) - buckets.backward_s
        return np.maximum(total / max(len(self.batches), 1), 0.0)

    def comm_s(self, workers: Any, bandwidth_bps: Any, compression: Any = 1.0) -> np.ndarray:
        """Total all-reduce time of one iteration (busy time of the queue), averaged over batches."""
        w, b, c = (
            np.atleast_1d(np.asarray(x, dtype=np.float64))
            for x in np.broadcast_arrays(workers, bandwidth_bps, compression)
        )
        total = np.zeros(w.shape[0])
        for buckets in self.batches:
            total += self.model.cost_s(buckets.size_bytes, w, b, c).sum(axis=0)
        return total / max(len(self.batches), 1)

    def scaling_factor(
        self, single_iteration_time_s: float, workers: Any, bandwidth_bps: Any, compression: Any = 1.0
    ) -> np.ndarray:
        """T / (T + overhead) per point."""
        t = single_iteration_time_s
        return t / (t + self.overhead_s(workers, bandwidth_bps, compression))

    def needed_compression(
        self, single_iteration_time_s: float, workers: Any, bandwidth_bps: Any, target: Any
    ) -> np.ndarray:
        """Smallest compression ratio ≥ 1 reaching ``target``; NaN where no ratio can (bisection in log c)."""
        w, b, tau = (
            np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in np.broadcast_arrays(workers, bandwidth_bps, target)
        )
        allowed = single_iteration_time_s * (1.0 / tau - 1.0)
        lo, hi = np.zeros_like(w), np.full_like(w, np.log10(_MAX_COMPRESSION))
        for _ in range(64):
            mid = (lo + hi) / 2
            ok = self.overhead_s(w, b, 10.0**mid) <= allowed
            hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
        out = 10.0**hi
        out[self.overhead_s(w, b, 1.0) <= allowed] = 1.0
        out[self.overhead_s(w, b, _MAX_COMPRESSION) > allowed] = np.nan
        return out

    def hide_bandwidth_bps(self, single_iteration_time_s: float, workers: Any, compression: Any = 1.0) -> np.ndarray:
        """Smallest bandwidth whose overhead is within HIDE_TOLERANCE·T of the infinite-bandwidth overhead."""
        w, c = (np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in np.broadcast_arrays(workers, compression))
        allowed = self.overhead_s(w, _INFINITE_BPS, c) + HIDE_TOLERANCE * single_iteration_time_s
        lo, hi = np.full_like(w, 3.0), np.full_like(w, np.log10(_INFINITE_BPS))
        for _ in range(64):
            mid = (lo + hi) / 2
            ok = self.overhead_s(w, 10.0**mid, c) <= allowed
            hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
        return 10.0**hi


@dataclass(frozen=True)
class ScalingPoint:
    """One what-if: the scaling factor for N workers on a fully used link of B bit/s with compression c."""

    workers: int
    bandwidth_bps: float
    compression: float
    backward_s: float
    overhead_s: float
    comm_s: float
    scaling_factor: float


@dataclass
class WhatIfResult:
    """Everything `ringscope whatif` reports; ``to_dict`` is the JSON under the key ``scaling``."""

    model: str
    model_options: dict[str, Any]
    single_iteration_time_s: float
    profile: dict[str, Any]
    points: list[ScalingPoint]
    needed_compression: list[dict[str, Any]]
    hide_bandwidth: list[dict[str, Any]]
    hide_bandwidth_bps: Optional[float]
    sweep: dict[str, Any]
    measured: Optional[dict[str, Any]]
    assumptions: list[str] = field(default_factory=list)
    verdict: str = ""
    replay: Optional[dict[str, Any]] = None
    unsure: Optional[dict[str, Any]] = None  # analyze.doubt: the verdict rests on inputs that are not sure

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN written as null); ``replay`` only when there is one, so the what-if that
        `ringscope analyze` adds with its stand-in profile keeps its keys."""
        return _clean(
            {
                "model": self.model,
                "model_options": self.model_options,
                "single_iteration_time_s": self.single_iteration_time_s,
                "profile": self.profile,
                "points": [p.__dict__ for p in self.points],
                "needed_compression": self.needed_compression,
                "hide_bandwidth_bps": self.hide_bandwidth_bps,
                "hide_bandwidth": self.hide_bandwidth,
                "sweep": self.sweep,
                "measured": self.measured,
                "assumptions": self.assumptions,
                "verdict": self.verdict,
                **({"replay": self.replay} if self.replay is not None else {}),
                **({"unsure": self.unsure} if self.unsure is not None else {}),
            }
        )


def _clean(value: Any) -> Any:
    """Make numpy scalars plain and NaN/inf null, recursively."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


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
) -> WhatIfResult:
    """Run the full what-if for every combination asked; see the module docstring for what comes out.

    ``single_worker_measured`` says T was given by the user (then a measured scaling factor T / period is
    reported when the run's iteration period is known). ``profile_measured`` says the profile was recorded,
    not made up from the run's totals: only then is the replay error computed, because a stand-in profile is
    built from the very measurement it would be checked against.
    """
    from analyze.whatif.verdict import verdict_text

    if single_iteration_time_s <= 0:
        raise ValueError("the single-GPU iteration time must be positive")
    if not workers or not bandwidths_bps or not compressions:
        raise ValueError("give at least one value each for workers, bandwidth and compression")
    if any(int(n) < 1 for n in workers) or any(c < 1 for c in compressions) or any(b <= 0 for b in bandwidths_bps):
        raise ValueError("workers must be ≥ 1, compression ≥ 1 and bandwidth > 0")
    replay = Replay(model, profile)
    t = float(single_iteration_time_s)
    combos = list(
        product([int(n) for n in workers], [float(b) for b in bandwidths_bps], [float(c) for c in compressions])
    )
    w, b, c = (np.array(x) for x in zip(*combos))
    overhead, comm = replay.overhead_s(w, b, c), replay.comm_s(w, b, c)
    points = [
        ScalingPoint(int(n), float(bw), float(cr), replay.backward_s, float(o), float(cm), t / (t + float(o)))
        for n, bw, cr, o, cm in zip(w, b, c, overhead, comm)
    ]

    nb = list(product(sorted({int(n) for n in workers}), sorted({float(x) for x in bandwidths_bps}), TARGETS))
    nw, nbw, nt = (np.array(x) for x in zip(*nb))
    needed = replay.needed_compression(t, nw, nbw, nt)
    needed_rows = [
        {
            "workers": int(n),
            "bandwidth_bps": float(bw),
            "target": float(tau),
            "compression": None if np.isnan(x) else float(x),
        }
        for n, bw, tau, x in zip(nw, nbw, nt, needed)
    ]

    asked_n = sorted({int(n) for n in workers})
    hide = replay.hide_bandwidth_bps(t, asked_n)
    hide_rows = [{"workers": n, "bandwidth_bps": float(h)} for n, h in zip(asked_n, hide)]

    sweep_n = sorted(set(asked_n) | set(SWEEP_WORKERS))
    sweep_b = np.unique(np.concatenate([SWEEP_BANDWIDTHS_BPS, np.asarray(bandwidths_bps, dtype=np.float64)]))
    curves = []
    for n, cr in product(sweep_n, sorted({float(x) for x in compressions})):
        sf = replay.scaling_factor(t, n, sweep_b, cr)
        curves.append({"workers": n, "compression": cr, "scaling_factor": sf.tolist()})

    result = WhatIfResult(
        model=model.name,
        model_options=model.describe(),
        single_iteration_time_s=t,
        profile={
            "source": profile.source,
            "tensors": profile.tensors,
            "gradient_bytes": profile.gradient_bytes,
            "backward_s": replay.backward_s,
            "batches": int(profile.wait_s.shape[0]),
            "buckets": [bk.count for bk in replay.batches],
        },
        points=points,
        needed_compression=needed_rows,
        hide_bandwidth=hide_rows,
        hide_bandwidth_bps=float(hide[-1]),
        sweep={"bandwidths_bps": sweep_b.tolist(), "curves": curves},
        measured=_measured(replay, t, measured, single_worker_measured) if measured is not None else None,
        assumptions=[
            *assumptions,
            *model.assumptions(),
            f"hide bandwidth: above it a faster link gains < {HIDE_TOLERANCE:.1%} scaling factor; "
            f"given for N = {asked_n[-1]} (the largest N asked)",
        ],
        replay=_replay_measured(replay, t, measured, single_worker_measured)
        if profile_measured and measured is not None
        else None,
        unsure=measured.unsure if measured is not None else None,
    )
    result.verdict = verdict_text(result, replay)
    return result


def _measured(replay: Replay, t: float, inputs: WhatIfInputs, single_worker_measured: bool) -> dict[str, Any]:
    """The run as measured beside the model at full and at measured utilization of its own link."""
    out: dict[str, Any] = inputs.to_dict()
    if inputs.workers and inputs.link_speed_bps:
        out["full_utilization_scaling_factor"] = float(
            replay.scaling_factor(t, inputs.workers, inputs.link_speed_bps)[0]
        )
        if inputs.transport_efficiency:
            out["scaling_factor_at_measured_efficiency"] = float(
                replay.scaling_factor(t, inputs.workers, inputs.link_speed_bps * inputs.transport_efficiency)[0]
            )
    if single_worker_measured and inputs.iteration_time_s:
        out["measured_scaling_factor"] = t / inputs.iteration_time_s
    return out


def _replay_measured(
    replay: Replay, t: float, inputs: WhatIfInputs, single_worker_measured: bool
) -> Optional[dict[str, Any]]:
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
    modelled_ns = round((t + float(replay.overhead_s(inputs.workers, rate)[0])) * 1e9)
    error = modelled_ns / measured_ns - 1.0
    return {
        "measured_iteration_ns": measured_ns,
        "modelled_iteration_ns": modelled_ns,
        "error": error,
        "flagged": abs(error) > REPLAY_TOLERANCE,
        "workers": inputs.workers,
        "bandwidth_bps": rate,
        "single_iteration_time_given": single_worker_measured,
    }

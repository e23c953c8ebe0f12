"""A what-if from what the user gave and what the run measured: options first, then the run's measurements,
then stated guesses (every one in the result's assumptions). `what_if_request` takes typed values (a notebook
calls it directly); `what_if_options` takes the option strings `ringscope whatif` is given ('10G,25G', '128ms')
and parses them into those values. User errors are ValueError with one clear line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TypeVar

from analyze.model.findings import WhatIf
from analyze.whatif.backward_profile import ReduceCostTable, load_profile, load_reduce_cost, stand_in_profile
from analyze.whatif.calculation import what_if, wire_scaling
from analyze.whatif.inputs import WhatIfInputs
from analyze.whatif.model import RingscopeModel, RingscopeOptions
from analyze.whatif.paper import PaperModel
from analyze.whatif.replay import Replay
from capture.units import parse_duration, parse_link_speed

__all__ = ["what_if_request", "what_if_options", "WhatIfOptions", "split_values"]

T = TypeVar("T")


def what_if_request(
    measured: Optional[WhatIfInputs],
    *,
    model: str = "ringscope",
    profile: Optional[Path] = None,
    single_iteration_time_s: Optional[float] = None,
    reduce_cost: Optional[Path] = None,
    workers: Sequence[int] = (),
    bandwidths_bps: Sequence[float] = (),
    compressions: Sequence[float] = (),
    latency_s: float = 10e-6,
    gpus_per_server: int = 1,
    intra_bandwidth_bps: float = 1.2e12,
    buckets: str = "horovod",
    fp16: bool = False,
    efficiency: Optional[float] = None,
) -> WhatIf:
    """Resolve N, bandwidth, T and the profile, choose the model, run the what-if."""
    notes: list[str] = list(measured.assumptions) if measured else []
    n_list = list(workers) or ([measured.workers] if measured and measured.workers else [])
    b_list = list(bandwidths_bps) or ([measured.link_speed_bps] if measured and measured.link_speed_bps else [])
    c_list = list(compressions) or [1.0]
    if not n_list:
        raise ValueError("say how many workers: --workers N (or give a run/result that has hosts)")
    if not b_list:
        raise ValueError("say which bandwidth: --bandwidth RATE, e.g. 25G (or give a run/result with link speeds)")
    if measured is not None:
        measured.check_link_speed()
    table = load_reduce_cost(reduce_cost) if reduce_cost is not None else None
    given = load_profile(profile) if profile is not None else None
    chosen = _model(model, table, latency_s, gpus_per_server, intra_bandwidth_bps, buckets, fp16, efficiency)
    if model == "ringscope" and given is None and single_iteration_time_s is None and efficiency is None:
        # the wire model replays the capture itself: a refinement asked of the ring model (GPUs per server, fp16,
        # buckets, latency, a reduction table) is not one it has, so asking for one keeps the ring model, and says so
        if chosen.options == RingscopeOptions() and table is None:
            wire = wire_scaling(measured, n_list, b_list, c_list) if measured is not None else None
            if wire is not None:
                return wire
        elif measured is not None and measured.timeline is not None:
            notes.append("the ring model's refinements were asked for: the wire model (the default) was not used")
    if single_iteration_time_s is not None:
        t = single_iteration_time_s
    elif given is not None and measured and measured.iteration_time_s:
        t = _reproducing_t(Replay(chosen, given), measured)
        notes.append(
            f"single-GPU iteration time not given: T = {t * 1e3:.4g} ms, the measured period less the exposed "
            "communication the profile's replay gives at the run's own N, link and efficiency (so the replay "
            "reproduces the measured iteration)"
        )
    elif measured and measured.iteration_time_s:
        comm = measured.comm_time_s or 0.0
        t = measured.iteration_time_s - comm if 0 < comm < measured.iteration_time_s else measured.iteration_time_s
        notes.append(
            "single-GPU iteration time not given: taken as the measured iteration period"
            + (" minus its communication time (all communication assumed exposed)" if comm else "")
        )
    else:
        raise ValueError("say the single-GPU iteration time: --single-iteration-time SECONDS (e.g. 0.128 or 128ms)")
    if given is not None:
        prof = given
        if measured and measured.gradient_bytes and abs(prof.gradient_bytes / measured.gradient_bytes - 1) > 0.1:
            notes.append(
                f"the profile has {prof.gradient_bytes / 1e6:.1f} MB of gradients, the capture implies "
                f"{measured.gradient_bytes / 1e6:.1f} MB"
            )
    elif measured and measured.gradient_bytes:
        prof, note = stand_in_profile(measured.gradient_bytes, t)
        notes.append(note)
    else:
        raise ValueError("give a backward profile: --profile FILE (from `ringscope profile`, .bk.log, JSON or CSV)")
    return what_if(
        prof,
        t,
        chosen,
        n_list,
        b_list,
        c_list,
        measured=measured,
        single_worker_measured=single_iteration_time_s is not None,
        profile_measured=profile is not None,
        assumptions=notes,
    )


def _model(
    name: str,
    table: Optional[ReduceCostTable],
    latency_s: float,
    gpus_per_server: int,
    intra_bandwidth_bps: float,
    buckets: str,
    fp16: bool,
    efficiency: Optional[float],
) -> Any:
    """The paper's model, exact, or ringscope's with its refinements."""
    if name == "paper":
        return PaperModel(table)
    if name == "ringscope":
        return RingscopeModel(
            RingscopeOptions(
                latency_s=latency_s,
                gpus_per_server=gpus_per_server,
                intra_bandwidth_bps=intra_bandwidth_bps,
                buckets=buckets,
                fp16=fp16,
                transport_efficiency=1.0 if efficiency is None else efficiency,
            ),
            table,
        )
    raise ValueError(f"unknown model {name!r}: use 'paper' or 'ringscope'")


def _reproducing_t(replay: Replay, measured: WhatIfInputs) -> float:
    """T such that T plus the profile's exposed communication at the run's own N and rate while communicating
    is the measured period; a ValueError where none is (the profile's backward and communication alone outlast
    the iteration: it is not this job's)."""
    period = measured.iteration_time_s or 0.0
    if not (measured.workers and measured.link_speed_bps):
        return period
    rate = measured.link_speed_bps * (measured.transport_efficiency or 1.0)
    exposed = float(replay.overhead_s(measured.workers, rate)[0])
    if exposed >= period:
        raise ValueError(
            f"the profile cannot reproduce the measured iteration: its communication left exposed after backward "
            f"at the run's own speed ({exposed * 1e3:.4g} ms) is longer than the iteration ({period * 1e3:.4g} ms); "
            "check it is this job's model, batch and bucket rule (--buckets), or give --single-iteration-time"
        )
    return period - exposed


@dataclass(frozen=True)
class WhatIfOptions:
    """`ringscope whatif`'s options as the command line takes them: times in seconds or with a unit ('0.128',
    '128ms'), rates with a unit ('25G'), lists as repeated values and/or comma lists ('8,16')."""

    model: str = "ringscope"
    profile: Optional[Path] = None
    single_iteration_time: Optional[str] = None
    reduce_cost: Optional[Path] = None
    workers: Sequence[str] = ()
    bandwidth: Sequence[str] = ()
    compression: Sequence[str] = ()
    latency: str = "10us"
    gpus_per_server: int = 1
    intra_bandwidth: str = "1.2Tbit"
    buckets: str = "horovod"
    fp16: bool = False
    efficiency: Optional[float] = None


def what_if_options(measured: Optional[WhatIfInputs], options: WhatIfOptions) -> WhatIf:
    """`what_if_request` from the option strings, each parsed (a bad one is a ValueError naming it)."""
    o = options
    return what_if_request(
        measured,
        model=o.model,
        profile=o.profile,
        single_iteration_time_s=_seconds(o.single_iteration_time) if o.single_iteration_time is not None else None,
        reduce_cost=o.reduce_cost,
        workers=split_values(o.workers, _positive_int, "worker count"),
        bandwidths_bps=split_values(o.bandwidth, parse_link_speed, "bandwidth"),
        compressions=split_values(o.compression, _ratio, "compression ratio"),
        latency_s=_seconds(o.latency),
        gpus_per_server=o.gpus_per_server,
        intra_bandwidth_bps=parse_link_speed(o.intra_bandwidth),
        buckets=o.buckets,
        fp16=o.fp16,
        efficiency=o.efficiency,
    )


def split_values(values: Optional[Sequence[str]], parse: Callable[[str], T], what: str) -> list[T]:
    """Values from repeated options and/or comma (or space) separated lists: ['4,8', '16'] → [4, 8, 16]."""
    out: list[T] = []
    for value in values or ():
        for item in re.split(r"[,\s]+", str(value).strip()):
            if not item:
                continue
            try:
                out.append(parse(item))
            except ValueError as exc:
                raise ValueError(f"bad {what} {item!r}: {exc}") from exc
    return out


def _seconds(text: str) -> float:
    """A time in seconds: a bare number ('0.128') or a duration with unit ('128ms')."""
    return parse_duration(text) / 1e9


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _ratio(text: str) -> float:
    value = float(text)
    if not value >= 1:
        raise ValueError("must be ≥ 1 (1 = no compression)")
    return value

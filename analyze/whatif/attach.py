"""The what-if inside `ringscope analyze`: the result's `scaling` key, whenever the run allows it.

`add_whatif` runs after `add_collective`. It needs N ≥ 2 captured hosts, a link speed that was measured
or given (not the analyzer's 10 Gbit/s stand-in), and iterations with a period and implied gradient bytes.
It then runs the same calculation as `ringscope whatif RESULT.json [--single-iteration-time T]` with the
default ringscope model: one point (N, link speed), the sweep, the compression needed and the verdict. A job whose
pattern the ring model does not cover (sharded data parallel, pipeline) gets the link bounds instead
(`link_bound`, analyze.whatif.link_bound), never the ring model's numbers, and beside them the wire model's
prediction with chained readiness (analyze.whatif.wire_replay) where the wire shows its iterations.
Everything taken or guessed is in ``scaling.assumptions``. The calculation costs ~20 ms (pure numpy).
"""

from __future__ import annotations

from typing import Optional

from analyze.confidence.doubt import UNMODELLED
from analyze.whatif.backward_profile import stand_in_profile
from analyze.whatif.calculation import what_if, wire_scaling
from analyze.whatif.inputs import WhatIfInputs, inputs_from_result
from analyze.model.findings import WhatIf
from analyze.whatif.link_bound import link_bound
from analyze.whatif.model import RingscopeModel
from analyze.model.result import Result

__all__ = ["add_whatif", "scaling_inputs", "single_iteration_time"]


def scaling_inputs(result: Result) -> WhatIfInputs:
    """The what-if inputs of a Result (its hosts, iterations, topology and capture problems)."""
    return inputs_from_result(result)


def single_iteration_time(measured: WhatIfInputs, given_s: Optional[float]) -> tuple[Optional[float], Optional[str]]:
    """T and, when it was not given, the note saying how it was guessed (as `ringscope whatif` does)."""
    if given_s is not None:
        return float(given_s), None
    if not measured.iteration_time_s:
        return None, None
    comm = measured.comm_time_s or 0.0
    if 0 < comm < measured.iteration_time_s:
        return (
            measured.iteration_time_s - comm,
            "single-GPU iteration time not given: taken as the measured iteration period minus its "
            "communication time (all communication assumed exposed)",
        )
    return measured.iteration_time_s, "single-GPU iteration time not given: taken as the measured iteration period"


def add_whatif(result: Result, single_iteration_time_s: Optional[float] = None) -> None:
    """Set the what-if on the result (result.scaling) when the inputs allow it; else leave it None.

    When only the link speed is missing, the result's assumptions say so (the verdict would otherwise be
    about a link speed nobody measured).
    """
    its = result.iterations
    measured = scaling_inputs(result)
    if its is not None and its.pattern is not None and its.pattern.kind in UNMODELLED:
        # a sharded or pipeline job, never the ring model: its link bounds (a floor no schedule beats) and,
        # where the wire shows its iterations, the wire model's prediction with chained readiness
        result.link_bound = link_bound(result, single_iteration_time_s)
        result.scaling = _chained_wire(result, measured) if single_iteration_time_s is None else None
        return
    if not measured.workers or measured.workers < 2 or not measured.gradient_bytes:
        return
    t, note = single_iteration_time(measured, single_iteration_time_s)
    if t is None or t <= 0:
        return
    refused = _link_speed_refused(result, measured)
    if refused or not measured.link_speed_bps:
        result.assumptions.append(f"no what-if (scaling) section: {refused}")
        return
    if single_iteration_time_s is None and measured.timeline is not None and measured.iteration_time_s:
        wire = _wire(result, measured)
        if wire is not None:
            result.scaling = wire
            return
        measured.assumptions.append(
            "the wire model cannot replay these iterations (the hosts communicate longer than the measured period "
            "allows, T would not be positive): "
            "the ring model instead"
        )
    notes = list(measured.assumptions)
    if any(h.link_speed_source == "cli" for h in result.hosts):
        notes.append("link speed as given with --link-speed")
    if note:
        notes.append(note)
    profile, stand_in = stand_in_profile(measured.gradient_bytes, t)
    notes.append(f"{stand_in} (`ringscope whatif --profile` refines it)")
    out = what_if(
        profile,
        t,
        RingscopeModel(),
        [measured.workers],
        [measured.link_speed_bps],
        [1.0],
        measured=measured,
        single_worker_measured=single_iteration_time_s is not None,
        assumptions=notes,
    )
    result.scaling = out


def _wire(result: Result, measured: WhatIfInputs) -> Optional[WhatIf]:
    """The wire what-if at the run's own N and link (None where the wire cannot replay it)."""
    wire = wire_scaling(measured, [measured.workers or 0], [measured.link_speed_bps or 0.0], [1.0])
    if wire is not None and any(h.link_speed_source == "cli" for h in result.hosts):
        wire.assumptions.insert(0, "link speed as given with --link-speed")
    return wire


def _link_speed_refused(result: Result, measured: WhatIfInputs) -> Optional[str]:
    """Why the hosts' link speed cannot carry a prediction (unknown, or slower than they sent); None when it can."""
    unknown = [h.name for h in result.hosts if h.link_speed_source == "assumed"]
    if unknown:
        return (
            f"the link speed of {', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''} is unknown; "
            "give --link-speed"
        )
    if not measured.link_speed_bps:
        return "the hosts' link speed is unknown; give --link-speed"
    try:
        measured.check_link_speed()
    except ValueError as exc:
        return str(exc)
    return None


def _chained_wire(result: Result, measured: WhatIfInputs) -> Optional[WhatIf]:
    """A sharded or pipeline job's wire what-if (chained readiness), where its link speeds are known, the hosts
    sent no faster than them and the wire shows its iterations; else None, saying why where the link speed is
    the cause (the link bounds serve where that speed is known)."""
    if not measured.chained or not measured.workers or measured.workers < 2:
        return None
    if measured.timeline is None or not measured.iteration_time_s:
        return None
    refused = _link_speed_refused(result, measured)
    if refused:
        result.assumptions.append(f"no what-if (scaling) section: {refused}")  # the ring path's words
        return None
    return _wire(result, measured)

"""`ringscope whatif`: turn command-line strings and an optional run/result into a what-if, print and write it.

Kept out of cli.py so the command stays a few lines and this logic stays testable without typer. Every
user error is raised as ValueError with one clear line; cli.py turns it into `ringscope: error: ...`.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TypeVar

from capture.units import parse_duration, parse_rate

__all__ = ["split_values", "parse_seconds", "load_result", "run_whatif", "run_profile"]

T = TypeVar("T")


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


def parse_seconds(text: str) -> float:
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


def load_result(path: Path) -> dict[str, Any]:
    """The analyzer's result as a dict: a result JSON file, or a run directory analyzed now."""
    if path.is_dir():
        from analyze.api import analyze as analyze_run
        from analyze.read.formats import FileError

        try:
            return analyze_run([path]).to_json()
        except FileError as exc:
            raise ValueError(str(exc)) from None
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ValueError(f"{path}: not a result JSON (from `ringscope analyze --json`): {exc}") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object (from `ringscope analyze --json`)")
    return doc


def run_whatif(source: Optional[Path], model: str = "ringscope", profile: Optional[Path] = None,
               single_iteration_time: Optional[str] = None, reduce_cost: Optional[Path] = None,
               workers: Sequence[str] = (), bandwidth: Sequence[str] = (), compression: Sequence[str] = (),
               latency: str = "10us", gpus_per_server: int = 1, intra_bandwidth: str = "1.2Tbit",
               buckets: str = "horovod", fp16: bool = False, efficiency: Optional[float] = None,
               json_out: Optional[Path] = None) -> dict[str, Any]:
    """Resolve inputs (options first, then the run's measurements, then stated guesses), run, print, write."""
    from analyze.whatif.backward_profile import load_profile, load_reduce_cost, stand_in_profile
    from analyze.whatif.calculation import what_if
    from analyze.whatif.inputs import WhatIfInputs, inputs_from_result
    from analyze.whatif.model import RingscopeModel, RingscopeOptions
    from analyze.whatif.paper import PaperModel
    from analyze.whatif.verdict import render_text

    measured: Optional[WhatIfInputs] = inputs_from_result(load_result(source)) if source is not None else None
    notes: list[str] = list(measured.assumptions) if measured else []
    n_list = split_values(workers, _positive_int, "worker count") or ([measured.workers] if measured and measured.workers else [])
    b_list = split_values(bandwidth, parse_rate, "bandwidth") or ([measured.link_speed_bps] if measured and measured.link_speed_bps else [])
    c_list = split_values(compression, _ratio, "compression ratio") or [1.0]
    if not n_list:
        raise ValueError("say how many workers: --workers N (or give a run/result that has hosts)")
    if not b_list:
        raise ValueError("say which bandwidth: --bandwidth RATE, e.g. 25G (or give a run/result with link speeds)")
    if single_iteration_time is not None:
        t = parse_seconds(single_iteration_time)
    elif measured and measured.iteration_time_s:
        comm = measured.comm_time_s or 0.0
        t = measured.iteration_time_s - comm if 0 < comm < measured.iteration_time_s else measured.iteration_time_s
        notes.append("single-GPU iteration time not given: taken as the measured iteration period"
                     + (" minus its communication time (all communication assumed exposed)" if comm else ""))
    else:
        raise ValueError("say the single-GPU iteration time: --single-iteration-time SECONDS (e.g. 0.128 or 128ms)")
    if profile is not None:
        prof = load_profile(profile)
        if measured and measured.gradient_bytes and abs(prof.gradient_bytes / measured.gradient_bytes - 1) > 0.1:
            notes.append(f"the profile has {prof.gradient_bytes / 1e6:.1f} MB of gradients, the capture implies "
                         f"{measured.gradient_bytes / 1e6:.1f} MB")
    elif measured and measured.gradient_bytes:
        prof, note = stand_in_profile(measured.gradient_bytes, t)
        notes.append(note)
    else:
        raise ValueError("give a backward profile: --profile FILE (from `ringscope profile`, .bk.log, JSON or CSV)")
    table = load_reduce_cost(reduce_cost) if reduce_cost is not None else None
    if model == "paper":
        chosen: Any = PaperModel(table)
    elif model == "ringscope":
        chosen = RingscopeModel(RingscopeOptions(
            latency_s=parse_seconds(latency), gpus_per_server=gpus_per_server,
            intra_bandwidth_bps=parse_rate(intra_bandwidth), buckets=buckets, fp16=fp16,
            transport_efficiency=1.0 if efficiency is None else efficiency), table)
    else:
        raise ValueError(f"unknown model {model!r}: use 'paper' or 'ringscope'")
    result = what_if(prof, t, chosen, n_list, b_list, c_list, measured=measured,
                     single_worker_measured=single_iteration_time is not None, profile_measured=profile is not None,
                     assumptions=notes)
    doc = {"scaling": result.to_dict()}
    if json_out is not None and str(json_out) == "-":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(render_text(result))
        if json_out is not None:
            try:
                json_out.write_text(json.dumps(doc, indent=1) + "\n")
            except OSError as exc:
                raise ValueError(f"{json_out}: cannot write: {exc.strerror or exc}") from exc
    return doc


def run_profile(spec: str, batch_size: int = 32, device: str = "auto", steps: int = 5,
                out: Optional[Path] = None) -> None:
    """`ringscope profile`: measure, then print a summary or write the profile (.json / .csv / .bk.log)."""
    import tempfile

    from analyze.whatif.backward_profile import save_profile
    from analyze.whatif.torch_profile import profile_spec

    prof = profile_spec(spec, batch_size=batch_size, device=device, steps=steps)
    if out is not None and str(out) == "-":
        with tempfile.TemporaryDirectory() as tmp:
            save_profile(prof, Path(tmp) / "profile.json")
            sys.stdout.write((Path(tmp) / "profile.json").read_text())
        return
    print(f"{spec}: {prof.tensors} gradient tensors, {prof.gradient_bytes / 1e6:.2f} MB, backward "
          f"{prof.meta['backward_s'] * 1e3:.2f} ms on {prof.meta['device']} (batch {batch_size}, mean of {steps} steps)")
    if out is not None:
        try:
            save_profile(prof, out)
        except OSError as exc:
            raise ValueError(f"{out}: cannot write: {exc.strerror or exc}") from exc
        print(f"wrote {out}")

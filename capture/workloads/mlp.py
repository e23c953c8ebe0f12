"""The model, data and bookkeeping shared by the DDP, FSDP and Horovod workloads: an MLP of roughly --params
parameters, torch.distributed's start, and the line rank 0 prints at the end."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from typing import Any, Iterator, NoReturn

from capture import markers

DEPTH = 4


def width_for(params: int) -> int:
    """Width w such that DEPTH square layers (w*w weights + w biases each) hold about PARAMS."""
    return max(1, int(round((-1 + math.sqrt(1 + 4 * params / DEPTH)) / 2)))


def build(params: int):
    """nn.Sequential of DEPTH Linear(w, w) layers with ReLUs between them."""
    import torch.nn as nn

    width = width_for(params)
    layers: list[nn.Module] = []
    for i in range(DEPTH):
        layers.append(nn.Linear(width, width))
        if i + 1 < DEPTH:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers), width


def gradient_bytes(model) -> int:
    """Bytes all-reduced per iteration: every trainable parameter's gradient."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def add_arguments(parser) -> None:
    parser.add_argument("--params", type=int, default=1_000_000, help="approximate parameter count")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)


def start_torch(choice: str) -> tuple[str, Any, int, int]:
    """init_process_group on the backend asked for (auto: nccl when CUDA is available, else gloo), on this local
    rank's device; (backend, device, rank, world size)."""
    import torch
    import torch.distributed as dist

    backend = choice if choice != "auto" else ("nccl" if torch.cuda.is_available() else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    return backend, device, dist.get_rank(), dist.get_world_size()


def report(workload: str, args: Any, seconds: float, loss: float, **fields: Any) -> None:
    """Rank 0's one JSON line when training ends: what ran, for how long, and the last loss."""
    out = {"workload": workload, **fields, "iters": args.iters, "seconds": round(seconds, 3), "loss": loss}
    print(json.dumps(out), flush=True)


def step(model: Any, optimizer: Any, inputs: Any, targets: Any, accumulate: int = 1, quiet: Any = None) -> Any:
    """One optimizer step of the MLP, finished on the device; its loss. With `accumulate` micro-batches the
    gradients of all but the last are kept local under `quiet` (DDP's no_sync): one synchronisation per step."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    for k in range(accumulate):
        with quiet() if quiet is not None and k + 1 < accumulate else contextlib.nullcontext():
            loss = torch.nn.functional.mse_loss(model(inputs), targets) / accumulate
            loss.backward()
    optimizer.step()
    if inputs.device.type == "cuda":
        torch.cuda.synchronize()
    return loss


def busy_compute(seconds: float, width: int = 256) -> int:
    """Arithmetic (matrix products) for SECONDS of wall time, not a sleep: the rank computes while the others
    wait on it, as a throttled or overloaded accelerator would. Returns the nanoseconds it took."""
    import torch

    started = time.perf_counter_ns()
    a = torch.randn(width, width)
    while time.perf_counter_ns() - started < seconds * 1e9:
        a = torch.tanh(a @ a)
    return time.perf_counter_ns() - started


@contextlib.contextmanager
def _profiled(folder: Any, rank: int) -> Iterator[None]:
    """torch.profiler (CPU) around the loop when FOLDER is given: FOLDER/rank<R>.pt.trace.json, a Kineto trace of
    this rank's compute and collectives, as a user would record one and give to `ringscope analyze --trace-beside`."""
    if not folder:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield
    os.makedirs(folder, exist_ok=True)
    prof.export_chrome_trace(os.path.join(folder, f"rank{rank}.pt.trace.json"))


def train(workload: str, args: Any, model: Any, optimizer: Any, data: tuple[Any, Any], **run: Any) -> None:
    """The timed loop the torch workloads share: --iters optimizer steps, each recorded as an iteration marker
    with what the run is (RUN: rank, backend, world_size, params, gradient_bytes, then anything the workload
    adds, e.g. the collectives it issues; `accumulate` and `quiet` go to `step`), and rank 0's report. With
    `extra_compute_s` the rank computes that much longer before each step's forward pass (a straggler), and its
    marker records how long it took (extra_compute_ns)."""
    accumulate, quiet = run.pop("accumulate", 1), run.pop("quiet", None)
    extra_s = run.pop("extra_compute_s", 0.0)
    profile_dir = run.pop("profile_dir", None)
    rank = run.pop("rank")
    started = time.perf_counter()
    loss = None
    with _profiled(profile_dir, rank):
        for i in range(args.iters):
            start_ns = time.time_ns()
            extra = {"extra_compute_ns": busy_compute(extra_s)} if extra_s else {}
            loss = step(model, optimizer, *data, accumulate, quiet)
            markers.record(i, start_ns, time.time_ns(), model="mlp", **run, **extra)
    elapsed = time.perf_counter() - started
    if rank == 0 and loss is not None:
        keys = ("backend", "world_size", "params", "gradient_bytes")
        report(workload, args, elapsed, loss.item(), **{k: run[k] for k in keys})


def leave(code: int) -> NoReturn:
    """End a torch.distributed rank once its steps and its process group's teardown are done, without C++ static
    destructors: gloo can still hold a joinable pair thread then, and std::terminate aborts the rank ("terminate
    called without an active exception", exit 250 through the launcher) after a whole run, seen in CI with the
    barrier and destroy_process_group before it. Markers are already written (os.write, unbuffered); stdout and
    stderr are flushed here."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

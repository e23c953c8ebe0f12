"""`ringscope profile MODULE:FACTORY`: measure a model's backward profile with autograd hooks.

The what-if replay needs, per gradient tensor in backward order, when it becomes ready and how big it is.
Here a user's `torch.nn.Module` runs forward/backward on the local device; a post-accumulate-grad hook on
every parameter stamps the moment its gradient lands in ``.grad`` (the moment DDP/Horovod could send it).
On CUDA the hook synchronizes first, so a stamp is the time the gradient's kernels finished, not when they
were queued. One warm-up step is discarded; the profile holds ready times averaged over ``steps`` steps.

The factory is called with no arguments (or with ``batch_size=`` if it accepts it) and returns either
``(module, make_input)``, ``(module, make_input, loss_fn)`` or a module with an ``example_input(batch_size)``
method. ``make_input(batch_size)`` returns a tensor or a tuple of tensors (positional inputs);
``loss_fn(output)`` returns a scalar (default: the sum of the output, as float).

torch is imported inside the functions: the rest of ringscope must not pay for it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from analyze.whatif.backward_profile import BackwardProfile

__all__ = ["load_factory", "profile_model", "profile_spec"]


def load_factory(spec: str) -> Callable[..., Any]:
    """Resolve 'package.module:factory' or 'path/to/file.py:factory' (the current directory is importable)."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"bad model {spec!r}: expected MODULE:FACTORY, e.g. mymodels:resnet50")
    try:
        if module_name.endswith(".py") or "/" in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise ValueError(f"bad model {spec!r}: no file {path}")
            loaded = importlib.util.spec_from_file_location(path.stem, path)
            if loaded is None or loaded.loader is None:
                raise ValueError(f"bad model {spec!r}: cannot import {path}")
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"bad model {spec!r}: cannot import {module_name}: {exc}") from exc
    except Exception as exc:  # the user's module failed while importing: one line, not a traceback
        raise ValueError(f"bad model {spec!r}: importing {module_name} failed: {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"bad model {spec!r}: {module_name} has no callable {attr!r}")
    return factory


def _unpack(made: Any) -> tuple[Any, Callable[[int], Any], Optional[Callable[[Any], Any]]]:
    """(module, make_input, loss_fn) from whatever the factory returned."""
    import torch

    if isinstance(made, torch.nn.Module):
        make_input = getattr(made, "example_input", None)
        if not callable(make_input):
            raise ValueError(
                "the factory returned a module without example_input(batch_size); return (module, make_input) instead"
            )
        return made, make_input, None
    if isinstance(made, (tuple, list)) and len(made) in (2, 3) and isinstance(made[0], torch.nn.Module):
        return made[0], made[1], made[2] if len(made) == 3 else None
    raise ValueError("the factory must return a torch.nn.Module or (module, make_input[, loss_fn])")


def _to_device(value: Any, device: Any) -> tuple[Any, ...]:
    """Positional inputs on the device."""
    import torch

    items = value if isinstance(value, (tuple, list)) else (value,)
    return tuple(v.to(device) if isinstance(v, torch.Tensor) else v for v in items)


def profile_model(
    factory: Callable[..., Any], batch_size: int = 32, device: str = "auto", steps: int = 5, name: str = ""
) -> BackwardProfile:
    """Run ``steps`` (+1 warm-up) forward/backward passes and return the averaged backward profile."""
    import torch

    if steps < 1 or batch_size < 1:
        raise ValueError("steps and batch size must be at least 1")
    if device != "auto" and device != "cpu" and not re.fullmatch(r"cuda(:\d+)?", device):
        raise ValueError(f"bad --device {device!r}: choose auto, cpu or cuda (cuda:N for one GPU)")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch sees no CUDA device")
    dev = torch.device(device)
    sync: Callable[[], None] = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    accepts_batch = "batch_size" in inspect.signature(factory).parameters
    module, make_input, loss_fn = _unpack(factory(batch_size=batch_size) if accepts_batch else factory())
    module.to(dev).train()
    params = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    stamps: dict[str, int] = {}

    def stamp(label: str) -> Callable[[Any], None]:
        def hook(_param: Any) -> None:
            sync()
            stamps[label] = time.perf_counter_ns()

        return hook

    handles = [p.register_post_accumulate_grad_hook(stamp(n)) for n, p in params]
    ready: list[dict[str, float]] = []
    backward: list[float] = []
    try:
        _run_steps(module, make_input, loss_fn, batch_size, dev, steps, sync, stamps, ready, backward)
    except (RuntimeError, TypeError) as exc:  # shape/dtype mistakes in the user's model or input
        raise ValueError(
            f"the model failed on its input: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc
    finally:
        for h in handles:
            h.remove()
    used = [(n, p) for n, p in params if all(n in r for r in ready)]
    if not used:
        raise ValueError("no parameter received a gradient: does the loss depend on the model's output?")
    mean_ready = np.array([np.mean([r[n] for r in ready]) for n, _ in used])
    order = np.argsort(mean_ready, kind="stable")
    ready_sorted = mean_ready[order]
    sizes = np.array([used[i][1].numel() * used[i][1].element_size() for i in order], dtype=np.float64)
    meta = {
        "model": name,
        "device": str(dev),
        "batch_size": batch_size,
        "steps": steps,
        "backward_s": float(np.mean(backward)),
        "backward_s_per_step": backward,
        "torch": torch.__version__,
        "unused_parameters": [n for n, _ in params if n not in dict(used)],
    }
    return BackwardProfile(
        np.diff(ready_sorted, prepend=0.0),
        sizes,
        names=tuple(used[i][0] for i in order),
        source=f"ringscope profile {name}".strip(),
        meta=meta,
    )


def _run_steps(
    module: Any,
    make_input: Callable[[int], Any],
    loss_fn: Optional[Callable[[Any], Any]],
    batch_size: int,
    dev: Any,
    steps: int,
    sync: Callable[[], None],
    stamps: dict[str, int],
    ready: list[dict[str, float]],
    backward: list[float],
) -> None:
    """One warm-up and ``steps`` measured forward/backward passes; ready times relative to backward start."""
    for step in range(steps + 1):
        module.zero_grad(set_to_none=True)
        stamps.clear()
        output = module(*_to_device(make_input(batch_size), dev))
        loss = (
            loss_fn(output)
            if loss_fn is not None
            else (output[0] if isinstance(output, (tuple, list)) else output).float().sum()
        )
        sync()
        start = time.perf_counter_ns()
        loss.backward()
        sync()
        end = time.perf_counter_ns()
        if step > 0:
            ready.append({k: (v - start) / 1e9 for k, v in stamps.items()})
            backward.append((end - start) / 1e9)


def profile_spec(spec: str, batch_size: int = 32, device: str = "auto", steps: int = 5) -> BackwardProfile:
    """Profile the model named 'MODULE:FACTORY'."""
    return profile_model(load_factory(spec), batch_size=batch_size, device=device, steps=steps, name=spec)

"""Which compiled walkers a run uses: an extension built ahead of time for this CPU, else numba's JIT.

Why: importing numba and loading even a disk-cached JIT kernel costs ~0.6 s and ~100 MB in every
process and every worker, more than reading 5 M packets takes. The same source (`analyze.read.kernel`) is
therefore compiled once, with numba.pycc, into a small CPython extension kept in the user's cache
(keyed by the kernel source, numba, Python and the CPU); later runs import it in milliseconds and never
import numba. When that build cannot be done (no C compiler, numba without pycc) the run says so once
and uses the JIT kernel, which is the same code compiled in-process.

    RINGSCOPE_KERNEL=jit     never build or load the extension (the JIT kernel only)
    RINGSCOPE_CACHE_DIR=...  where compiled kernels live (default: $XDG_CACHE_HOME/ringscope)

`python -m analyze.read.compiled` builds the extension now (setup scripts call it so no run pays for it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Optional

from analyze.read import layouts as L

EXTENSION = "ringscope_kernel"  # the module name pycc gives the extension (its PyInit_ symbol)
BUILD_TIMEOUT_S = 900
STALE_S = 30 * 86400  # a build no run has loaded for this long is removed when another one is built
USED_EVERY_S = 86400  # how often a load refreshes its build's time of last use (a cheap utime, at most daily)
_HERE = Path(__file__).resolve().parent
_SOURCES = ("kernel.py", "layouts.py")  # what the extension is compiled from


@dataclass(frozen=True)
class Kernels:
    """The three compiled entry points, wherever they came from."""

    scan_pcap: Callable[..., None]
    scan_pcapng: Callable[..., None]
    rehash: Callable[..., None]
    origin: str  # "aot" (the cached extension) or "jit"


_loaded: Optional[Kernels] = None


def kernels() -> Kernels:
    """The walkers for this process, loaded once (forked workers inherit them)."""
    global _loaded
    if _loaded is None:
        mod = None if os.environ.get("RINGSCOPE_KERNEL", "auto") == "jit" else _load_or_build()
        _loaded = _from_module(mod, "aot") if mod is not None else _jit()
    return _loaded


def cache_root() -> Path:
    """Where ringscope keeps its compiled kernels."""
    if os.environ.get("RINGSCOPE_CACHE_DIR"):
        return Path(os.environ["RINGSCOPE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ringscope"


def build_dir() -> Path:
    """The directory this kernel source, numba, Python and CPU build into."""
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update((_HERE / name).read_bytes())
    h.update(_numba_identity())
    h.update(sysconfig.get_config_var("EXT_SUFFIX").encode())
    h.update(_cpu_identity().encode())
    return cache_root() / "kernel" / h.hexdigest()[:20]


def _numba_identity() -> bytes:
    """numba's version file (version and git revision), found without importing numba: every run computes
    this key before it can load the kernel, and importlib.metadata's lookup took 0.035 s of it."""
    spec = importlib.util.find_spec("numba")
    if spec is None or spec.origin is None:
        return b"none"
    try:
        return (Path(spec.origin).parent / "_version.py").read_bytes()
    except OSError:
        return spec.origin.encode()


def _cpu_identity() -> str:
    """Model and feature flags: the extension is compiled for this CPU's instruction set."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        import platform

        return platform.machine() + platform.processor()
    first = text.split("\n\n", 1)[0]
    return "\n".join(line for line in first.splitlines() if line.startswith(("model name", "flags", "vendor_id")))


def _load_or_build() -> Optional[ModuleType]:
    """The cached extension, building it first when this machine has never built this source."""
    import fcntl

    dest: Optional[Path] = None
    try:
        dest = build_dir()  # Path.home() raises RuntimeError without HOME and a passwd entry (containers)
        mod = _import(dest)
        if mod is not None:
            _note_use(dest)
            return mod
        if (dest.parent / (dest.name + ".failed")).exists():
            return None
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest.parent / (dest.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same kernel right now
            mod = _import(dest)
            if mod is None and not (dest.parent / (dest.name + ".failed")).exists():
                print("ringscope: compiling the packet kernel for this CPU (once; about 20 s)...", file=sys.stderr)
                if _build_in_subprocess(dest):
                    mod = _import(dest)
                    prune(dest.parent, keep=dest.name)
    except (OSError, RuntimeError) as exc:
        where = f" in {dest.parent}" if dest is not None else ""
        why = getattr(exc, "strerror", None) or exc
        print(
            f"ringscope: cannot keep a compiled kernel{where} ({why}); using numba's JIT (set RINGSCOPE_CACHE_DIR "
            f"to a writable directory)",
            file=sys.stderr,
        )
        return None
    return mod


def _note_use(dest: Path) -> None:
    """Mark the build as in use (its directory's mtime), so prune keeps it; a read-only cache is left as it is."""
    try:
        if time.time() - dest.stat().st_mtime > USED_EVERY_S:
            os.utime(dest)
    except OSError:
        pass


def prune(root: Path, keep: str) -> None:
    """Remove the builds under root that no run has loaded for STALE_S, with their lock, log and failure
    marks (except keep's). Why: each is ~0.6 MB, and every upgrade of ringscope, numba or Python makes a new
    one; builds for other CPUs sharing a home directory stay while their machines use them."""
    now = time.time()
    try:
        entries = list(root.iterdir())
    except OSError:
        return  # pruning is housekeeping: the build just made is used either way
    for entry in entries:
        if entry.name.split(".")[0] == keep:
            continue
        try:
            if now - entry.stat().st_mtime < STALE_S:
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError:
            pass  # another process removed it first, or it is not ours to remove


def _import(dest: Path) -> Optional[ModuleType]:
    found = sorted(dest.glob(EXTENSION + "*" + sysconfig.get_config_var("EXT_SUFFIX"))) if dest.is_dir() else []
    if not found:
        return None
    spec = importlib.util.spec_from_file_location(EXTENSION, found[0])
    if spec is None or spec.loader is None:
        return None
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError:
        return None
    return mod


def _build_in_subprocess(dest: Path) -> bool:
    """Run the build in a child (it imports numba and a C compiler; none of that stays in this process)."""
    log = dest.parent / (dest.name + ".log")
    try:
        with open(log, "w") as out:
            proc = subprocess.run(
                [sys.executable, "-m", "analyze.read.compiled", str(dest)],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=BUILD_TIMEOUT_S,
                cwd=_HERE.parents[1],  # above the package: inside it analyze/confidence/coverage.py shadows `coverage`
            )
        ok = proc.returncode == 0
        why = f"exit status {proc.returncode}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, why = False, str(exc)
    if not ok:
        (dest.parent / (dest.name + ".failed")).write_text(why + "\n")
        lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        cause = next((ln for ln in reversed(lines) if "Error" in ln), why)
        print(
            f"ringscope: could not compile the packet kernel ahead of time ({cause[:200]}); "
            f"using numba's JIT instead (about 0.6 s more start-up per run). Log: {log}; "
            f"retry with: {sys.executable} -m analyze.read.compiled",
            file=sys.stderr,
        )
    return ok


def build(dest: Path) -> Path:
    """Compile analyze.read.kernel's walkers into an extension module under dest (atomically: all or nothing)."""
    import warnings

    from numba.core.errors import NumbaPendingDeprecationWarning

    warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
    from numba.pycc import CC

    import analyze.read.kernel as K

    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        cc = CC(EXTENSION)
        cc.output_dir = str(work)
        cc.use_nrt = False  # the walkers allocate nothing (see analyze.read.kernel)
        cc.target_cpu = "host"
        for name, sig in signatures().items():
            cc.export(name, sig)(getattr(K, name).py_func)
        cc.compile()
        work.rename(dest)  # fails when a concurrent build finished first; its result is the same
    except OSError:
        if not dest.is_dir():
            raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return dest


def signatures() -> dict[str, Any]:
    """numba signatures of the entry points (what analyze.read.scan passes), made from L.KERNEL_ARGS."""
    from numba import types as T

    def one(kind: Any) -> Any:
        if kind == "int":
            return T.int64
        if kind == "bool":
            return T.boolean
        dtype, ndim = kind
        return T.Array(getattr(T, dtype), ndim, "C", readonly=kind is L.KERNEL_DATA)

    return {name: T.void(*(one(k) for k in kinds)) for name, kinds in L.KERNEL_ARGS.items()}


def _from_module(mod: Any, origin: str) -> Kernels:
    fns = {name: getattr(mod, name) for name in L.KERNEL_ARGS}
    if origin == "aot":  # the extension trusts its caller: a wrong array would be read as raw memory
        fns = {name: _checked(name, fn) for name, fn in fns.items()}
    return Kernels(**fns, origin=origin)


def _checked(name: str, fn: Callable[..., None]) -> Callable[..., None]:
    """fn behind a check that every array argument has the dtype, rank and layout compiled for."""
    import numpy as np

    kinds = L.KERNEL_ARGS[name]
    arrays = [(i, np.dtype(k[0]), k[1]) for i, k in enumerate(kinds) if isinstance(k, tuple)]

    def call(*args: Any) -> None:
        if len(args) != len(kinds):
            raise TypeError(f"{name}: {len(args)} arguments given, {len(kinds)} expected")
        for i, dtype, ndim in arrays:
            a = args[i]
            if not (isinstance(a, np.ndarray) and a.dtype == dtype and a.ndim == ndim and a.flags.c_contiguous):
                raise TypeError(f"{name}: argument {i} must be a C-contiguous {ndim}-d {dtype} array")
        fn(*args)

    return call


def _jit() -> Kernels:
    """numba's JIT kernel, compiled (or loaded from numba's disk cache) for the one signature now."""
    if "NUMBA_CACHE_DIR" not in os.environ and not os.access(_HERE, os.W_OK):
        os.environ["NUMBA_CACHE_DIR"] = str(cache_root() / "numba")  # installed read-only: cache elsewhere
    import analyze.read.kernel as K

    for name, sig in signatures().items():
        getattr(K, name).compile(sig)
    return _from_module(K, "jit")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else build_dir()
    if target.exists():
        print(f"packet kernel already built: {target}")
    else:
        print(f"packet kernel built: {build(target)}")
    (target.parent / (target.name + ".failed")).unlink(missing_ok=True)  # an earlier failure is mended

"""A mutation fuzz of `ringscope analyze`, in the manner of Wireshark's fuzz-test: the fixtures' captures with
bytes flipped, cut, spliced together or with garbage appended, each analyzed by the real command in its own
process group under CPU and memory limits.

A run fails when the command prints a traceback, exits with anything but 0 (analyzed) or 2 (one clear error
line), dies by a signal, outlives its time limit (its whole group is killed), or peaks above the memory bound;
the input is then kept for replay. Used by tests/read/test_fuzz.py for a minute in CI; for longer runs (from
the repository root):

    python -m tests.support.fuzz --seconds 3600 --keep /tmp/fuzz-failures [--seed N] [--jobs 2]

Replay one kept input with `ringscope analyze FILE`.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIRS = ("formats", "linktypes", "accounting", "bad", "rdma")
CORPUS_FILES = ("example/h1/eth0.pcap",)
MEMORY_BOUND_MB = 256  # peak RSS for an input of at most 1 MB (issue 22)
TIME_LIMIT_S = 30.0
CPU_LIMIT_S = 60
ADDRESS_SPACE = 4 << 30  # a runaway allocation fails inside the child instead of taking the machine


@dataclass
class Outcome:
    path: Path
    mutation: str
    code: int
    peak_mb: float
    seconds: float
    failure: str  # empty when the run was fine


def corpus() -> list[Path]:
    files = [p for d in CORPUS_DIRS for p in sorted((ROOT / "fixtures" / d).iterdir()) if not p.name.endswith(".json")]
    return files + [ROOT / "fixtures" / f for f in CORPUS_FILES]


def mutate(rng: random.Random, data: bytes, other: bytes) -> tuple[bytes, str]:
    """One mutation of DATA (OTHER: another corpus file, for splices), and its name."""
    b = bytearray(data)
    kind = rng.choice(["flip", "flip", "cut", "splice", "garbage", "flip+cut"])
    if "flip" in kind:
        for _ in range(max(1, len(b) // 50)):  # about 2 % of the bytes
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    if "cut" in kind:
        b = b[: rng.randrange(1, len(b))]
    if kind == "splice":
        at, start = rng.randrange(len(b)), rng.randrange(len(other))
        b = b[:at] + other[start : start + rng.randrange(1, 65536)]
    if kind == "garbage":
        b += rng.randbytes(rng.randrange(1, 4096))
    return bytes(b), kind


def measure(argv: list[str]) -> int:
    """Run ARGV under the limits in a fresh process group and print its exit code and own peak RSS (KB).

    Why a separate small process: a child's peak RSS as the kernel reports it includes the memory of the
    process it was forked from, so children forked straight from a large test process all report its size.
    """
    os.setsid()  # its own process group: a hang is killed whole
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S))
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    code = subprocess.call(argv, stdout=subprocess.DEVNULL)
    print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)
    return 0


def analyze_once(path: Path, mutation: str) -> Outcome:
    """Run `ringscope analyze PATH` as a user would (workers 1) and judge how it ended."""
    argv = [sys.executable, str(ROOT / "cli.py"), "analyze", str(path), "--workers", "1", "--json", os.devnull]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--measure", "--", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    fired = threading.Event()

    def kill_group() -> None:
        fired.set()
        os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(TIME_LIMIT_S, kill_group)
    timer.start()
    out, err = proc.communicate()
    timer.cancel()
    seconds = time.monotonic() - start
    text = err.decode(errors="replace")
    fields = out.split()
    code, peak_mb = (int(fields[0]), int(fields[1]) / 1024) if len(fields) == 2 else (proc.returncode, 0.0)
    failure = ""
    if fired.is_set():
        failure = f"hang: killed after {TIME_LIMIT_S:g} s"
    elif code < 0:
        failure = f"killed by signal {-code}"
    elif "Traceback" in text:
        failure = "traceback: " + text.strip().splitlines()[-1][:300]
    elif code not in (0, 2):
        failure = f"exit code {code}: {text.strip()[-300:]}"
    elif path.stat().st_size <= 1 << 20 and peak_mb > MEMORY_BOUND_MB:
        failure = f"peak memory {peak_mb:.0f} MB over the {MEMORY_BOUND_MB} MB bound"
    return Outcome(path, mutation, code, peak_mb, seconds, failure)


def run(seconds: float, keep: Path, seed: int, jobs: int = 2) -> list[Outcome]:
    """Mutate and analyze until SECONDS have passed; failing inputs are copied to KEEP. Returns every outcome."""
    rng = random.Random(seed)
    files = corpus()
    blobs = {p: p.read_bytes() for p in files}
    deadline = time.monotonic() + seconds
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="ringscope-fuzz-") as tmp:

        def one(i: int) -> Outcome:
            src = files[i % len(files)]
            local = random.Random(seed * 1_000_003 + i)
            data, kind = mutate(local, blobs[src], blobs[local.choice(files)])
            path = Path(tmp) / f"{i:06d}-{src.name}"
            path.write_bytes(data)
            out = analyze_once(path, kind)
            if out.failure:
                keep.mkdir(parents=True, exist_ok=True)
                kept = keep / path.name
                kept.write_bytes(data)
                out.path = kept
            else:
                path.unlink()
            return out

        with ThreadPoolExecutor(jobs) as pool:
            i = rng.randrange(1 << 20)
            pending = set()
            while time.monotonic() < deadline or pending:
                while time.monotonic() < deadline and len(pending) < jobs:
                    pending.add(pool.submit(one, i))
                    i += 1
                done = {f for f in pending if f.done()}
                for f in done:
                    outcomes.append(f.result())
                pending -= done
                time.sleep(0.01)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["--measure", "--"]:
        return measure(argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--keep", type=Path, default=Path("fuzz-failures"))
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    outcomes = run(args.seconds, args.keep, args.seed, args.jobs)
    failed = [o for o in outcomes if o.failure]
    peak = max((o.peak_mb for o in outcomes), default=0.0)
    slow = max((o.seconds for o in outcomes), default=0.0)
    print(f"seed {args.seed}: {len(outcomes)} runs, {len(failed)} failed; peak {peak:.0f} MB, slowest {slow:.1f} s")
    for o in failed:
        print(f"  {o.path} ({o.mutation}): {o.failure}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

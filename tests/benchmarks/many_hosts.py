"""The many-host rows of the benchmark: a synthetic ring of N hosts (one capture each, the same packets per host, so
the cost per host must stay flat), analyzed as one process locally and with --scheduler on a local Dask cluster of
2 one-thread workers; wall time, the ringscope process's peak memory, both per host, and whether the two results
agree; and the HTML report one more local run writes (--html, not in the times): its size, and how long headless
Chromium takes from opening it to every figure drawn, where chromium is installed.

    .venv/bin/python -m tests.benchmarks.run_benchmark --packets --many-hosts 64 512 4096 [--host-packets 5000]

The targets (issue 48): time and peak memory per host within 1.5x of each other from 64 to 4,096 hosts; the report
under 20 MB and open in under 5 s at 4,096 hosts. The Dask
run's peak is the client's (the workers are other processes): it shows what the machine running `ringscope
analyze` needs. Local runs of a row are alternated with its Dask runs, so both see the same page cache.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests.benchmarks.synth import ring_capture
from tests.support.dask_cluster import dask_cluster, have_dask

Runner = Callable[[list[str]], tuple[float, float, str]]


@dataclass
class Row:
    """One ring size's figures."""

    hosts: int
    packets: int
    local_s: float
    local_mb: float
    dask_s: float | None
    dask_mb: float | None
    same: bool | None
    report_mb: float
    open_s: float | None


def ring_folder(folder: Path, hosts: int, packets: int) -> None:
    """host1.pcap .. hostN.pcap of one ring, each host's own draw (reused when already there: 4,096 hosts take
    minutes to write)."""
    folder.mkdir(parents=True, exist_ok=True)
    for me in range(1, hosts + 1):
        path = folder / f"host{me}.pcap"
        if not path.is_file():
            ring_capture(path, packets=packets, hosts=hosts, me=me, seed=me - 1)


def bench_many_hosts(tmp: Path, sizes: list[int], packets: int, repeat: int, run: Runner, ringscope: str) -> None:
    """Time each ring size locally and on Dask; print the rows and the spread of the per-host costs."""
    rows = []
    dask_note = "" if have_dask() else " (no Dask installed: pip install 'ringscope[dask]')"
    for n in sizes:
        folder = tmp / f"ring{n}x{packets}"
        ring_folder(folder, n, packets)
        report = tmp / f"ring{n}.html"
        local = [ringscope, "analyze", str(folder), "--json", str(tmp / "local.json")]
        walls: dict[str, list[float]] = {"local": [], "dask": []}
        peaks: dict[str, float] = {"local": 0.0, "dask": 0.0}
        if have_dask():
            with dask_cluster(tmp, workers=2) as cluster:
                remote = [*local[:3], "--scheduler", cluster.address, "--json", str(tmp / "dask.json")]
                for _ in range(repeat):
                    for side, cmd in (("local", local), ("dask", remote)):
                        wall, mb, _ = run(cmd)
                        walls[side].append(wall)
                        peaks[side] = max(peaks[side], mb)
            same = json.loads((tmp / "local.json").read_text()) == json.loads((tmp / "dask.json").read_text())
        else:
            for _ in range(repeat):
                wall, mb, _ = run(local)
                walls["local"].append(wall)
                peaks["local"] = max(peaks["local"], mb)
            same = None
        ring = ["host1", *(f"host{i}" for i in range(n, 1, -1))]
        if json.loads((tmp / "local.json").read_text())["topology"]["order"] != ring:
            raise SystemExit(f"benchmark: the {n}-host ring was not reconstructed")
        dask_s = statistics.median(walls["dask"]) if walls["dask"] else None
        local_s = statistics.median(walls["local"])
        with_report, _, _ = run([*local, "--html", str(report)])  # once more, writing the report: not in the times
        size_mb = report.stat().st_size / 1e6
        print(f"  {n} hosts: the report ({size_mb:.1f} MB) took {with_report - local_s:.1f} s more to write")
        rows.append(
            Row(n, packets, local_s, peaks["local"], dask_s, peaks["dask"] or None, same, size_mb, opened(report))
        )
    print_rows(rows, repeat, dask_note)


def opened(report: Path) -> float | None:
    """Seconds from asking headless Chromium to open REPORT to every figure drawn (the page's ringscopeReady);
    None without chromium."""
    from tests.support.browser import Page, find_chromium

    if find_chromium() is None:
        return None
    with Page(timeout_s=120) as page:
        t0 = time.perf_counter()
        page.goto(report.resolve().as_uri())
        page.wait_for("window.ringscopeReady")
        return time.perf_counter() - t0


def print_rows(rows: list[Row], repeat: int, dask_note: str) -> None:
    """The table, and each per-host figure's largest over its smallest across the rows (the target: <= 1.5x)."""
    print(
        f"\nmany hosts: one ring, one capture per host (median of {repeat}; peak of the ringscope process){dask_note}"
    )
    print(
        f"  {'hosts':>6} {'packets':>12} {'local s':>8} {'ms/host':>8} {'MB':>7} {'kB/host':>8}  dask s  ms/host  same"
        "  report MB  opens in"
    )
    for r in rows:
        remote = (
            f"{r.dask_s:7.2f} {r.dask_s / r.hosts * 1e3:8.2f}  {'yes ' if r.same else 'NO  '}"
            if r.dask_s is not None
            else "      -        -  -   "
        )
        opens = f"{r.open_s:7.2f} s" if r.open_s is not None else "  no chromium"
        print(
            f"  {r.hosts:>6} {r.hosts * r.packets:>12,} {r.local_s:8.2f} {r.local_s / r.hosts * 1e3:8.2f} "
            f"{r.local_mb:7.0f} {r.local_mb / r.hosts * 1e3:8.1f} {remote} {r.report_mb:9.1f} {opens}"
        )
    if len(rows) > 1:
        spread = {
            "time": [r.local_s / r.hosts for r in rows],
            "memory": [r.local_mb / r.hosts for r in rows],
        }
        print(
            "  per host, largest over smallest: "
            + ", ".join(f"{k} {max(v) / min(v):.2f}x" for k, v in spread.items())
            + " (target: within 1.5x)"
        )
        a, b = rows[0], rows[-1]
        added = b.hosts - a.hosts
        print(
            f"  each host added from {a.hosts} to {b.hosts} hosts: {(b.local_s - a.local_s) / added * 1e3:.2f} ms and "
            f"{(b.local_mb - a.local_mb) / added * 1e3:.0f} kB (the fixed start-up cost taken out)"
        )

"""The live view: a running capture drawn every poll, as a table on a terminal, else as one line per poll.

The line is meant for logs and scripts (`capture run --live | tee`): fields in a fixed order, hosts separated
by " | ", bytes exact.
"""

from __future__ import annotations

import math
from typing import Any, Optional, TextIO

from analyze.live.now import HostNow, JobNow, Now

EDGES_SHOWN = 4


def line(now: Now) -> str:
    """One poll as one line, e.g. `t=3.0s iterations=7 (markers) | h1 tx 412.0 Mbit/s 41% rx 410.2 Mbit/s 41% sent
    12345678 B | ... | top h1->h2 412.0 Mbit/s` (one line: the hosts follow one another); where the traffic holds
    several jobs, `job 1 (4 hosts) iterations=40 (traffic, confidence 1.00) | job 2 ...` after the head, whose
    iterations are the heaviest job's."""
    head = f"t={now.seconds:.1f}s iterations={iterations(now)}"
    hosts = [
        f"{h.name} tx {_rate(h.tx_bps)}{_share(h, 'tx')} rx {_rate(h.rx_bps)}{_share(h, 'rx')} sent {h.tx_bytes} B"
        for h in now.hosts
    ]
    top = ", ".join(f"{a}->{b} {_rate(bps)}" for a, b, bps in now.edges[:EDGES_SHOWN])
    return " | ".join([head, *[_job(j) for j in now.jobs], *hosts, f"top {top or '-'}"])


def _job(j: JobNow) -> str:
    """A job of several, e.g. `job 2 (4 hosts) iterations=~12 (unsure: traffic, confidence 0.42)`."""
    if j.iterations is None:
        found = "-"
    else:
        how = f"traffic, confidence {_confidence(j.confidence)}"
        found = f"{j.iterations} ({how})" if j.sure else f"~{j.iterations} (unsure: {how})"
    return f"{j.name} ({j.hosts} hosts) iterations={found}"


def iterations(now: Now) -> str:
    """The iterations so far and where they come from: `7 (markers)`, `7 (traffic, confidence 0.93)`, or, when the
    traffic does not make them sure, `~7 (unsure: traffic, confidence 0.42)`; `-` while none is known."""
    if now.iterations is None:
        return "-"
    if now.iterations_source == "markers":
        return f"{now.iterations} (markers)"
    how = f"{now.iterations_source}, confidence {_confidence(now.iterations_confidence)}"
    return f"{now.iterations} ({how})" if now.iterations_sure else f"~{now.iterations} (unsure: {how})"


def _confidence(value: float | None) -> str:
    """Two decimals, rounded down: an unsure 0.7996 reads 0.79, never the 0.80 a sure count starts at."""
    return "-" if value is None else f"{math.floor(value * 100) / 100:.2f}"


def _rate(bps: float | None) -> str:
    return "-" if bps is None else f"{bps / 1e6:.1f} Mbit/s"


def _share(h: HostNow, direction: str) -> str:
    u = h.utilization(direction)
    return "" if u is None else f" {u:.0%}"


class View:
    """Where the polls go: a rich table redrawn in place on a terminal, else a line each."""

    def __init__(self, out: TextIO, terminal: bool) -> None:
        self._out = out
        self._live: Optional[Any] = None
        if terminal:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(file=out), auto_refresh=False)
            self._live.start()

    def show(self, now: Now) -> None:
        if self._live is None:
            print(line(now), file=self._out, flush=True)
            return
        self._live.update(_table(now), refresh=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def _table(now: Now) -> Any:
    from rich.table import Table

    table = Table(title=f"ringscope live · {now.seconds:.0f} s · iterations {iterations(now)}", title_justify="left")
    for name in ("host", "tx", "tx util", "rx", "rx util", "sent"):
        table.add_column(name, justify="left" if name == "host" else "right")
    for h in now.hosts:
        tx, rx = h.utilization("tx"), h.utilization("rx")
        table.add_row(
            h.name,
            _rate(h.tx_bps),
            "-" if tx is None else f"{tx:.0%}",
            _rate(h.rx_bps),
            "-" if rx is None else f"{rx:.0%}",
            f"{h.tx_bytes / 1e6:,.1f} MB",
        )
    for a, b, bps in now.edges[:EDGES_SHOWN]:
        table.add_row(f"{a} → {b}", _rate(bps), "", "", "", "", style="dim")
    for j in now.jobs:
        table.add_row(_job(j), "", "", "", "", "", style="bold")
    return table

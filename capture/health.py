"""Did every host capture the training? A check of the gathered captures before `capture run` says "complete".

Why: an agent on the wrong interface (`lo`, or the management NIC while the training uses another) captures
happily and exits 0, and the analysis of its file is plausible nonsense. The one thing every host of a
distributed job must have captured is traffic with the other hosts of the run, so each host's files are
searched for a packet to or from another host's addresses (ssh excluded: `capture run` itself talks to
the hosts through it). tcpdump reads the files with that filter compiled to BPF and stops at the first
match, so a healthy capture costs milliseconds and a wrong one one pass over its files in C.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

from capture import layout

NO_TRAFFIC_FIX = (
    "the training's traffic went through another interface: pass --iface NAME "
    "(or set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME for the job)"
)


def _any_packet(tcpdump: str, path: Path, bpf: str) -> bool | None:
    """Whether PATH holds a packet matching BPF (None: tcpdump could not read it)."""
    try:
        done = subprocess.run(
            [tcpdump, "-r", str(path), "-n", "-q", "-c", "1", bpf], capture_output=True, text=True, timeout=600
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.stdout.strip():
        return True
    return False if done.returncode == 0 else None


def health_check(
    out: Path, hosts: list[str], agents: dict[str, dict[str, Any]], warn: Callable[[str], None]
) -> list[str]:
    """One failure line per gathered host whose capture holds no packet with any other host of the run; the
    host's run.json entry (AGENTS[host]) says so too. Needs tcpdump on this machine; without it, WARN says
    the check was not made."""
    if len(hosts) < 2:
        return []
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        warn(
            "no tcpdump on this machine: the captures were not checked for traffic between the hosts "
            "(`ringscope analyze` checks them)"
        )
        return []
    metas = {}
    for host in hosts:
        path = out / host / layout.META_FILE
        if path.is_file():
            try:
                metas[host] = layout.read_meta(path)
            except layout.LayoutError:
                continue
    addresses = {host: layout.peer_addresses(meta) for host, meta in metas.items()}
    failures = []
    for host, meta in metas.items():
        others = sorted(set().union(*(addresses[o] for o in metas if o != host)) - addresses[host])
        files = [out / host / name for name in meta.files]
        if not others or not files:
            continue  # the hosts share one machine's addresses, or there is nothing to search
        bpf = "(" + " or ".join(f"host {a}" for a in others) + ") and not port 22"
        found = set()
        for f in files:
            found.add(_any_packet(tcpdump, f, bpf))
            if found - {False}:
                break
        if found - {False}:
            continue  # a packet with another host, or a file tcpdump cannot read (the analyzer will say why)
        shown = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
        why = f"its capture on {meta.interface} holds no packet to or from the other hosts ({shown})"
        agents.setdefault(host, {})["health"] = why
        failures.append(f"host {host}: {why}: {NO_TRAFFIC_FIX}")
    return failures

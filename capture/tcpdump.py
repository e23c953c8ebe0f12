"""Everything about the tcpdump program: find it, build its command line, start it safely, read its counters."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from capture.errors import CaptureError

DEFAULT_SNAPLEN = 128  # Ethernet + IPv6 + TCP with options fit; no gradient payload is stored
PERMISSION_FIX = (
    'run as root, or grant the capability once: sudo setcap cap_net_raw,cap_net_admin=eip "$(command -v tcpdump)"'
)


def find_tcpdump() -> str:
    """Path of tcpdump, or a CaptureError saying how to install it."""
    path = shutil.which("tcpdump")
    if not path:
        raise CaptureError("tcpdump is not installed (or not on PATH): apt-get install tcpdump / dnf install tcpdump")
    return path


def version(tcpdump: str) -> dict:
    """tcpdump and libpcap versions, as `tcpdump --version` prints them."""
    text = subprocess.run([tcpdump, "--version"], capture_output=True, text=True, timeout=10).stdout
    found = dict(re.findall(r"^(tcpdump|libpcap) version (\S+)", text, re.MULTILINE))
    return {"tcpdump_version": found.get("tcpdump"), "libpcap_version": found.get("libpcap")}


BUFFER_KIB = 32768  # tcpdump -B: the capture buffer in KiB


def command(
    tcpdump: str,
    iface: str,
    out_dir: Path,
    snaplen: int = DEFAULT_SNAPLEN,
    bpf: str | None = None,
    rotate_bytes: int | None = None,
    keep: int | None = None,
    rotate_seconds: int | None = None,
) -> list[str]:
    """tcpdump argv writing headers-only, nanosecond, packet-buffered pcaps to OUT_DIR/IFACE.pcap[N].

    --immediate-mode hands each packet over at once, so stopping loses nothing still waiting in a
    half-filled kernel block. As root, -Z root keeps tcpdump from switching to the `tcpdump` user,
    which could not create files in OUT_DIR. -B gives the kernel ring 32 MiB instead of libpcap's 2 MiB:
    beside a training job that keeps every core busy tcpdump is starved for a while, and 2 MiB dropped
    thousands of packets (Horovod on 2 cores, tests/collective/test_horovod_e2e.py).
    """
    pcap = out_dir / f"{iface}.pcap"
    argv = [
        tcpdump,
        "-i",
        iface,
        "-n",
        "-U",
        "--immediate-mode",
        "-B",
        str(BUFFER_KIB),
        "-s",
        str(snaplen),
        "--time-stamp-precision=nano",
    ]
    if os.geteuid() == 0:
        argv += ["-Z", "root"]
    if rotate_bytes:
        argv += ["-C", str(max(1, -(-rotate_bytes // 1_000_000)))]  # tcpdump counts millions of bytes
        if keep:
            argv += ["-W", str(keep)]
    elif rotate_seconds:
        argv += ["-G", str(rotate_seconds)]
        pcap = out_dir / f"{iface}.pcap%s"  # epoch seconds: IFACE.pcapN, one file per period
    argv += ["-w", str(pcap)]
    if bpf:
        argv.append(bpf)
    return argv


def pcap_files(out_dir: Path, iface: str) -> list[str]:
    """The files tcpdump wrote (IFACE.pcap, IFACE.pcapN ...), oldest first (a --keep ring wraps around)."""
    paths = [p for p in out_dir.glob(f"{iface}.pcap*") if re.fullmatch(re.escape(iface) + r"\.pcap\d*", p.name)]
    return [p.name for p in sorted(paths, key=lambda p: (p.stat().st_mtime_ns, len(p.name), p.name))]


_COUNTERS = {
    "captured": "packets? captured",
    "received_by_filter": "packets? received by filter",
    "dropped_by_kernel": "packets? dropped by kernel",
    "dropped_by_interface": "packets? dropped by interface",
}


def parse_counters(stderr: str) -> dict | None:
    """tcpdump's exit report -> counters; None when it printed none (killed hard).

    tcpdump prints the 'dropped by interface' line only when that count is non-zero, so its
    absence next to the other three lines means 0.
    """
    counters = {}
    for key, phrase in _COUNTERS.items():
        match = re.search(rf"^(\d+) {phrase}$", stderr, re.MULTILINE)
        counters[key] = int(match.group(1)) if match else None
    if counters["captured"] is None:
        return None
    if counters["dropped_by_interface"] is None:
        counters["dropped_by_interface"] = 0
    return counters


def _die_with_parent(parent_pid: int):
    """preexec_fn: the kernel sends tcpdump SIGTERM when the agent dies, even by SIGKILL."""

    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def start(argv: list[str], log_path: Path) -> subprocess.Popen:
    """Start tcpdump with its stderr in LOG_PATH (it survives the agent, so counters are never lost)."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            preexec_fn=_die_with_parent(os.getpid()),
            start_new_session=True,
        )


def explain_failure(log_text: str, iface: str) -> str:
    """One line saying why tcpdump would not start, with the fix when we know it."""
    lines = [
        line.strip().removeprefix("tcpdump: ")
        for line in log_text.splitlines()
        if line.strip() and not re.match(r"\d+ packets? ", line) and "listening on" not in line
    ]
    message = " ".join(lines) if lines else "tcpdump exited without a message"
    if re.search(r"permission|not permitted", log_text, re.IGNORECASE):
        return f"tcpdump may not capture on {iface}: {message}; {PERMISSION_FIX}"
    return f"tcpdump failed on {iface}: {message}"

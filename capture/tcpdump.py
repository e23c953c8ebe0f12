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
    snaplen: int,
    bpf: str | None = None,
    rotate_bytes: int | None = None,
    keep: int | None = None,
    rotate_seconds: int | None = None,
    user: str | None = None,
) -> list[str]:
    """tcpdump argv writing headers-only, nanosecond, packet-buffered pcaps to OUT_DIR/IFACE.pcap[N].

    --immediate-mode hands each packet over at once, so stopping loses nothing still waiting in a
    half-filled kernel block. -Z USER: as root, tcpdump drops to USER once the device and the first file
    are open (drop_user). -B gives the kernel ring 32 MiB instead of libpcap's 2 MiB:
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
    if user:
        argv += ["-Z", user]
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


DROP_USERS = ("tcpdump", "nobody")


def drop_user(out_dir: Path, rotating: bool) -> str | None:
    """The user tcpdump runs as once capturing: None when not root (tcpdump keeps ours); else the first of
    DROP_USERS that exists, OUT_DIR given to it (rotation opens new files there after the drop). It stays
    root when a rotating capture's folder is out of that user's reach (a parent it may not enter), and
    without CAP_SYS_PTRACE (a container granted only NET_RAW and NET_ADMIN): the agent could not reach a
    process of another user to attach the header cut (capture.headers_only), and no payload kept matters
    more than a dropped privilege."""
    if os.geteuid() != 0:
        return None
    if not _may_trace_other_users():
        return "root"  # the header cut is attached to tcpdump's socket from here: it must stay within reach
    import pwd

    for name in DROP_USERS:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if rotating and not _reachable(out_dir, entry.pw_uid, entry.pw_gid):
            return "root"
        os.chown(out_dir, entry.pw_uid, entry.pw_gid)
        return name
    return "root"


def _may_trace_other_users() -> bool:
    """Whether this process holds CAP_SYS_PTRACE (bit 19 of its effective capabilities)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    effective = next((line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), "0")
    return bool(int(effective, 16) >> 19 & 1)


def _reachable(folder: Path, uid: int, gid: int) -> bool:
    """Whether UID/GID may enter every parent of FOLDER (the permission bits only)."""
    for parent in folder.resolve().parents:
        st = parent.stat()
        bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == gid else 0o001
        if not st.st_mode & bit:
            return False
    return True


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


_GUARD = "; ".join(
    [
        """trap 'kill -TERM "$1" 2>/dev/null; kill "$!" 2>/dev/null; exit 0' TERM""",  # the agent died
        'while :; do sleep 3600 & wait "$!"; done',  # wait in `wait`, which a trap interrupts
    ]
)


def guard(pid: int) -> subprocess.Popen:
    """A watcher that ends tcpdump PID when the agent dies, even by SIGKILL.

    Why: tcpdump's own parent-death signal (start) is cleared by the kernel when it drops to another user
    (-Z), so a killed agent would leave it capturing for ever. This small shell keeps root's credentials and
    so its parent-death signal; the agent ends it (stop_guard) once tcpdump has stopped."""
    return subprocess.Popen(
        ["sh", "-c", _GUARD, "ringscope-guard", str(pid)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_die_with_parent(os.getpid()),
        start_new_session=True,
    )


def stop_guard(watcher: subprocess.Popen) -> None:
    """End the watcher and its sleeping child without touching tcpdump."""
    try:
        os.killpg(watcher.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    watcher.wait()


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

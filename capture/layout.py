"""The capture directory: the one contract between capture and analyze, written and read through here.

    <run>/
      run.json         RUN_FILE: schema, run_id, status, command, hosts (launch order), start/end ns, exit code
      <host>/
        meta.json      META_FILE: host, interface, addresses, link speed, tcpdump command and counters, clock
        <iface>.pcap   tcpdump's files, possibly rotated or gzip-compressed
        markers.jsonl  MARKERS_FILE, optional: one line per iteration per local rank

Both sides name files and keys through these constants, so a rename is one edit and a reader never spells a
key the writer does not. Standard library only, and only `os` at import: capture.markers, which training
scripts import, must not pull in json or typing (tests/capture/test_markers.py), so json loads inside the helpers.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read the name itself)
if TYPE_CHECKING:  # annotations only
    from pathlib import Path
    from typing import Any

SCHEMA = 1  # the version this ringscope writes and reads; later versions only add keys
RUN_FILE = "run.json"
META_FILE = "meta.json"
MARKERS_FILE = "markers.jsonl"
READY_FILE = ".ready"  # present while an agent's tcpdump captures; holds its pid

# run.json keys
RUN_SCHEMA, RUN_HOSTS, RUN_STATUS = "schema", "hosts", "status"
# meta.json keys
META_HOST, META_ADDRESSES, META_LINK_SPEED_BPS, META_COUNTERS = "host", "addresses", "link_speed_bps", "counters"
META_STATUS = "status"
META_HOST_ADDRESSES = "host_addresses"  # all the host's addresses, not only the captured interface's
META_LOST_PACKETS, META_WRITTEN_PACKETS, META_ERROR = "lost_packets", "written_packets", "error"
STATUS_COMPLETE, STATUS_CAPTURING, STATUS_INTERRUPTED = "complete", "capturing", "interrupted"


class LayoutError(ValueError):
    """A file of the capture directory that cannot be read as what it should be (one line: file, cause)."""


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write a run.json or meta.json by atomic replace, so a reader never sees half a file (on a full disk,
    where the agent must still record what it lost, in place)."""
    import json

    text = json.dumps(data, indent=2) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        if error.errno != 28 or not path.exists():  # 28: ENOSPC
            raise
        path.write_text(text)  # a full disk has no room for a second copy: rewrite in the blocks the old one frees
        return
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any]:
    """A run.json or meta.json as a dict; LayoutError when it is unreadable or not a JSON object."""
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LayoutError(f"{path}: offset 0: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise LayoutError(f"{path}: offset 0: expected a JSON object")
    return data


class _Document:
    """A run.json or meta.json as read: `doc`, the document whole (a later version's keys kept), under the typed
    properties of HostMeta and RunManifest. A plain class with slots: capture.markers, imported by training
    scripts, must not pull in dataclasses' imports."""

    __slots__ = ("doc",)

    def __init__(self, doc: dict[str, Any] | None) -> None:
        self.doc = doc or {}

    def _text(self, key: str) -> str | None:
        value = self.doc.get(key)
        return str(value) if value not in (None, "") else None


class HostMeta(_Document):
    """A host's meta.json as every reader sees it: the keys the analysis, the live view and the health check use,
    each read with its type (a missing or null key is None, or empty); `doc` as a dataset stores it back. Readers
    go through these properties, so a key is spelt once, here, beside the writer's constants."""

    __slots__ = ()

    @property
    def host(self) -> str | None:
        return self._text(META_HOST)

    @property
    def status(self) -> str | None:
        return self._text(META_STATUS)

    @property
    def interface(self) -> str | None:
        return self._text("interface")

    @property
    def error(self) -> str | None:
        return self._text(META_ERROR)

    @property
    def payload_cut(self) -> str | None:
        """How the agent kept payload out (the kernel filter, or a snaplen and why)."""
        return self._text("payload_cut")

    @property
    def addresses(self) -> list[str]:
        """The captured interface's addresses, with their prefix length as the agent wrote them."""
        return [str(a) for a in self.doc.get(META_ADDRESSES) or []]

    @property
    def host_addresses(self) -> list[str]:
        """Every interface's addresses (whom the host is, beyond the captured interface)."""
        return [str(a) for a in self.doc.get(META_HOST_ADDRESSES) or []]

    @property
    def link_speed_bps(self) -> float | None:
        value = self.doc.get(META_LINK_SPEED_BPS)
        return float(value) if value else None

    @property
    def mtu(self) -> int | None:
        value = self.doc.get("mtu")
        return int(value) if value else None

    @property
    def counters(self) -> dict[str, Any] | None:
        """tcpdump's own counters (captured, dropped by the kernel and the interface); None until the agent
        stopped and wrote them."""
        value = self.doc.get(META_COUNTERS)
        return value if isinstance(value, dict) else None

    @property
    def lost_packets(self) -> int | None:
        """Packets tcpdump counted but did not write (a full disk); None where the agent did not say."""
        value = self.doc.get(META_LOST_PACKETS)
        return int(value) if isinstance(value, int) else None

    @property
    def files(self) -> list[str]:
        return [str(f) for f in self.doc.get("files") or []]

    @property
    def rdma(self) -> dict[str, Any]:
        """The RDMA sniffer's facts, where it captured (drops_counted, ...); empty otherwise."""
        value = self.doc.get("rdma")
        return value if isinstance(value, dict) else {}


def read_meta(path: Path) -> HostMeta:
    """A host's meta.json; LayoutError when it is unreadable or not a JSON object."""
    return HostMeta(read_json(path))


def is_run(folder: Path) -> bool:
    """A capture directory: a folder holding run.json."""
    return (folder / RUN_FILE).is_file()


def capture_faults(meta: HostMeta) -> list[str]:
    """What a host's meta.json says went wrong with its capture, one line each, for the analyzer to warn:
    an agent that never finished (killed: its counters were never written), packets tcpdump counted but
    did not write, an agent error, an RDMA sniffer's capture (no drop counter, software timestamps)."""
    status = meta.status
    if status in ("starting", STATUS_CAPTURING):
        return [
            f"the agent did not stop cleanly (meta.json still says {status!r}): counters unknown, "
            "drops and packets lost at the end cannot be counted"
        ]
    faults = []
    if meta.lost_packets:
        lost = meta.error or f"lost {meta.lost_packets} packets"
        faults.append(f"{lost}; byte counts are a lower bound")
    elif status == "failed" and meta.error:
        faults.append(f"the capture failed: {meta.error}")
    if meta.rdma.get("drops_counted") is False:
        faults.append(
            "captured by the RDMA sniffer, which counts no drops (its 0 does not mean none) and stamps packets in "
            "software when its queue is polled: byte counts may be a lower bound, times jitter by microseconds"
        )
    return faults


class RunManifest(_Document):
    """A run.json as every reader sees it, like HostMeta: typed properties for the keys read, `doc` the whole
    document (the result keeps it as `run`, as read). A result read back from JSON holds run.json's document
    too, so the reports read it through here as well."""

    __slots__ = ()

    @property
    def schema(self) -> int:
        value = self.doc.get(RUN_SCHEMA, SCHEMA)
        return int(value) if isinstance(value, int) else SCHEMA

    @property
    def run_id(self) -> str | None:
        return self._text("run_id")

    @property
    def status(self) -> str | None:
        return self._text(RUN_STATUS)

    @property
    def error(self) -> str | None:
        return self._text(META_ERROR)

    @property
    def interrupted_by(self) -> str | None:
        return self._text("interrupted_by")

    @property
    def command(self) -> str | None:
        """The launch command as one line (run.json may hold it as its argv)."""
        value = self.doc.get("command")
        if isinstance(value, list):
            return " ".join(str(c) for c in value) or None
        return str(value) if value else None

    @property
    def launch_order(self) -> list[str]:
        """Host names in launch order from run.json's hosts (names, or {"name": ...} objects)."""
        hosts = self.doc.get(RUN_HOSTS) or []
        names = [str(h.get("name") if isinstance(h, dict) else h) for h in hosts]
        return [n for n in names if n and n != "None"]

    @property
    def start_ns(self) -> int | None:
        value = self.doc.get("start_ns")
        return int(value) if isinstance(value, (int, float)) and value else None

    @property
    def end_ns(self) -> int | None:
        value = self.doc.get("end_ns")
        return int(value) if isinstance(value, (int, float)) and value else None

    @property
    def exit_code(self) -> int | None:
        value = self.doc.get("exit_code")
        return int(value) if isinstance(value, int) else None

    @property
    def training(self) -> dict[str, Any] | None:
        """The training command's own span and exit code (capture run wrapping it); None where not recorded."""
        value = self.doc.get("training")
        return value if isinstance(value, dict) and value else None

    @property
    def failed_agents(self) -> list[str]:
        agents = self.doc.get("agents") or {}
        return sorted(h for h, a in agents.items() if isinstance(a, dict) and a.get("status") == "failed")


def run_faults(run: RunManifest) -> list[str]:
    """What run.json says went wrong with the run as a whole (an interrupt, hosts that failed)."""
    faults = []
    if run.status == STATUS_INTERRUPTED:
        faults.append(f"the run was interrupted ({run.interrupted_by or 'signal'}): the captures end early")
    if run.failed_agents:
        faults.append(f"run.json: capture failed on {', '.join(run.failed_agents)}: {run.error or 'see run.json'}")
    return faults


def peer_addresses(meta: HostMeta, more: list[str] | None = None) -> set[str]:
    """The addresses by which other hosts reach a host: every interface's (host_addresses), the captured
    interface's and MORE, without prefix length, never loopback or link-local (every host has those)."""
    import ipaddress

    found = set()
    for text in [*meta.host_addresses, *meta.addresses, *(more or [])]:
        try:
            address = ipaddress.ip_interface(str(text)).ip
        except ValueError:
            continue
        if not (address.is_loopback or address.is_link_local):
            found.add(str(address))
    return found


__all__ = [
    "SCHEMA",
    "RUN_FILE",
    "META_FILE",
    "MARKERS_FILE",
    "READY_FILE",
    "RUN_SCHEMA",
    "RUN_HOSTS",
    "RUN_STATUS",
    "META_HOST",
    "META_ADDRESSES",
    "META_LINK_SPEED_BPS",
    "META_COUNTERS",
    "META_STATUS",
    "META_HOST_ADDRESSES",
    "META_LOST_PACKETS",
    "META_WRITTEN_PACKETS",
    "META_ERROR",
    "STATUS_COMPLETE",
    "STATUS_CAPTURING",
    "STATUS_INTERRUPTED",
    "LayoutError",
    "write_json",
    "read_json",
    "HostMeta",
    "read_meta",
    "is_run",
    "RunManifest",
    "capture_faults",
    "peer_addresses",
    "run_faults",
]

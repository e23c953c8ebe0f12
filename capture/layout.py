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


class LayoutError(ValueError):
    """A file of the capture directory that cannot be read as what it should be (one line: file, cause)."""


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write a run.json or meta.json by atomic replace, so a reader never sees half a file."""
    import json

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
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


def is_run(folder: Path) -> bool:
    """A capture directory: a folder holding run.json."""
    return (folder / RUN_FILE).is_file()


def launch_order(run: dict[str, Any]) -> list[str]:
    """Host names in launch order from run.json's hosts (names, or {"name": ...} objects)."""
    hosts = run.get(RUN_HOSTS) or []
    names = [str(h.get("name") if isinstance(h, dict) else h) for h in hosts]
    return [n for n in names if n and n != "None"]


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
    "LayoutError",
    "write_json",
    "read_json",
    "is_run",
    "launch_order",
]

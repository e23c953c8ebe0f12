"""Find the captures behind the paths a user gives and group them by host.

Three shapes are accepted: a capture directory (run.json + one folder per host with meta.json), a
folder searched recursively for capture files (recognised by magic bytes, not extension), or files.
Files of one tcpdump rotation set (`x.pcap`, `x.pcap1`, ... or strftime names) belong to one host;
their order is decided later by first packet time, never by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyze.read.formats import FileError, is_capture
from capture import layout

# Digit runs that tcpdump adds when rotating: a number after the extension (-C/-W) or a long
# strftime/epoch stamp (-G). Short digits inside a name ("host1.pcap") name different hosts.
_ROTATION = re.compile(r"(?<=\.pcap)\d*$|(?<=\.pcapng)\d*$|\d{6,}")
_COMPRESSED = re.compile(r"\.(gz|gzip|zst|zstd)$")


@dataclass
class HostInput:
    """One host's capture stream: its files and what its sidecar wrote about it."""

    name: str
    files: list[Path]
    meta: layout.HostMeta | None = None
    markers: Path | None = None
    folder: Path | None = None


@dataclass
class RunInput:
    """Everything found under the user's paths."""

    hosts: list[HostInput]
    run: dict[str, Any] | None = None
    root: Path | None = None
    warnings: list[str] = field(default_factory=list)


def discover(paths: list[Path]) -> RunInput:
    """Resolve user paths into hosts and files; raises FileError when nothing readable is there."""
    if not paths:
        raise FileError("no capture path given: name a capture directory, a folder of pcaps or capture files")
    if len(paths) == 1 and layout.is_run(paths[0]):
        return _capture_directory(paths[0])
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(f for f in sorted(p.rglob("*")) if f.is_file() and not _is_sidecar_file(f) and is_capture(f))
        elif p.is_file():
            files.append(p)
        else:
            raise FileError(f"{p}: offset 0: no such file or directory")
    if not files:
        raise FileError(f"{', '.join(map(str, paths))}: offset 0: no pcap, pcapng, gzip or zstd capture found")
    return RunInput(hosts=_group(files))


def _is_sidecar_file(path: Path) -> bool:
    return path.suffix in (".json", ".jsonl", ".html", ".csv", ".parquet", ".log", ".txt", ".md")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return layout.read_json(path)
    except layout.LayoutError as exc:
        raise FileError(str(exc)) from None


def _read_meta(path: Path) -> layout.HostMeta:
    return layout.HostMeta(_read_json(path))


def _capture_directory(root: Path) -> RunInput:
    run = _read_json(root / layout.RUN_FILE)
    warnings: list[str] = []
    manifest = layout.RunManifest(run)
    if manifest.schema != layout.SCHEMA:
        warnings.append(
            f"{root / layout.RUN_FILE}: schema {manifest.schema} is newer than this ringscope "
            f"reads ({layout.SCHEMA}); reading what it knows"
        )
    folders = sorted(d for d in root.iterdir() if d.is_dir())
    hosts: list[HostInput] = []
    for d in folders:
        files = [f for f in sorted(d.rglob("*")) if f.is_file() and not _is_sidecar_file(f) and is_capture(f)]
        meta = _read_meta(d / layout.META_FILE) if (d / layout.META_FILE).is_file() else None
        if not files:
            if meta is not None:
                warnings.append(f"{d}: host folder has meta.json but no capture files")
            continue
        markers = d / layout.MARKERS_FILE
        name = (meta.host or d.name) if meta else d.name
        hosts.append(
            HostInput(name=name, files=files, meta=meta, markers=markers if markers.is_file() else None, folder=d)
        )
    if not hosts:
        raise FileError(f"{root}: offset 0: capture directory holds no host folder with capture files")
    rank = {name: i for i, name in enumerate(manifest.launch_order)}
    captured = {h.name for h in hosts}
    absent = [name for name in rank if name not in captured]
    if absent:  # their traffic is still in their peers' captures (analyze.collective.topology: not captured)
        warnings.append(
            f"{root / layout.RUN_FILE}: {len(absent)} of {len(rank)} launched host(s) have no capture: "
            f"{', '.join(absent[:5])}{', ...' if len(absent) > 5 else ''}; their traffic is read from their peers'"
        )
    hosts.sort(key=lambda h: (rank.get(h.name, len(rank)), h.name))
    return RunInput(hosts=hosts, run=run, root=root, warnings=warnings)


def _group(files: list[Path]) -> list[HostInput]:
    """Group files into rotation sets; a folder with meta.json is one host whatever its file names."""
    groups: dict[tuple[str, str], list[Path]] = {}
    for f in dict.fromkeys(files):
        if (f.parent / layout.META_FILE).is_file():
            key = (str(f.parent), "")
        else:
            key = (str(f.parent), _ROTATION.sub("#", _COMPRESSED.sub("", f.name)))
        groups.setdefault(key, []).append(f)
    hosts = []
    for (parent, pattern), members in groups.items():
        meta_path = Path(parent) / layout.META_FILE
        meta = _read_meta(meta_path) if not pattern and meta_path.is_file() else None
        if meta is not None:
            name = meta.host or Path(parent).name
        else:
            name = pattern.replace("#", "").split(".")[0].rstrip("-_") or Path(parent).name
        markers = Path(parent) / layout.MARKERS_FILE
        hosts.append(
            HostInput(
                name=name,
                files=members,
                meta=meta,
                markers=markers if meta is not None and markers.is_file() else None,
                folder=Path(parent),
            )
        )
    _unique_names(hosts)
    return hosts


def _unique_names(hosts: list[HostInput]) -> None:
    """Two sets with the same stem in different folders get their folder name as a prefix."""
    seen: dict[str, int] = {}
    for h in hosts:
        seen[h.name] = seen.get(h.name, 0) + 1
    for h in hosts:
        if seen[h.name] > 1 and h.folder is not None:
            h.name = f"{h.folder.name}/{h.name}"

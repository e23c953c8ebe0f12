"""Where the list of hosts comes from: --hosts, a hostfile, or the training launcher's own options."""

from __future__ import annotations

import os
import re
from pathlib import Path

from capture.errors import CaptureError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_WHAT_TO_PASS = "pass --hosts h1,h2,... or --hostfile FILE (--hosts localhost for a job on this machine)"


def check_names(hosts: list[str]) -> list[str]:
    """Host names become folder names: refuse empty lists, duplicates and path characters."""
    if not hosts:
        raise CaptureError(f"no hosts given: {_WHAT_TO_PASS}")
    for host in hosts:
        if not _NAME.match(host):
            raise CaptureError(f"host name {host!r} is not a plain host name (letters, digits, '.', '_', '-')")
    duplicates = sorted({h for h in hosts if hosts.count(h) > 1})
    if duplicates:
        raise CaptureError(f"host listed twice: {', '.join(duplicates)}")
    return hosts


def parse_host_list(text: str) -> list[str]:
    """'h1:4,h2:4' or 'h1,h2' (horovodrun/mpirun -H) -> ['h1', 'h2']."""
    return [item.split(":")[0].strip() for item in text.split(",") if item.strip()]


def read_hostfile(path: Path) -> list[str]:
    """Hostfile lines 'host', 'host slots=4' or 'host:4'; '#' starts a comment."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise CaptureError(f"cannot read hostfile {path}: {error.strerror}") from None
    hosts = []
    for line in lines:
        words = line.split("#")[0].split()
        if words:
            hosts.append(words[0].split(":")[0])
    return hosts


def _option(argv: list[str], names: tuple) -> str | None:
    """Value of the first of NAMES in ARGV ('-H v', '--hosts=v')."""
    for i, word in enumerate(argv):
        for name in names:
            if word == name and i + 1 < len(argv):
                return argv[i + 1]
            if word.startswith(name + "="):
                return word[len(name) + 1 :]
    return None


_HOST_OPTIONS = {  # launcher -> (host-list options, hostfile options)
    "horovodrun": (("-H", "--hosts"), ("-hostfile", "--hostfile")),
    "mpirun": (("-H", "--host", "-host"), ("--hostfile", "-hostfile", "--machinefile", "-machinefile")),
    "mpiexec": (("-H", "--host", "-host"), ("--hostfile", "-hostfile", "--machinefile", "-machinefile")),
}
_TORCHRUN = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def hosts_from_command(command: list[str]) -> list[str]:
    """The hosts a launcher in COMMAND will use, or a CaptureError saying what to pass."""
    for i, word in enumerate(command):
        name = os.path.basename(word)
        rest = command[i + 1 :]
        if name in _HOST_OPTIONS:
            list_options, file_options = _HOST_OPTIONS[name]
            listed = _option(rest, list_options)
            if listed:
                return parse_host_list(listed)
            hostfile = _option(rest, file_options)
            if hostfile:
                return read_hostfile(Path(hostfile))
            if name == "horovodrun":
                return ["localhost"]  # horovodrun without -H runs on this machine
        if name in _TORCHRUN:
            nnodes = _option(rest, ("--nnodes",)) or "1"
            if nnodes.split(":")[-1] == "1":
                return ["localhost"]
            raise CaptureError(f"torchrun --nnodes {nnodes} does not name its hosts: {_WHAT_TO_PASS}")
    raise CaptureError(f"cannot tell the hosts from the training command: {_WHAT_TO_PASS}")

"""Run a command on a host through the remote-shell template ('ssh {host}', 'ip netns exec {host}', ...)."""

from __future__ import annotations

import os
import shlex
import socket

from capture.errors import CaptureError

DEFAULT_TEMPLATE = "ssh {host}"
LOCAL = "local"
# These pass their command line through the remote login shell, so it must arrive as one quoted string.
_SHELL_JOINING = {"ssh", "rsh", "autossh"}


def this_machine(host: str) -> bool:
    return host in ("localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn())


def resolve_template(template: str | None, hosts: list[str]) -> str:
    """The template to use: given, else 'local' when every host is this machine, else 'ssh {host}'."""
    if template is None:
        return LOCAL if all(this_machine(h) for h in hosts) else DEFAULT_TEMPLATE
    if template.strip() in ("", LOCAL):
        return LOCAL
    if "{host}" not in template:
        raise CaptureError(f"--remote-shell {template!r} must contain {{host}} (e.g. 'ssh {{host}}'), or be 'local'")
    return template


def remote_argv(template: str, host: str, argv: list[str]) -> list[str]:
    """argv that runs ARGV on HOST; ssh-like shells get it as one shell-quoted word."""
    if template == LOCAL:
        return list(argv)
    words = [word.replace("{host}", host) for word in shlex.split(template)]
    if os.path.basename(words[0]) in _SHELL_JOINING:
        return words + [shlex.join(argv)]
    return words + list(argv)

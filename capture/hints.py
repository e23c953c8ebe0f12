"""What the training itself says about its network: the interface and the addresses it was told to use.

Why: host names often resolve to the management network (or only to the host itself) while the job is told,
by a variable or a launcher flag, to talk over another NIC. Routing to the peers' names then points at the
wrong interface; the job's own settings do not. They come from the environment of `capture run` or of an
agent (a sidecar shares its pod's), and from the training command line `capture run` wraps:

- interface specs, in NCCL's syntax (comma-separated prefixes; '=' exact names; a leading '^' excludes):
  NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, HOROVOD_GLOO_IFACE, TP_SOCKET_IFNAME, horovodrun
  --network-interface(s), Open MPI's btl_tcp_if_include;
- addresses the job connects to: MASTER_ADDR (also as `env MASTER_ADDR=... cmd`), torchrun --master-addr
  and --rdzv-endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

IFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "TP_SOCKET_IFNAME")
ADDRESS_VARIABLES = ("MASTER_ADDR",)
_IFACE_FLAGS = ("--network-interface", "--network-interfaces", "--network_interface")
_ADDRESS_FLAGS = ("--master-addr", "--master_addr")
_ENDPOINT_FLAGS = ("--rdzv-endpoint", "--rdzv_endpoint")


@dataclass
class Hints:
    """Interface specs and addresses, each with where it was found (for meta.json's interface_reason)."""

    ifaces: list[tuple[str, str]] = field(default_factory=list)  # (spec, source)
    addresses: list[tuple[str, str]] = field(default_factory=list)  # (address or name, source)

    def add(self, other: "Hints") -> "Hints":
        return Hints(self.ifaces + other.ifaces, self.addresses + other.addresses)

    def as_args(self) -> list[str]:
        """Agent options carrying these hints to a host whose environment does not have them (ssh)."""
        return [w for spec, src in self.ifaces for w in ("--iface-hint", f"{spec}@{src}")] + [
            w for addr, src in self.addresses for w in ("--address-hint", f"{addr}@{src}")
        ]


def from_environment(env: dict[str, str]) -> Hints:
    hints = Hints()
    for name in IFACE_VARIABLES:
        if env.get(name, "").strip():
            hints.ifaces.append((env[name].strip(), name))
    for name in ADDRESS_VARIABLES:
        if env.get(name, "").strip():
            hints.addresses.append((env[name].strip(), name))
    return hints


def _flag_values(argv: list[str], names: tuple[str, ...]) -> list[str]:
    values = []
    for i, word in enumerate(argv):
        for name in names:
            if word == name and i + 1 < len(argv):
                values.append(argv[i + 1])
            elif word.startswith(name + "="):
                values.append(word[len(name) + 1 :])
    return values


def from_command(argv: list[str]) -> Hints:
    """Hints in a training command line: `VAR=value` words (as `env` takes them), launcher flags."""
    assignments = dict(word.split("=", 1) for word in argv if "=" in word and word.split("=", 1)[0].isidentifier())
    hints = from_environment(assignments)
    for value in _flag_values(argv, _IFACE_FLAGS):
        hints.ifaces.append((value, "horovodrun --network-interface"))
    for i, word in enumerate(argv[:-2]):
        if word in ("-mca", "--mca") and argv[i + 1] == "btl_tcp_if_include":
            hints.ifaces.append((argv[i + 2], "mpirun btl_tcp_if_include"))
    for value in _flag_values(argv, _ADDRESS_FLAGS):
        hints.addresses.append((value, "torchrun --master-addr"))
    for value in _flag_values(argv, _ENDPOINT_FLAGS):
        if value.startswith("["):  # [v6]:port
            host = value[1:].split("]")[0]
        else:
            host = value.split(":")[0] if value.count(":") == 1 else value
        hints.addresses.append((host, "torchrun --rdzv-endpoint"))
    return hints


def parse_arg(text: str) -> tuple[str, str]:
    """'VALUE@SOURCE' (as as_args writes it) or a bare VALUE given by hand -> (value, source)."""
    value, _, source = text.partition("@")
    return value, source or "--iface-hint"


def matches(spec: str, names: list[str]) -> list[str]:
    """NAMES selected by an NCCL-style interface spec, in NAMES' order."""
    exclude = spec.startswith("^")
    words = [w for w in spec.lstrip("^").split(",") if w]
    exact = [w[1:] for w in words if w.startswith("=")]
    prefixes = [w for w in words if not w.startswith("=")]

    def hit(name: str) -> bool:
        return name in exact or any(name.startswith(p) for p in prefixes)

    return [n for n in names if hit(n) != exclude]

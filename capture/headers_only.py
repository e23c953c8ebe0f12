"""Keep no payload byte: every packet cut at the end of its TCP/UDP header, in the kernel, before it is stored.
RoCEv2 (UDP 4791) is cut at the end of its InfiniBand transport headers (BTH and the opcode's extension headers),
which the analysis reads.

Why: a fixed snaplen cannot do it. Headers differ in length (IPv4 options, TCP options, IPv6, VLAN tags), so
any snaplen long enough for the longest header keeps payload bytes of every shorter one, and a training job's
payload is its gradients (or its users' data). A classic BPF filter returns how many bytes of a packet to
keep, so one that computes each packet's header length keeps exactly the headers. tcpdump cannot load such a
program, so the agent starts tcpdump with a filter that accepts nothing, compiles the user's own filter with
tcpdump (`-ddd`), appends the header-length program to it (each "accept" of the user's filter jumps there)
and attaches the result to tcpdump's packet socket, borrowed through pidfd_getfd (Linux 5.6+; root, or
CAP_SYS_PTRACE). Nothing is captured before the program is in place.

Where that cannot be done (an older kernel, no ptrace right, a link type the program does not know such as
`any`'s cooked headers), `attach` raises and the agent falls back to a snaplen as long as the longest usual
header, and says in meta.json that payload bytes may be kept.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import subprocess
from pathlib import Path

NOTHING = "less 0"  # tcpdump's filter until the program is attached: no packet is that short
LONGEST_HEADERS = 22 + 60 + 60  # Ethernet with two VLAN tags, IPv4 or IPv6 + extension, TCP with all options
LINKTYPE_ETHERNET, RAW_LINKTYPES = 1, (12, 14, 101, 228, 229)
ROCE_UDP_PORT = 4791  # RoCEv2: the UDP payload starts with the InfiniBand BTH (12 bytes) and its extension headers
# Extension-header bytes after the BTH by opcode (InfiniBand spec vol. 1, 9.2-9.4: RETH 16, AETH 4, ImmDt 4, IETH 4,
# AtomicETH 28, AtomicAckETH 8, DETH 8; a CNP's 16 reserved bytes); every other opcode has none.
ROCE_EXTENSION = {
    4: (0x03, 0x05, 0x09, 0x0D, 0x0F, 0x10, 0x11, 0x16, 0x17, 0x23, 0x25, 0x29),
    8: (0x64,),
    12: (0x12, 0x65),
    16: (0x06, 0x0A, 0x0C, 0x26, 0x2A, 0x81),
    20: (0x0B, 0x2B),
    28: (0x13, 0x14),
}

# classic BPF opcodes (linux/filter.h)
_LDH_ABS, _LDB_ABS, _LDH_IND, _LDB_IND, _LDX_MSH, _LD_MEM, _ST = 0x28, 0x30, 0x48, 0x50, 0xB1, 0x60, 0x02
_LD_IMM, _LDX_IMM = 0x00, 0x01
_JA, _JEQ, _JSET = 0x05, 0x15, 0x45
_ADD_K, _ADD_X, _AND_K, _RSH_K, _TXA = 0x04, 0x0C, 0x54, 0x74, 0x87
_RET_K, _RET_A = 0x06, 0x16
_SO_ATTACH_FILTER = 26
_SYS_PIDFD_OPEN, _SYS_PIDFD_GETFD = 434, 438


class _Program:
    """A tiny assembler: instructions with symbolic jump targets, resolved to BPF's relative offsets."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int | str]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def op(self, code: int, k: int | str = 0, jt: str | int = 0, jf: str | int = 0) -> None:
        """One instruction; K may name a label for an unconditional jump (BPF_JA's offset is 32 bits)."""
        self.code.append((code, jt, jf, k))

    def assemble(self) -> list[tuple[int, int, int, int]]:
        out = []
        for i, (code, jt, jf, k) in enumerate(self.code):
            rel = [self.labels[t] - i - 1 if isinstance(t, str) else t for t in (jt, jf)]
            if not all(0 <= r < 256 for r in rel):
                raise ValueError("BPF jump out of range")
            out.append((code, rel[0], rel[1], self.labels[k] - i - 1 if isinstance(k, str) else k))
        return out


def _ipv4(p: _Program, at: int, keep: int, tag: str) -> None:
    """IPv4 at offset AT: keep through the TCP/UDP/ICMP header (the IP header alone for a later fragment)."""
    p.label(f"ip4{tag}")
    p.op(_LDB_ABS, at + 9)
    p.op(_ST, 0)  # M[0] = protocol
    p.op(_LDX_MSH, at)  # X = IP header length
    p.op(_LDH_ABS, at + 6)
    p.op(_JSET, 0x1FFF, f"ip4only{tag}", 0)  # not the first fragment: no transport header in it
    p.op(_LD_MEM, 0)
    p.op(_JEQ, 6, 0, f"ip4udp{tag}")
    p.op(_LDB_IND, at + 12)  # TCP data offset, in its high nibble
    p.op(_AND_K, 0xF0)
    p.op(_RSH_K, 2)
    p.op(_ADD_X)
    p.op(_ADD_K, at + keep)
    p.op(_RET_A)
    p.label(f"ip4udp{tag}")
    p.op(_JEQ, 17, f"ip4dport{tag}", 0)
    p.op(_JEQ, 1, f"ip4eight{tag}", f"ip4only{tag}")  # ICMP: its 8-byte header
    p.label(f"ip4dport{tag}")
    p.op(_LDH_IND, at + 2)
    p.op(_JEQ, ROCE_UDP_PORT, 0, f"ip4eight{tag}")
    p.op(_LD_IMM, at + 8 + 12 + keep)  # through the UDP header and the BTH, after X (the IP header's length)
    p.op(_ST, 1)
    p.op(_LDB_IND, at + 8)  # the BTH's opcode
    p.op(_JA, "roce")
    p.label(f"ip4eight{tag}")
    p.op(_TXA)
    p.op(_ADD_K, at + 8 + keep)
    p.op(_RET_A)
    p.label(f"ip4only{tag}")
    p.op(_TXA)
    p.op(_ADD_K, at + keep)
    p.op(_RET_A)


def _ipv6(p: _Program, at: int, keep: int, tag: str) -> None:
    """IPv6 at offset AT: TCP/UDP/ICMPv6 right after the fixed header; behind extension headers, the fixed
    header alone (training traffic does not use them)."""
    p.label(f"ip6{tag}")
    p.op(_LDB_ABS, at + 6)
    p.op(_JEQ, 6, 0, f"ip6udp{tag}")
    p.op(_LDB_ABS, at + 40 + 12)
    p.op(_AND_K, 0xF0)
    p.op(_RSH_K, 2)
    p.op(_ADD_K, at + 40 + keep)
    p.op(_RET_A)
    p.label(f"ip6udp{tag}")
    p.op(_JEQ, 17, f"ip6dport{tag}", 0)
    p.op(_JEQ, 58, f"ip6eight{tag}", 0)
    p.op(_RET_K, at + 40 + keep)
    p.label(f"ip6dport{tag}")
    p.op(_LDH_ABS, at + 40 + 2)
    p.op(_JEQ, ROCE_UDP_PORT, 0, f"ip6eight{tag}")
    p.op(_LDX_IMM, 0)
    p.op(_LD_IMM, at + 48 + 12 + keep)  # through the UDP header and the BTH
    p.op(_ST, 1)
    p.op(_LDB_ABS, at + 48)  # the BTH's opcode
    p.op(_JA, "roce")
    p.label(f"ip6eight{tag}")
    p.op(_RET_K, at + 48 + keep)


def _roce(p: _Program) -> None:
    """Shared by every IP header's RoCEv2 branch, which sets A to the BTH's opcode, M[1] to the bytes through the
    BTH and X to what they are counted after: keep through the opcode's extension headers too."""
    p.label("roce")
    for ext, opcodes in ROCE_EXTENSION.items():
        for opcode in opcodes:
            p.op(_JEQ, opcode, f"roce{ext}", 0)
    for ext in (0, *ROCE_EXTENSION):
        p.label(f"roce{ext}")
        p.op(_LD_MEM, 1)
        p.op(_ADD_X)
        p.op(_ADD_K, ext)
        p.op(_RET_A)


def header_program(linktype: int, keep: int = 0) -> list[tuple[int, int, int, int]]:
    """The program returning each packet's header length (+ KEEP payload bytes) for LINKTYPE."""
    p = _Program()
    # M[1] is written on every path first: the kernel's checker lets a RET fall through to the next instruction,
    # so the RoCE chain would otherwise read a cell some path (on paper) never wrote
    p.op(_LD_IMM, 0)
    p.op(_ST, 1)
    if linktype == LINKTYPE_ETHERNET:
        for depth, at in enumerate((12, 16, 20)):  # the ethertype behind 0, 1 or 2 VLAN tags in the frame
            p.label(f"eth{depth}")
            p.op(_LDH_ABS, at)
            if depth < 2:
                p.op(_JEQ, 0x8100, f"eth{depth + 1}", 0)
                p.op(_JEQ, 0x88A8, f"eth{depth + 1}", 0)
            p.op(_JEQ, 0x0800, f"ip4e{depth}", 0)
            p.op(_JEQ, 0x86DD, f"ip6e{depth}", 0)
            p.op(_RET_K, at + 2 + 64)  # not IP (ARP, LLDP ...): its first 64 bytes
        for depth, at in enumerate((14, 18, 22)):
            _ipv4(p, at, keep, f"e{depth}")
            _ipv6(p, at, keep, f"e{depth}")
    elif linktype in RAW_LINKTYPES:
        p.op(_LDB_ABS, 0)
        p.op(_RSH_K, 4)
        p.op(_JEQ, 4, "ip4r", 0)
        p.op(_JEQ, 6, "ip6r", 0)
        p.op(_RET_K, 64)
        _ipv4(p, 0, keep, "r")
        _ipv6(p, 0, keep, "r")
    else:
        raise ValueError(f"link type {linktype}: no header-length program")
    _roce(p)
    return p.assemble()


def user_program(tcpdump: str, iface: str, bpf: str | None) -> tuple[int, list[tuple[int, int, int, int]]]:
    """(link type, the user's filter as tcpdump compiles it for IFACE); any accept returns a positive length."""
    argv = [tcpdump, "-i", iface, "-ddd", "-s", "65535", *([bpf] if bpf else [])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise ValueError(done.stderr.strip() or "tcpdump -ddd failed")
    lines = done.stdout.split("\n")
    program = [(int(c), int(jt), int(jf), int(k)) for c, jt, jf, k in (line.split() for line in lines[1:] if line)]
    return _linktype(tcpdump, iface), program


def _linktype(tcpdump: str, iface: str) -> int:
    """IFACE's link type as libpcap opens it (`tcpdump -L` lists DLT names; the numbers are fixed)."""
    done = subprocess.run([tcpdump, "-i", iface, "-L"], capture_output=True, text=True, timeout=30)
    text = done.stdout + done.stderr  # tcpdump 4.99 prints the list on stderr
    names = [line.split()[0] for line in text.splitlines() if line.startswith(" ") and line.strip()]
    first = names[0] if names else ""  # the default: the one tcpdump opens without -y
    known = {"EN10MB": LINKTYPE_ETHERNET, "RAW": 12, "IPV4": 228, "IPV6": 229}
    if first not in known:
        raise ValueError(f"{iface} has link type {first or 'unknown'}, which the header cut does not decode")
    return known[first]


def combined(user: list[tuple[int, int, int, int]], headers: list[tuple[int, int, int, int]]) -> list[tuple]:
    """The user's filter with every accept turned into a jump to the header-length program appended to it."""
    start = len(user)
    out = [(_JA, 0, 0, start - i - 1) if ins[0] == _RET_K and ins[3] else ins for i, ins in enumerate(user)]
    return out + headers


def _packet_socket(pid: int) -> int:
    """The number of PID's file descriptor that is its packet socket."""
    inodes = set()
    for line in Path(f"/proc/{pid}/net/packet").read_text().splitlines()[1:]:
        fields = line.split()
        if fields:
            inodes.add(fields[-1])
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return int(fd)
    raise OSError(f"process {pid} has no packet socket")


def attach(pid: int, program: list[tuple[int, int, int, int]]) -> None:
    """Replace the filter on process PID's packet socket with PROGRAM; OSError when that is not allowed."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = _packet_socket(pid)
    pidfd = libc.syscall(_SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_open: " + os.strerror(ctypes.get_errno()))
    try:
        local = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
        if local < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd: " + os.strerror(ctypes.get_errno()))
    finally:
        os.close(pidfd)
    code = b"".join(struct.pack("HBBI", *ins) for ins in program)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(buffer))
    sock = socket.socket(fileno=local)
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
    finally:
        sock.close()

"""The capture agent on loopback: known bytes in, the same bytes in the pcap, clean stops, no orphans."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from capture import tcpdump
from capture.units import parse_rate, parse_size
from tests.support.pcap_bytes import payload_kept, tcp_bytes
from tests.support.requirements import require, require_capture

ROOT = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, "-m", "capture", "agent"]


# ---- pure parts ---------------------------------------------------------------------------------


def test_parse_counters_reads_tcpdump_exit_report():
    text = (
        "tcpdump: listening on eth0, link-type EN10MB (Ethernet), snapshot length 128 bytes\n"
        "1234 packets captured\n1300 packets received by filter\n7 packets dropped by kernel\n"
        "1 packet dropped by interface\n"
    )
    assert tcpdump.parse_counters(text) == {
        "captured": 1234,
        "received_by_filter": 1300,
        "dropped_by_kernel": 7,
        "dropped_by_interface": 1,
    }
    without_interface_line = text.rsplit("1 packet", 1)[0]
    assert tcpdump.parse_counters(without_interface_line)["dropped_by_interface"] == 0
    assert tcpdump.parse_counters("tcpdump: listening on eth0\n") is None


def test_command_is_headers_only_nanosecond_and_packet_buffered(tmp_path):
    argv = tcpdump.command(
        "/usr/bin/tcpdump", "eth0", tmp_path, 128, "tcp", rotate_bytes=int(parse_size("1.5G")), keep=4
    )
    assert argv[:3] == ["/usr/bin/tcpdump", "-i", "eth0"]
    for flag in ("-n", "-U", "--time-stamp-precision=nano"):
        assert flag in argv
    assert argv[argv.index("-s") + 1] == "128"
    assert argv[argv.index("-C") + 1] == "1500" and argv[argv.index("-W") + 1] == "4"
    assert argv[-3:] == ["-w", str(tmp_path / "eth0.pcap"), "tcp"]
    timed = tcpdump.command("tcpdump", "lo", tmp_path, 142, rotate_seconds=60, user="tcpdump")
    assert timed[timed.index("-Z") + 1] == "tcpdump"
    assert timed[timed.index("-G") + 1] == "60" and timed[timed.index("-w") + 1].endswith("lo.pcap%s")


def test_units():
    assert parse_rate("25Gbit") == 25_000_000_000
    assert parse_rate("100G") == 100_000_000_000
    assert parse_rate("1e9") == 1_000_000_000
    assert parse_size("2GiB") == 2 * 1024**3
    with pytest.raises(ValueError):
        parse_rate("fast")


def test_missing_tcpdump_is_one_clear_line(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [*AGENT, "--out", str(tmp_path / "cap"), "--iface", "lo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "tcpdump is not installed" in done.stderr and "Traceback" not in done.stderr


def test_option_conflicts_are_one_clear_line(tmp_path):
    done = subprocess.run(
        [*AGENT, "--out", str(tmp_path), "--keep", "3"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert (
        done.returncode == 2 and done.stderr.startswith("ringscope: error: --keep") and "Traceback" not in done.stderr
    )


# ---- real captures ------------------------------------------------------------------------------


class Agent:
    """An agent subprocess on loopback; knows tcpdump's pid from the ready line."""

    def __init__(self, out: Path, *args: str) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [*AGENT, "--out", str(out), "--iface", "lo", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.ready_line = self.proc.stdout.readline()
        assert self.ready_line.startswith("ringscope-agent: ready"), self.proc.stderr.read()
        self.tcpdump_pid = int(self.ready_line.split("tcpdump_pid=")[1].split()[0])
        assert (out / ".ready").exists()

    def finish(self, timeout_s: float = 30) -> dict:
        out, err = self.proc.communicate(timeout=timeout_s)
        assert self.proc.returncode == 0, err
        assert "ringscope-agent: stopped" in out
        return json.loads((self.out / "meta.json").read_text())


def send_known_bytes(nbytes: int) -> int:
    """Send NBYTES over a fresh loopback TCP connection; returns the server port."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = []

    def serve() -> None:
        conn, _ = server.accept()
        total = 0
        while chunk := conn.recv(1 << 16):
            total += len(chunk)
        received.append(total)
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(os.urandom(nbytes))
    thread.join(timeout=30)
    server.close()
    assert received == [nbytes]
    return port


def tcpdump_read_count(pcap: Path) -> int:
    done = subprocess.run(["tcpdump", "-r", str(pcap), "-n", "-q"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return len(done.stdout.splitlines())


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_sigterm_stop_records_known_bytes_and_meta(tmp_path):
    require_capture()
    nbytes = 3_000_000
    agent = Agent(tmp_path / "cap", "--link-speed", "10Gbit", "--filter", "tcp")
    started = time.time_ns()
    port = send_known_bytes(nbytes)
    agent.proc.send_signal(signal.SIGTERM)
    meta = agent.finish()

    assert meta["schema"] == 1 and meta["status"] == "complete" and meta["stop_reason"] == "SIGTERM"
    assert meta["interface"] == "lo" and "127.0.0.1/8" in meta["addresses"] and meta["mtu"] == 65536
    assert meta["link_speed_bps"] == 10_000_000_000 and meta["link_speed_source"] == "cli"
    assert meta["tcpdump_command"][0].endswith("tcpdump") and "-U" in meta["tcpdump_command"]
    assert meta["tcpdump_version"] and meta["filter"] == "tcp"
    assert meta["payload_cut"] == "kernel filter: headers + 0 payload bytes" and meta["payload_bytes"] == 0
    assert meta["start_ns"] < started < meta["end_ns"]
    assert meta["clock"]["clock"] == "CLOCK_REALTIME"
    assert isinstance(meta["offloads"], dict)
    counters = meta["counters"]
    assert counters["dropped_by_kernel"] == 0 and counters["dropped_by_interface"] == 0
    assert meta["files"] == ["lo.pcap"]
    pcap = tmp_path / "cap" / "lo.pcap"
    assert tcpdump_read_count(pcap) == counters["captured"]
    stream, wire = tcp_bytes(pcap, dport=port)
    assert stream == nbytes <= wire
    assert not (tmp_path / "cap" / ".ready").exists()
    assert not alive(agent.tcpdump_pid)


def mixed_traffic() -> None:
    """TCP over IPv4 and IPv6 with payloads of several sizes, UDP datagrams (and the ICMP they draw)."""
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        server = socket.create_server((host, 0), family=family)
        with socket.create_connection(server.getsockname()[:2]) as client:
            conn, _ = server.accept()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for size in (1, 7, 100, 1400, 5000, 60000):
                client.sendall(b"g" * size)
                got = 0
                while got < size:
                    got += len(conn.recv(65536))
            conn.close()
        server.close()
        with socket.socket(family, socket.SOCK_DGRAM) as udp:
            for size in (1, 300, 1200):
                udp.sendto(b"u" * size, (host, 9))


@pytest.mark.parametrize("keep", [0, 16])
def test_no_payload_byte_is_stored_unless_asked(tmp_path, keep):
    """Each packet is cut in the kernel at the end of its own TCP/UDP/ICMP header (lengths read back from the
    stored headers, record by record), or KEEP payload bytes after it with --payload-bytes; tcpdump runs as an
    unprivileged user once capturing."""
    require_capture()
    args = ("--payload-bytes", str(keep)) if keep else ()
    agent = Agent(tmp_path / "cap", *args)
    mixed_traffic()
    time.sleep(0.2)
    agent.proc.send_signal(signal.SIGTERM)
    meta = agent.finish()
    assert meta["payload_cut"] == f"kernel filter: headers + {keep} payload bytes", meta["payload_cut"]
    assert meta["tcpdump_user"] == "tcpdump" and meta["tcpdump_command"][meta["tcpdump_command"].index("-Z") + 1]
    kept = payload_kept(tmp_path / "cap" / "lo.pcap")
    assert {"tcp4", "udp4", "icmp4", "tcp6", "udp6"} <= kept.keys(), kept.keys()
    for kind, sizes in kept.items():
        assert max(sizes) == keep and min(sizes) >= 0, (kind, sorted(set(sizes)))
    assert tcpdump_read_count(tmp_path / "cap" / "lo.pcap") == meta["counters"]["captured"]


# A container's capabilities (Docker's and containerd's default set) plus NET_ADMIN, as the README's Kubernetes
# recipe grants: no CAP_SYS_PTRACE.
CONTAINER_CAPS = (
    "-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,+net_bind_service,+net_raw,"
    "+sys_chroot,+mknod,+audit_write,+setfcap,+net_admin"
)


def test_kubernetes_capabilities_still_cut_the_payload(tmp_path):
    """Without CAP_SYS_PTRACE the agent cannot reach a tcpdump that dropped to another user, so tcpdump stays
    root and the header cut is attached all the same: no payload byte kept."""
    require_capture()
    require(shutil.which("setpriv") is not None, "needs setpriv (util-linux)")
    out = tmp_path / "cap"
    argv = ["setpriv", f"--bounding-set={CONTAINER_CAPS}", "--inh-caps=-all", *AGENT, "--out", str(out)]
    proc = subprocess.Popen(
        [*argv, "--iface", "lo", "--duration", "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().startswith("ringscope-agent: ready"), proc.stderr.read()
    mixed_traffic()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["tcpdump_user"] == "root" and meta["payload_cut"] == "kernel filter: headers + 0 payload bytes"
    kept = payload_kept(out / "lo.pcap")
    assert kept and all(max(sizes) == 0 for sizes in kept.values()), kept


def test_a_link_without_a_header_program_says_payload_may_be_kept(tmp_path):
    """`--iface any` gives cooked (SLL) headers the kernel program does not know: a snaplen cuts instead,
    and meta.json says why, rather than claiming headers only."""
    require_capture()
    done = subprocess.run(
        [*AGENT, "--out", str(tmp_path / "cap"), "--iface", "any", "--duration", "0.3"], cwd=ROOT, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    meta = json.loads((tmp_path / "cap" / "meta.json").read_text())
    cut = meta["payload_cut"]  # libpcap opens `any` as LINUX_SLL or LINUX_SLL2, by version
    assert cut.startswith("snaplen 142 (any has link type LINUX_SLL")
    assert cut.endswith(", which the header cut does not decode: payload bytes may be kept)"), cut


def test_duration_stops_by_itself(tmp_path):
    require_capture()
    started = time.monotonic()
    agent = Agent(tmp_path / "cap", "--duration", "1")
    meta = agent.finish(timeout_s=20)
    assert meta["stop_reason"] == "duration" and meta["counters"]["dropped_by_kernel"] == 0
    assert 1 <= time.monotonic() - started < 15


def test_until_pid_stops_when_the_job_exits(tmp_path):
    require_capture()
    job = subprocess.Popen(["sleep", "1.5"])
    agent = Agent(tmp_path / "cap", "--until-pid", str(job.pid))
    job.wait()
    meta = agent.finish(timeout_s=20)
    assert meta["stop_reason"] == f"pid {job.pid} exited" and meta["status"] == "complete"


def test_sigkilled_agent_leaves_no_tcpdump(tmp_path):
    require_capture()
    agent = Agent(tmp_path / "cap")
    assert alive(agent.tcpdump_pid)
    agent.proc.kill()
    agent.proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while alive(agent.tcpdump_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(agent.tcpdump_pid), "tcpdump outlived its SIGKILLed agent"
    assert tcpdump.parse_counters((tmp_path / "cap" / "tcpdump.log").read_text()) is not None  # it stopped cleanly
    assert json.loads((tmp_path / "cap" / "meta.json").read_text())["status"] == "capturing"


def test_no_permission_is_one_clear_line_naming_the_fix():
    """An agent without the right to capture, and one told to write where it may not: one line each, exit 2. The
    agent runs as root stripped of every capability (setpriv), not as another user: that user could not read a
    checkout in a private folder (a 0700 temporary clone), and root without CAP_NET_RAW or CAP_DAC_OVERRIDE is
    refused the capture and a folder it does not own as any user is."""
    require_capture()
    require(shutil.which("setpriv") is not None, "needs setpriv (util-linux)")
    base = Path(tempfile.mkdtemp(prefix="ringscope-perm-"))
    try:
        locked = base / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        no_caps = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
        done = subprocess.run(
            [*no_caps, *AGENT, "--out", str(base / "cap"), "--iface", "lo"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert "permission" in done.stderr.lower() and "setcap cap_net_raw" in done.stderr
        # an --out it may not create is one clear line too
        done = subprocess.run(
            [*no_caps, *AGENT, "--out", str(locked / "cap"), "--iface", "lo"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2 and "cannot create the capture folder" in done.stderr, done.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_rotation_keeps_the_last_files(tmp_path):
    require_capture()
    agent = Agent(tmp_path / "cap", "--rotate-size", "1M", "--keep", "3", "--filter", "tcp")
    server = socket.create_server(("127.0.0.1", 0))
    with socket.create_connection(server.getsockname()) as client:
        conn, _ = server.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(12000):  # ~12000 small segments plus acks: > 2 MB of 128-byte records
            client.send(b"x" * 64)
            conn.recv(4096)
        conn.close()
    server.close()
    agent.proc.send_signal(signal.SIGINT)
    meta = agent.finish()
    assert 2 <= len(meta["files"]) <= 3 and all(name.startswith("lo.pcap") for name in meta["files"])
    for name in meta["files"]:
        assert tcpdump_read_count(tmp_path / "cap" / name) > 0


def test_roce_is_cut_after_its_transport_headers(tmp_path):
    """RoCEv2 datagrams (UDP 4791) keep their InfiniBand headers, which the analysis reads, and no payload byte:
    each is cut at the end of the BTH and its opcode's extension headers (the lengths the InfiniBand spec gives,
    written out here), and the stored capture reads back as queue pairs with their RDMA payload."""
    from analyze.read import layouts as L
    from analyze.read.fold import merge_host, scan_host
    from tests.support import rocegen as R

    require_capture()
    cases = {  # opcode -> extension bytes after the 12-byte BTH
        R.OP_WRITE_FIRST: 16,
        R.OP_WRITE_MIDDLE: 0,
        R.OP_WRITE_LAST_IMM: 4,
        R.OP_WRITE_ONLY_IMM: 20,
        R.OP_ACK: 4,
        R.OP_CNP: 16,
    }
    agent = Agent(tmp_path / "cap")
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with socket.socket(family, socket.SOCK_DGRAM) as udp, socket.socket(family, socket.SOCK_DGRAM) as sink:
            sink.bind((host, R.ROCE_PORT))  # something listens: no ICMP port-unreachable among the packets
            for i, (op, ext) in enumerate(cases.items()):
                body = R._bth(op, 0x1234, i, False) + R._extension(op, 1000, 7, R.SYNDROME_ACK, i)
                udp.sendto(body + bytes(1000 if ext != 4 or op != R.OP_ACK else 0) + b"crc!", (host, R.ROCE_PORT))
    time.sleep(0.2)
    agent.proc.send_signal(signal.SIGTERM)
    agent.finish()
    path = tmp_path / "cap" / "lo.pcap"
    data = path.read_bytes()
    pos, cut = 24, []
    while pos < len(data):
        caplen = int.from_bytes(data[pos + 8 : pos + 12], "little")
        cut.append(caplen)
        pos += 16 + caplen
    expected = [14 + ip + 8 + 12 + ext for ip in (20, 40) for ext in cases.values()]
    assert cut == expected
    hf = merge_host("lo", [scan_host([path], bin_ns=10**6, byte_mode=L.BYTES_PAYLOAD)])
    assert ((hf.keys[:, 4] >> np.uint64(8)) & np.uint64(0xFFFFFF)).tolist() == [0x1234] * len(hf.keys)
    assert int(hf.agg[:, L.AGG_PACKETS].sum()) == 12 and int(hf.agg[:, L.AGG_ROCE_CNPS].sum()) == 2
    assert int(hf.agg[:, L.AGG_ROCE_WRITE_BYTES].sum()) == 2 * 4 * 1000  # from the IP lengths, not the cut bytes


def test_an_rdma_device_is_captured_with_the_sniffer_and_says_what_it_cannot_count(tmp_path, monkeypatch):
    """--iface mlx5_0 names an RDMA device (no network interface of that name): chosen as given, its port's rate,
    GIDs (IPv4-mapped for RoCE) or LID (InfiniBand) read from sysfs as the InfiniBand driver lays it out, no kernel
    header cut (the sniffer has no socket), and meta.json saying timestamps are software and drops uncounted, which
    the analyzer repeats as a warning. tcpdump itself cannot run here: no RDMA device exists on these machines."""
    from capture import agent as agent_module
    from capture import layout, netinfo

    sys_rdma = tmp_path / "infiniband"
    for device, layer, rate, gids, lid in (
        (
            "mlx5_0",
            "Ethernet",
            "100 Gb/sec (4X EDR)",
            ["fe80:0000:0000:0000:0000:00ff:fe00:0001", "0000:0000:0000:0000:0000:ffff:0a00:0001"],
            "0x0",
        ),
        ("mlx5_1", "InfiniBand", "200 Gb/sec (4X HDR)", ["fe80:0000:0000:0000:0000:00ff:fe00:0002"], "0x12"),
    ):
        port = sys_rdma / device / "ports" / "1"
        (port / "gids").mkdir(parents=True)
        (port / "link_layer").write_text(layer + "\n")
        (port / "rate").write_text(rate + "\n")
        (port / "lid").write_text(lid + "\n")
        for i, gid in enumerate(gids):
            (port / "gids" / str(i)).write_text(gid + "\n")
    monkeypatch.setattr(netinfo, "SYS_RDMA", sys_rdma)
    assert netinfo.choose_interface("mlx5_0", [])[0] == "mlx5_0"
    roce = netinfo.interface_info("mlx5_0")
    assert roce["addresses"] == ["10.0.0.1"] and roce["link_speed_bps"] == 100e9
    assert roce["rdma"] == {
        "link_layer": "Ethernet",
        "timestamps": "software: taken when the RDMA sniffer's completion queue is polled",
        "drops_counted": False,
    }
    ib = netinfo.interface_info("mlx5_1:1")
    assert ib["addresses"] == ["lid:18"] and ib["link_speed_bps"] == 200e9 and ib["rdma"]["link_layer"] == "InfiniBand"
    with pytest.raises(netinfo.CaptureError, match="RDMA devices: mlx5_0, mlx5_1"):
        netinfo.choose_interface("mlx9_9", [])
    program, why = agent_module._header_cut("tcpdump", "mlx5_0", agent_module.AgentOptions(out=tmp_path / "x"))
    assert program is None and "no socket" in why
    faults = layout.capture_faults(layout.HostMeta({"status": "complete", **roce}))
    assert len(faults) == 1 and "counts no drops" in faults[0]

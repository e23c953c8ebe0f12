"""`capture run` end to end: agents on every host (local, network namespaces, real sshd), training in
between, a complete capture directory after. Ground truth comes from the workloads, not from the code."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from capture.errors import CaptureError
from capture.hosts import hosts_from_command, read_hostfile
from capture.remote import remote_argv, resolve_template
from tests.support.netns import launch_argv, netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.pcap_bytes import tcp_bytes
from tests.support.requirements import require, require_capture, require_module

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
RING = ["env", f"PYTHONPATH={ROOT}", PY, "-m", "capture.workloads.socket_ring"]
DDP = ["env", f"PYTHONPATH={ROOT}", PY, "-m", "capture.workloads.ddp_train"]


def capture_run(out: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, str(ROOT / "cli.py"), "capture", "run", "--out", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


# ---- hosts and remote shells --------------------------------------------------------------------


def test_hosts_come_from_the_launcher(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=4\nnode2:4\n\n")
    assert hosts_from_command(["horovodrun", "-np", "4", "-H", "a:2,b:2", "python", "t.py"]) == ["a", "b"]
    assert hosts_from_command(["horovodrun", "--hosts=a,b,c", "python", "t.py"]) == ["a", "b", "c"]
    assert hosts_from_command(["horovodrun", "--hostfile", str(hostfile), "python", "t.py"]) == ["node1", "node2"]
    assert hosts_from_command(["mpirun", "--host", "x,y", "python", "t.py"]) == ["x", "y"]
    assert hosts_from_command(["torchrun", "--nnodes=1", "--nproc-per-node=2", "t.py"]) == ["localhost"]
    assert read_hostfile(hostfile) == ["node1", "node2"]
    with pytest.raises(CaptureError, match="--nnodes 2 does not name its hosts"):
        hosts_from_command(["torchrun", "--nnodes", "2", "t.py"])
    with pytest.raises(CaptureError, match="pass --hosts"):
        hosts_from_command(["python", "train.py"])


def test_remote_shell_templates():
    argv = ["tar", "-C", "/tmp/a b", "-c", "."]
    assert remote_argv("ip netns exec {host}", "h1", argv) == ["ip", "netns", "exec", "h1", *argv]
    assert remote_argv("ssh -p 2222 {host}", "h1", argv) == ["ssh", "-p", "2222", "h1", "tar -C '/tmp/a b' -c ."]
    assert remote_argv("local", "h1", argv) == argv
    assert resolve_template(None, ["localhost"]) == "local"
    assert resolve_template(None, ["node7"]) == "ssh {host}"
    with pytest.raises(CaptureError, match="must contain"):
        resolve_template("ssh", ["node7"])


def test_no_hosts_is_one_clear_line(tmp_path):
    done = capture_run(tmp_path / "run", "--", "python", "train.py")
    assert done.returncode == 2 and "pass --hosts" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


# ---- real runs ------------------------------------------------------------------------------------


def ring_markers(run: Path, host_of_rank: list[str]) -> dict:
    """{rank: sorted iterations} from every host's markers.jsonl, checking each rank wrote on its host."""
    found = {}
    for host in set(host_of_rank):
        for line in (run / host / "markers.jsonl").read_text().splitlines():
            record = json.loads(line)
            assert host_of_rank[record["rank"]] == host
            assert record["start_ns"] <= record["end_ns"]
            found.setdefault(record["rank"], []).append(record["iteration"])
    return {rank: sorted(its) for rank, its in found.items()}


def check_host_folder(folder: Path) -> dict:
    """meta.json complete with 0 drops, and every pcap readable by tcpdump itself."""
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["status"] == "complete", meta
    assert meta["counters"]["dropped_by_kernel"] == 0 and meta["counters"]["dropped_by_interface"] == 0
    assert meta["files"]
    for name in meta["files"]:
        done = subprocess.run(
            ["tcpdump", "-r", str(folder / name), "-n", "-q", "-c", "5"], capture_output=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
    return meta


def test_local_run_socket_ring_exact_bytes(tmp_path):
    require_capture()
    run = tmp_path / "run"
    nbytes, steps, iters, port = 1_500_000, 2, 3, 29650
    ring = [
        *RING,
        "--hosts",
        "localhost,localhost,localhost",
        "--port",
        str(port),
        "--bytes",
        str(nbytes),
        "--steps",
        str(steps),
        "--iters",
        str(iters),
        "--gap-ms",
        "20",
    ]
    script = " & ".join(f"RANK={r} {' '.join(ring)}" for r in range(3)) + " & wait"
    done = capture_run(run, "--hosts", "localhost", "--iface", "lo", "--filter", "tcp", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["schema"] == 1 and manifest["hosts"] == ["localhost"] and manifest["exit_code"] == 0
    assert manifest["remote_shell"] == "local" and manifest["agents"]["localhost"]["status"] == "complete"
    assert manifest["start_ns"] < manifest["training"]["start_ns"] < manifest["training"]["end_ns"] < manifest["end_ns"]
    meta = check_host_folder(run / "localhost")
    assert meta["host"] == "localhost" and meta["interface"] == "lo"
    for rank in range(3):
        stream, wire = tcp_bytes(run / "localhost" / "lo.pcap", dport=port + rank)
        assert stream == iters * steps * nbytes <= wire
    assert ring_markers(run, ["localhost"] * 3) == {r: list(range(iters)) for r in range(3)}
    assert not list(Path("/tmp").glob(f"ringscope-{manifest['run_id']}-*")), "staging folder left behind"


def test_exit_code_is_the_training_commands(tmp_path):
    require_capture()
    done = capture_run(tmp_path / "run", "--hosts", "localhost", "--iface", "lo", "--", "sh", "-c", "exit 3")
    assert done.returncode == 3, done.stderr
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["exit_code"] == 3 and manifest["status"] == "complete"


def test_agent_failure_stops_before_training(tmp_path):
    require_capture()
    sentinel = tmp_path / "trained"
    done = capture_run(tmp_path / "run", "--hosts", "localhost", "--iface", "nosuch0", "--", "touch", str(sentinel))
    assert done.returncode == 2 and "host localhost: no network interface 'nosuch0'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not sentinel.exists()
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "failed"


def launch_order(cluster) -> list[str]:
    """Launch order 3,1,4,2: different from the address order 1,2,3,4."""
    names = cluster.names
    return [names[2], names[0], names[3], names[1]]


def test_netns_socket_ring_four_hosts(tmp_path, netns_cluster):  # noqa: F811
    cluster = netns_cluster(4, rate="1gbit")
    hosts = launch_order(cluster)
    address = {h.name: h.address for h in cluster.hosts}
    run = tmp_path / "run"
    nbytes, steps, iters, port = 2_000_000, 3, 4, 29600
    done = capture_run(
        run,
        "--hosts",
        ",".join(hosts),
        "--remote-shell",
        "ip netns exec {host}",
        "--",
        *launch_argv(
            hosts,
            [*RING, "--hosts", ",".join(hosts), "--port", str(port), "--bytes", str(nbytes), "--steps", str(steps)]
            + ["--iters", str(iters), "--gap-ms", "50"],
        ),
    )
    assert done.returncode == 0, done.stderr
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["hosts"] == hosts and manifest["remote_shell"] == "ip netns exec {host}"
    assert all(manifest["agents"][h]["status"] == "complete" for h in hosts)
    for rank, host in enumerate(hosts):
        meta = check_host_folder(run / host)
        assert meta["host"] == host and meta["interface"] == "eth0"
        assert meta["link_speed_bps"] == 1_000_000_000 and meta["link_speed_source"] == "tc"
        assert f"{address[host]}/24" in meta["addresses"]
        right = (rank + 1) % len(hosts)
        # every byte this rank sent to its right neighbour, seen in its own capture
        stream, wire = tcp_bytes(run / host / "eth0.pcap", src=address[host], dport=port + right)
        assert stream == iters * steps * nbytes <= wire
    assert ring_markers(run, hosts) == {r: list(range(iters)) for r in range(4)}


def test_netns_torch_ddp_gloo_three_hosts(tmp_path, netns_cluster):  # noqa: F811
    require_module("torch")
    cluster = netns_cluster(3, rate="1gbit")
    names = cluster.names
    hosts = [names[2], names[0], names[1]]  # launch order differs from address order
    address = {h.name: h.address for h in cluster.hosts}
    run = tmp_path / "run"
    iters = 4
    done = capture_run(
        run,
        "--hosts",
        ",".join(hosts),
        "--remote-shell",
        "ip netns exec {host}",
        "--",
        *launch_argv(hosts, [*DDP, "--params", "500000", "--batch-size", "8", "--iters", str(iters)]),
        timeout_s=100,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(next(line for line in done.stdout.splitlines() if '"ddp_train"' in line))
    assert summary["world_size"] == 3 and summary["backend"] == "gloo"
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["hosts"] == hosts and manifest["exit_code"] == 0
    assert ring_markers(run, hosts) == {r: list(range(iters)) for r in range(3)}
    n = len(hosts)
    for host in hosts:
        check_host_folder(run / host)
        records = [json.loads(line) for line in (run / host / "markers.jsonl").read_text().splitlines()]
        assert all(r["gradient_bytes"] == summary["gradient_bytes"] for r in records)
        # a ring all-reduce sends at least 2(N-1)/N of the gradient per iteration from every host
        stream, _wire = tcp_bytes(run / host / "eth0.pcap", src=address[host])
        assert stream >= iters * 2 * (n - 1) / n * summary["gradient_bytes"]


# ---- through a real sshd ---------------------------------------------------------------------------

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@pytest.fixture
def sshd():
    """sshd on 127.0.0.1 with a throwaway host key and client key; yields the remote-shell template."""
    require_capture()
    require(
        os.access(SSHD, os.X_OK) and shutil.which("ssh") and shutil.which("ssh-keygen"),
        "needs openssh-server and openssh-client",
    )
    home = Path(tempfile.mkdtemp(prefix="ringscope-sshd-"))
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / key)], check=True, timeout=30)
    (home / "authorized_keys").write_text((home / "client_key.pub").read_text())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (home / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {home / 'host_key'}",
                f"PidFile {home / 'sshd.pid'}",
                f"AuthorizedKeysFile {home / 'authorized_keys'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "",
            ]
        )
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    daemon = subprocess.Popen([SSHD, "-D", "-e", "-f", str(home / "sshd_config")], stderr=subprocess.PIPE)
    template = (
        f"ssh -p {port} -i {home / 'client_key'} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
        "-o BatchMode=yes -o LogLevel=ERROR {host}"
    )
    deadline = time.monotonic() + 15
    while (
        subprocess.run(
            [*template.replace("{host}", "127.0.0.1").split(), "true"], capture_output=True, timeout=15
        ).returncode
        != 0
    ):
        assert daemon.poll() is None and time.monotonic() < deadline, daemon.stderr.read1().decode()
        time.sleep(0.2)
    yield template
    daemon.terminate()
    daemon.wait(timeout=10)
    shutil.rmtree(home, ignore_errors=True)


def test_run_through_real_sshd(tmp_path, sshd):
    run = tmp_path / "run"
    nbytes, iters, port = 1_000_000, 2, 29700
    ring = [
        *RING,
        "--hosts",
        "127.0.0.1,127.0.0.1",
        "--port",
        str(port),
        "--bytes",
        str(nbytes),
        "--iters",
        str(iters),
        "--gap-ms",
        "20",
    ]
    script = " & ".join(f"RANK={r} {' '.join(ring)}" for r in range(2)) + " & wait"
    done = capture_run(
        run,
        "--hosts",
        "127.0.0.1",
        "--remote-shell",
        sshd,
        "--iface",
        "lo",
        "--filter",
        "tcp",
        "--",
        "sh",
        "-c",
        script,
    )
    assert done.returncode == 0, done.stderr
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["remote_shell"] == sshd and manifest["agents"]["127.0.0.1"]["status"] == "complete"
    check_host_folder(run / "127.0.0.1")
    stream, wire = tcp_bytes(run / "127.0.0.1" / "lo.pcap", dport=port)
    assert stream == iters * nbytes <= wire
    assert ring_markers(run, ["127.0.0.1"] * 2) == {0: list(range(iters)), 1: list(range(iters))}

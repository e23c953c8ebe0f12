"""`capture run` under the faults of real clusters: a bad filter, Ctrl-C and hang-ups, a full disk, a killed
agent, an unreachable host, the wrong interface. Each must end in one clear line, a run.json that says what
happened per host, every capture that could be kept gathered, and nothing left behind on any host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.netns import launch_argv, netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.requirements import require, require_capture

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
CLI = [PY, str(ROOT / "cli.py")]
RING = ["env", f"PYTHONPATH={ROOT}", PY, "-m", "capture.workloads.socket_ring"]


def capture_run(out: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "capture", "run", "--out", str(out), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s
    )


def analyze_json(run: Path) -> dict:
    done = subprocess.run([*CLI, "analyze", str(run), "--json", "-"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def staged(stage: Path | str, run: Path) -> list[Path]:
    run_id = json.loads((run / "run.json").read_text())["run_id"]
    return list(Path(stage).glob(f"ringscope-{run_id}-*"))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def flood_command(segments: int) -> list[str]:
    """A training stand-in that sends SEGMENTS small TCP segments over loopback, one packet each (the receiver
    takes each before the next is sent, so none coalesce)."""
    code = (
        "import socket\n"
        "srv = socket.create_server(('127.0.0.1', 0))\n"
        "cl = socket.create_connection(srv.getsockname())\n"
        "conn, _ = srv.accept()\n"
        "cl.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
        f"for _ in range({segments}):\n"
        "    cl.send(b'x' * 100)\n"
        "    conn.recv(4096)\n"
        "cl.close()\n"
    )
    return [PY, "-c", code]


def test_a_bad_filter_reaches_the_user_in_tcpdumps_words(tmp_path):
    require_capture()
    run = tmp_path / "run"
    done = capture_run(
        run, "--hosts", "localhost", "--stage", str(tmp_path), "--filter", "port nonsense((", "--", "true"
    )
    assert done.returncode == 2, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error == "ringscope: error: host localhost: tcpdump failed on lo: unknown port 'nonsense'", done.stderr
    assert "Fatal Python error" not in done.stderr and "Traceback" not in done.stderr
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["training"] is None
    assert manifest["agents"]["localhost"]["status"] == "failed"
    assert "unknown port 'nonsense'" in (run / "localhost" / "tcpdump.log").read_text()  # gathered all the same
    assert not staged(tmp_path, run)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_an_interrupt_ends_the_whole_training_and_keeps_the_captures(tmp_path, sig):
    """The terminal's Ctrl-C (or the ssh session's hang-up) reaches `capture run`'s process group only; a shell
    script's background children ignore SIGINT (POSIX), so only passing it to the training's whole group, and
    ending what the script left there, stops them."""
    require_capture()
    run, pids, started = tmp_path / "run", tmp_path / "pids", tmp_path / "started"
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"sleep 60 & echo $! >> {pids}\n"
        f"sh -c 'trap \"\" INT; exec sleep 61' & echo $! >> {pids}\n"
        f"touch {started}\n"
        "wait\n"
    )
    script.chmod(0o755)
    proc = subprocess.Popen(
        [
            *CLI,
            "capture",
            "run",
            "--out",
            str(run),
            "--hosts",
            "localhost",
            "--stage",
            str(tmp_path),
            "--",
            str(script),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a terminal's foreground job is
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 2 and not [p for p in children if alive(p)], "the training left processes running"
    assert proc.returncode == 128 + sig, err
    assert f"interrupted by {signal.Signals(sig).name}" in err and "Traceback" not in err
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["interrupted_by"] == signal.Signals(sig).name
    assert manifest["training"]["exit_code"] != 0 and manifest["agents"]["localhost"]["status"] == "complete"
    meta = json.loads((run / "localhost" / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["files"] == ["lo.pcap"]
    assert not staged(tmp_path, run)
    warnings = analyze_json(run)["warnings"]
    assert any("interrupted" in w and signal.Signals(sig).name in w for w in warnings), warnings


@pytest.fixture
def tiny_disk(tmp_path):
    """A 2 MB tmpfs of our own, unmounted after the test."""
    require_capture()
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    require(done.returncode == 0, f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_is_reported_with_the_packets_it_lost(tmp_path, tiny_disk):
    run = tmp_path / "run"
    # 30,000 segments: > 4 MB of 128-byte records into a 2 MB staging disk
    done = capture_run(run, "--hosts", "localhost", "--stage", str(tiny_disk), "--", *flood_command(30_000))
    assert done.returncode == 2, done.stderr
    assert "lost" in done.stderr and "disk full" in done.stderr and "Traceback" not in done.stderr
    meta = json.loads((run / "localhost" / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["lost_packets"] > 0
    read_back = subprocess.run(
        ["tcpdump", "-r", str(run / "localhost" / "lo.pcap"), "-n", "-q"], capture_output=True, text=True
    )
    assert meta["written_packets"] == len(read_back.stdout.splitlines())
    assert meta["written_packets"] + meta["lost_packets"] == meta["counters"]["captured"]
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["agents"]["localhost"]["lost_packets"] == meta["lost_packets"]
    warnings = analyze_json(run)["warnings"]
    assert any(f"lost {meta['lost_packets']} of" in w and "disk full" in w for w in warnings), warnings
    assert not staged(tiny_disk, run)


def test_a_killed_agent_is_reported_and_its_capture_kept(tmp_path):
    require_capture()
    run, stage = tmp_path / "run", tmp_path / "stage"
    stage.mkdir()
    kill = f"pkill -KILL -f -- '--out {stage}/ringscope[-]'; sleep 0.5"  # [-]: the pattern does not match this sh
    done = capture_run(run, "--hosts", "localhost", "--stage", str(stage), "--", "sh", "-c", kill)
    assert done.returncode == 2, done.stderr
    assert "host localhost: agent exited with -9" in done.stderr and "Traceback" not in done.stderr
    assert json.loads((run / "run.json").read_text())["agents"]["localhost"]["status"] == "failed"
    assert json.loads((run / "localhost" / "meta.json").read_text())["status"] == "capturing"
    result = analyze_json(run)
    assert any("did not stop cleanly" in w and "counters unknown" in w for w in result["warnings"]), result["warnings"]
    assert not staged(stage, run)


def test_one_unreachable_host_and_the_others_gathered(tmp_path, netns_cluster):  # noqa: F811
    cluster = netns_cluster(2)
    missing = f"{cluster.prefix}-h9"  # never created
    hosts = [cluster.names[0], missing, cluster.names[1]]
    run, sentinel = tmp_path / "run", tmp_path / "trained"
    done = capture_run(
        run, "--hosts", ",".join(hosts), "--remote-shell", "ip netns exec {host}", "--", "touch", str(sentinel)
    )
    assert done.returncode == 2 and f"host {missing}:" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not sentinel.exists()
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["agents"][missing]["status"] == "failed"
    for host in cluster.names:
        assert manifest["agents"][host]["status"] == "complete", manifest["agents"][host]
        assert json.loads((run / host / "meta.json").read_text())["status"] == "complete"
    assert not staged("/tmp", run)


def test_the_wrong_interface_fails_the_health_check(tmp_path, netns_cluster):  # noqa: F811
    cluster = netns_cluster(2)
    run = tmp_path / "run"
    hosts = ",".join(cluster.names)
    ring = [
        *RING,
        "--hosts",
        ",".join(h.address for h in cluster.hosts),
        "--bytes",
        "200000",
        "--iters",
        "2",
        "--gap-ms",
        "20",
    ]
    launch = launch_argv(cluster.names, ring)
    done = capture_run(run, "--hosts", hosts, "--remote-shell", "ip netns exec {host}", "--iface", "lo", "--", *launch)
    assert done.returncode == 2, done.stderr
    for host in cluster.names:
        assert f"host {host}: its capture on lo holds no packet to or from the other hosts" in done.stderr
    assert "pass --iface NAME" in done.stderr
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["exit_code"] == 0 and manifest["status"] == "failed"
    assert all("no packet" in manifest["agents"][h]["health"] for h in cluster.names)
    # the analyzer says it first, and the verdict rests on it
    summary = subprocess.run([*CLI, "analyze", str(run)], cwd=ROOT, capture_output=True, text=True)
    assert summary.returncode == 0, summary.stderr
    head = summary.stdout.splitlines()[1 : 1 + len(cluster.names)]
    assert [line.split(":")[1].strip() for line in head] == cluster.names, summary.stdout
    assert all(line.startswith("CAPTURE PROBLEM:") and "missed the job's network" in line for line in head)
    problems = analyze_json(run)["capture_problems"]
    assert len(problems) == 2 and all("no traffic with the other captured hosts" in p for p in problems)
    # the right interface passes the same check
    done = capture_run(tmp_path / "run2", "--hosts", hosts, "--remote-shell", "ip netns exec {host}", "--", *launch)
    assert done.returncode == 0, done.stderr


def test_markers_reach_their_host_when_its_name_is_not_the_host_name(tmp_path, netns_cluster):  # noqa: F811
    """Each namespace host gets a UTS namespace whose host name (node-...) is not its --hosts name, as an
    ssh alias or a short name would be; ranks are not told RINGSCOPE_HOST, so they write to the markers
    folder named after their own host name, which the agent links to its own."""
    cluster = netns_cluster(2)
    uts = "ip netns exec {host} unshare --uts sh -c 'hostname node-{host} && exec \"$@\"' sh"
    ring = [*RING, "--hosts", ",".join(h.address for h in cluster.hosts), "--bytes", "100000", "--iters", "3"]
    ranks = " & ".join(
        f"RANK={rank} " + uts.replace("{host}", host) + " " + " ".join([*ring, "--gap-ms", "10"])
        for rank, host in enumerate(cluster.names)
    )
    run = tmp_path / "run"
    done = capture_run(
        run, "--hosts", ",".join(cluster.names), "--remote-shell", uts, "--", "sh", "-c", ranks + " & wait"
    )
    assert done.returncode == 0, done.stderr
    for rank, host in enumerate(cluster.names):
        lines = [json.loads(line) for line in (run / host / "markers.jsonl").read_text().splitlines()]
        assert [(m["rank"], m["iteration"]) for m in lines] == [(rank, i) for i in range(3)]
    assert not staged("/tmp", run)

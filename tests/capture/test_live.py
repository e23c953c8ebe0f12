"""The live view (`capture top`, `capture run --live`): what it shows while a capture grows, checked against the
bytes the generator wrote and against the analysis of the finished run; each poll reads only the new bytes."""

from __future__ import annotations

from dataclasses import replace
import json
import re
import subprocess
from pathlib import Path

from analyze.live.view import LiveRun, host_folders
from analyze.read import scan
from tests.support.expect import ROOT
from tests.support.netns import launch_argv, netns_cluster  # noqa: F401  (pytest fixture)
from tests.benchmarks.synth import ring_capture
from tests.support.training_capture import sure_in_one_of_two_runs

PY = str(ROOT / ".venv/bin/python") if (ROOT / ".venv/bin/python").exists() else "python3"
DDP = ["env", f"PYTHONPATH={ROOT}", "OMP_NUM_THREADS=1", PY, "-m", "capture.workloads.ddp_train"]
LINE = re.compile(r"^t=(?P<t>[\d.]+)s iterations=~?(?P<its>[-\d]+)(?: \([^)]*\))? \| (?P<rest>.*)$")
HOST = re.compile(
    r"^(?P<name>\S+) tx (?P<tx>[-\d.]+)(?: Mbit/s)?(?: \d+%)? rx \S+(?: Mbit/s)?(?: \d+%)? sent (?P<sent>\d+) B$"
)


def _parse(stdout: str) -> list[tuple[int | None, dict[str, tuple[float | None, int]]]]:
    """(iterations, {host: (tx Mbit/s or None, bytes sent)}) per live line."""
    out = []
    for text in stdout.splitlines():
        m = LINE.match(text)
        if not m:
            continue
        hosts = {}
        for part in m["rest"].split(" | ")[:-1]:  # the last part is the heaviest edges
            h = HOST.match(part)
            assert h, part
            hosts[h["name"]] = (None if h["tx"] == "-" else float(h["tx"]), int(h["sent"]))
        out.append((None if m["its"] == "-" else int(m["its"]), hosts))
    return out


def _one_host(tmp_path: Path, packets: int, iterations: int) -> tuple[bytes, Path, int]:
    """A generated ring capture's bytes, an empty host folder h1 (own address 10.77.0.1, 1 Gbit/s) to grow it in,
    and the bytes h1 sent by the generator's truth."""
    whole = tmp_path / "whole.pcap"
    truth = ring_capture(whole, packets=packets, iterations=iterations)
    host = tmp_path / "h1"
    host.mkdir()
    (host / "meta.json").write_text(json.dumps({"host": "h1", "addresses": ["10.77.0.1/24"], "link_speed_bps": 1e9}))
    return whole.read_bytes(), host, sum(int(b) for s, b in zip(truth.src, truth.ip_bytes) if s == "10.77.0.1")


def _out_of_order_bytes(live: LiveRun) -> int:
    """Bytes the only host's follower counted as re-sent or reordered."""
    follow = live._hosts[0].follow
    agg = follow._t.agg[: len(follow.flows()[0])]
    return int(agg[:, scan.L.AGG_RETRANS_BYTES].sum() + agg[:, scan.L.AGG_REORDER_BYTES].sum())


def test_a_growing_capture_is_read_once_to_the_byte(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """tcpdump's file as it grows: cut mid-record, then whole. Each poll starts where the last stopped (a cut
    record waits), the bytes sent equal the generator's, and markers count once their line is whole."""
    data, host, sent = _one_host(tmp_path, 30_000, 10)
    growing = host / "eth0.pcap"
    starts: list[int | None] = []
    real = scan._scan_open
    monkeypatch.setattr(scan, "_scan_open", lambda cap, t, **kw: starts.append(kw.get("start")) or real(cap, t, **kw))
    live = LiveRun(host_folders([host]))
    growing.write_bytes(data[: len(data) * 2 // 5 + 7])  # seven bytes into some record
    first = live.poll()
    (host / "markers.jsonl").write_text('{"rank": 0, "iteration": 0}\n{"rank": 0, "iter')
    with open(growing, "ab") as fh:
        fh.write(data[len(data) * 2 // 5 + 7 :])
    second = live.poll()
    assert 0 < first.hosts[0].tx_bytes < sent == second.hosts[0].tx_bytes
    assert first.hosts[0].tx_bps is None and second.hosts[0].tx_bps is not None and second.hosts[0].tx_bps > 0
    assert starts[0] is None and starts[1] is not None and 24 < starts[1] <= len(data) * 2 // 5 + 7
    assert second.iterations == 1
    with open(host / "markers.jsonl", "a") as fh:
        fh.write('ation": 1}\n')
    third = live.poll()
    assert third.iterations == 2 and third.hosts[0].tx_bytes == sent and len(starts) == 2  # nothing new: no scan


def test_a_rotation_set_is_followed_in_time_order(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Two files of a rotation set whose names sort against their times (strftime names across midnight), both
    grown between two polls: read in capture order, so no byte comes out of sequence order; a file's first
    packet is looked up while the file grows, not at every poll."""
    from tests.support.pcapgen import record_offsets

    data, host, sent = _one_host(tmp_path, 20_000, 4)
    offsets = record_offsets(data)
    early, late = host / "eth0-2359.pcap", host / "eth0-0000.pcap"  # the later file's name sorts first
    peeks: list[Path] = []
    real = scan.time_order
    monkeypatch.setattr(scan, "time_order", lambda p: peeks.append(p) or real(p))
    live = LiveRun(host_folders([host]))
    early.write_bytes(data[: offsets[5_000]])
    live.poll()
    early.write_bytes(data[: offsets[10_000]])  # the rest of the first file, and tcpdump rotated meanwhile
    late.write_bytes(data[:24] + data[offsets[10_000] : offsets[15_000]])
    live.poll()
    late.write_bytes(data[:24] + data[offsets[10_000] :])
    live.poll()
    last = live.poll()
    assert last.hosts[0].tx_bytes == sent
    assert _out_of_order_bytes(live) == 0  # the generator re-sends nothing: in name order, 42.9 MB came out of order
    assert peeks.count(early) == 2 and peeks.count(late) == 2  # looked at while it grows (was it overwritten?)
    live.poll()
    assert peeks.count(early) == 2 and peeks.count(late) == 2  # and no more once it is done


def test_a_ring_file_tcpdump_overwrites_is_read_again_from_its_start(tmp_path: Path) -> None:
    """tcpdump -C -W: the ring's files are reused. A file begun anew between two polls, smaller than before or
    already larger, is read from its start: every packet counted once, none out of sequence order."""
    from tests.support.pcapgen import record_offsets

    data, host, sent = _one_host(tmp_path, 20_000, 4)
    at = record_offsets(data)
    ring = host / "eth0.pcap0"
    live = LiveRun(host_folders([host]))
    for lo, hi in ((0, 8_000), (8_000, 10_000), (10_000, 19_000), (19_000, None)):  # smaller, then larger, ...
        ring.write_bytes(data[:24] + data[at[lo] : at[hi] if hi else None])
        last = live.poll()
    assert last.hosts[0].tx_bytes == sent
    assert _out_of_order_bytes(live) == 0


def test_without_markers_the_iterations_come_from_the_traffic_and_say_how_sure() -> None:
    """Real captures of training without markers, read by the live view: the jobs' own step counts, sure, where
    the bytes repeat cleanly; on the lossy link whose stalls hide the step (analyze is unsure there too), a count
    marked unsure, never one stated as fact."""
    from reports.live import line

    real = ROOT / "fixtures/real-training"
    for name in ("ddp-100mbit", "horovod-3h"):
        now = LiveRun(host_folders([real / name / "run"])).poll(final=True)
        steps = len(json.loads((real / name / "truth.json").read_text())["iterations"])
        assert (now.iterations, now.iterations_source, now.iterations_sure) == (steps, "traffic", True), name
        assert line(now).startswith(f"t=0.0s iterations={steps} (traffic, confidence "), line(now)
    lossy = LiveRun(host_folders([real / "ddp-lossy-rto/run"])).poll(final=True)
    assert lossy.iterations_source == "traffic" and not lossy.iterations_sure
    assert line(lossy).startswith(f"t=0.0s iterations=~{lossy.iterations} (unsure: traffic, confidence ")
    # an unsure count a hair under the threshold never reads as the threshold (a CI run printed "~13 ... 0.80")
    edge = replace(lossy, iterations_confidence=0.7996, iterations_sure=False)
    assert line(edge).startswith(f"t=0.0s iterations=~{lossy.iterations} (unsure: traffic, confidence 0.79)"), line(
        edge
    )


def test_capture_top_without_a_capture_folder_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [PY, str(ROOT / "cli.py"), "capture", "top", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"ringscope: error: {tmp_path}: no capture folder here (a host folder with meta.json, or a run folder)"
    ]


def _ddp_live(tmp_path: Path, make_cluster, iters: int, markers_to: Path | None = None):  # noqa: ANN001, ANN202
    """PyTorch DDP on 4 hosts at 1 Gbit/s (launched out of address order) under `capture run --live`, piped; the
    live lines and the analysis of the gathered run. MARKERS_TO: the ranks' markers go there, not into the capture."""
    cluster = make_cluster(4, rate="1gbit")
    names = cluster.names
    hosts = [names[2], names[0], names[3], names[1]]
    run = tmp_path / "run"
    env = [f"RINGSCOPE_MARKERS_DIR={markers_to}/{{host}}"] if markers_to else []
    train = [DDP[0], *env, *DDP[1:], "--params", "1000000", "--batch-size", "128", "--iters", str(iters)]
    proc = subprocess.run(
        [PY, str(ROOT / "cli.py"), "capture", "run", "--out", str(run), "--hosts", ",".join(hosts),
         "--remote-shell", "ip netns exec {host}", "--live", "--", *launch_argv(hosts, train)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    analysis = subprocess.run(
        [PY, str(ROOT / "cli.py"), "analyze", str(run), "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert analysis.returncode == 0, analysis.stderr
    return hosts, proc.stdout, json.loads((tmp_path / "r.json").read_text())


def test_capture_run_live_follows_a_ring_in_namespaces(tmp_path: Path, netns_cluster) -> None:  # noqa: F811, ANN001
    """PyTorch DDP training without pauses, with --live, piped: a line per second while it trains; the last line's
    bytes sent per host are those of the analysis of the gathered run (all but what the agents wrote after the
    view's last poll), its iterations the job's, and no rate above the link's."""
    iters = 60
    hosts, stdout, doc = _ddp_live(tmp_path, netns_cluster, iters)
    lines = _parse(stdout)
    assert len(lines) >= 3, stdout
    final = {h["name"]: h["tx_bytes"] for h in doc["hosts"]}
    its, last = lines[-1]
    assert its == iters and stdout.splitlines()[-1].split(" | ")[0].endswith(f"iterations={iters} (markers)")
    for host in hosts:
        assert 0.95 * final[host] <= last[host][1] <= final[host], (host, last[host], final[host])
    rates = [tx for _, hs in lines[1:] for tx, _ in hs.values() if tx is not None]
    assert max(rates) > 100 and max(rates) <= 1.1 * 1000  # Mbit/s: busy while training, never above the link
    sent = [[hs[h][1] for h in hosts] for _, hs in lines]
    assert all(a <= b for x, y in zip(sent, sent[1:]) for a, b in zip(x, y))  # bytes only grow


def test_capture_run_live_finds_the_iterations_in_the_traffic_without_markers(
    tmp_path: Path,
    netns_cluster,  # noqa: F811, ANN001
) -> None:
    """The same training with its markers kept out of the capture (the ranks write them elsewhere, as the job's own
    record): the live view finds the iterations in the ring edges' growing bytes, says how sure it is, and its last
    line gives the job's step count, sure, as the analysis of the gathered run does; an unsure last line (right
    or said unsure) gets one more run, which must be sure."""
    sure_in_one_of_two_runs(tmp_path, lambda folder: _traffic_count(folder, netns_cluster, 60))


def _traffic_count(tmp_path: Path, netns_cluster, iters: int) -> bool | str:  # noqa: F811, ANN001
    truth = tmp_path / "truth"
    hosts, stdout, doc = _ddp_live(tmp_path, netns_cluster, iters, markers_to=truth)
    steps = {h: len((truth / h / "markers.jsonl").read_text().splitlines()) for h in hosts}
    assert set(steps.values()) == {iters}  # the job's own record: every rank finished every step
    heads = [text.split(" | ")[0] for text in stdout.splitlines() if text.startswith("t=")]
    assert len(heads) >= 3 and not any("(markers)" in h for h in heads), heads
    found = [
        m for h in heads if (m := re.search(r"iterations=(~?)(\d+) \((?:unsure: )?traffic, confidence ([\d.]+)\)$", h))
    ]
    assert found, heads  # the traffic's iterations appear while the job trains, not only at the end
    assert all((m[1] == "~") == (float(m[3]) < 0.8) for m in found), heads  # unsure below 0.8, and marked so
    last, its = found[-1], doc["iterations"]
    assert heads[-1].endswith(last[0]), heads[-3:]
    assert last[1] == "~" or int(last[2]) == iters, heads[-3:]  # never a wrong count stated as fact
    assert not its["confident"] or its["count"] == iters, its["notes"]
    if last[1] == "~" or not its["confident"]:
        return f"live {last[0]}; analysis {its['count']} at {its['confidence']}"
    assert its["source"] == "inferred", its["notes"]
    return True

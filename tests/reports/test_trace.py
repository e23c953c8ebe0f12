"""The trace-event file (`analyze --trace`): what Perfetto and the PyTorch profiler's tools read, with every
time and byte equal to the result's, on each host's own clock, and a real Kineto trace merged in unchanged."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.support.clirun import ringscope
from tests.support.expect import FIXTURES, ROOT, run
from tests.support.pcap_clock import reclock
from reports.trace import PID_BASE, trace_events

EXAMPLE = FIXTURES / "example"
LOSSY = ROOT / "fixtures/real-training/ddp-lossy-rto/run"


def _absolute_ns(doc: dict[str, Any], event: dict[str, Any]) -> int:
    return int(doc["baseTimeNanoseconds"]) + round(event["ts"] * 1000)


def _by_host(doc: dict[str, Any]) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"].split()[0]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }


def test_the_cli_writes_a_trace_with_a_track_set_per_host_and_one_event_per_iteration(tmp_path: Path) -> None:
    out = tmp_path / "ring.trace.json"
    proc = ringscope("analyze", EXAMPLE, "--trace", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    result = run([EXAMPLE])
    hosts = _by_host(doc)
    assert sorted(hosts.values()) == sorted(h.name for h in result.hosts)
    threads = defaultdict(set)
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            threads[hosts[e["pid"]]].add(e["args"]["name"])
    assert result.topology is not None and result.iterations is not None
    ring = result.topology.order
    for i, host in enumerate(ring):
        peer = ring[(i + 1) % len(ring)]
        assert {"iterations", "communication", f"ring step → {peer}"} <= threads[host], threads[host]
    markers = result.tables.markers
    for pid, host in hosts.items():
        got = sorted(
            (_absolute_ns(doc, e), _absolute_ns(doc, e) + round(e["dur"] * 1000))
            for e in doc["traceEvents"]
            if e["pid"] == pid and e["ph"] == "X" and e["name"].startswith("iteration ")
        )
        mine = markers[markers["host"] == host].groupby("iteration").agg(s=("start_ns", "min"), e=("end_ns", "max"))
        assert got == list(zip(mine["s"], mine["e"])) and len(got) == result.iterations.count


def test_counters_and_ring_steps_carry_the_results_numbers() -> None:
    """tx/rx utilization counters are the host series' per bin (and 0 after each run of busy bins); the ring steps
    of a host towards its peer add up to the bytes of its flows to that peer in the flow series."""
    result = run([EXAMPLE])
    doc = trace_events(result)
    hosts = _by_host(doc)
    t = result.tables
    owner = {a: h.name for h in result.hosts for a in h.addresses}
    for pid, host in hosts.items():
        rows = t.host_series[(t.host_series["host"] == host) & (t.host_series["direction"] == "tx")]
        want = {int(a): round(float(u) * 100, 3) for a, u in zip(rows["t_ns"], rows["utilization"])}
        counted = {
            _absolute_ns(doc, e): e["args"]["%"]
            for e in doc["traceEvents"]
            if e["pid"] == pid and e["ph"] == "C" and e["name"] == "tx utilization %"
        }
        assert {k: v for k, v in counted.items() if v} == {k: v for k, v in want.items() if v}
        assert all(v == 0 for k, v in counted.items() if k not in want)
        steps = defaultdict(int)
        for e in doc["traceEvents"]:
            if e["pid"] == pid and e["ph"] == "X" and e["name"].startswith("→ "):
                steps[e["name"][2:]] += e["args"]["bytes"]
        flows = t.flows[t.flows["src"].map(owner) == host]
        for peer, group in flows.groupby(flows["dst"].map(owner)):
            if peer != host:
                sent = t.flow_series[t.flow_series["flow_id"].isin(group["flow_id"])]["bytes"].sum()
                assert steps[peer] == sent > 0


def test_a_host_whose_clock_runs_ahead_keeps_its_events_on_its_own_clock(tmp_path: Path) -> None:
    """h2's capture and markers 40 ms ahead (as its own wall clock would write them): its iterations, its ring
    steps and its counters all move by those 40 ms, the other hosts' stay, as each host's profiler would see it."""
    shifted = tmp_path / "example"
    shutil.copytree(EXAMPLE, shifted)
    ahead = 40_000_000
    reclock(EXAMPLE / "h2/eth0.pcap", shifted / "h2/eth0.pcap", ahead, 0.0)
    lines = [json.loads(x) for x in (EXAMPLE / "h2/markers.jsonl").read_text().splitlines() if x.strip()]
    for m in lines:
        for key in ("start_ns", "end_ns", "t_ns"):
            if key in m:
                m[key] += ahead
    (shifted / "h2/markers.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    before, after = trace_events(run([EXAMPLE])), trace_events(run([shifted]))

    def times(doc: dict[str, Any]) -> dict[str, list[int]]:
        hosts = _by_host(doc)
        out = defaultdict(list)
        for e in doc["traceEvents"]:
            if e["ph"] in "XC":
                out[hosts[e["pid"]]].append(_absolute_ns(doc, e))
        return {h: sorted(v) for h, v in out.items()}

    a, b = times(before), times(after)
    assert [x + ahead for x in a["h2"]] == b["h2"]
    assert all(a[h] == b[h] for h in a if h != "h2")


def test_retransmissions_are_instants_on_the_senders_track() -> None:
    """The lossy DDP capture: an instant per bin with re-sent bytes, together every re-sent byte of the transport
    samples, each on the host that sent it."""
    result = run([LOSSY])
    doc = trace_events(result)
    instants = [e for e in doc["traceEvents"] if e["ph"] == "i" and e["name"] == "retransmission"]
    s = result.tables.transport_samples
    resent = s[s["what"] == "resent_bytes"]
    assert len(instants) > 10
    assert sum(e["args"]["resent_bytes"] for e in instants) == int(resent["value"].sum())
    assert all(e["pid"] >= PID_BASE for e in instants)


def test_a_pytorch_profiler_trace_is_merged_in_with_its_times_unchanged(tmp_path: Path) -> None:
    """A real Kineto trace (torch.profiler on this machine's CPU) given with --trace-beside: its events keep their
    absolute times on the merged base, ringscope's keep theirs, and no process id is shared."""
    kineto = tmp_path / "rank0.pt.trace.json"
    script = (
        "import torch, sys\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "with profile(activities=[ProfilerActivity.CPU]) as p:\n"
        "    for _ in range(3):\n"
        "        torch.ones(256, 256) @ torch.ones(256, 256)\n"
        "p.export_chrome_trace(sys.argv[1])\n"
    )
    subprocess.run([str(ROOT / ".venv/bin/python"), "-c", script, str(kineto)], check=True, timeout=120)
    theirs = json.loads(kineto.read_text())
    out = tmp_path / "merged.json.gz"
    proc = ringscope("analyze", EXAMPLE, "--trace", out, "--trace-beside", kineto)
    assert proc.returncode == 0, proc.stderr
    import gzip

    merged = json.loads(gzip.decompress(out.read_bytes()))
    ours = trace_events(run([EXAMPLE]))
    assert merged["baseTimeNanoseconds"] == theirs["baseTimeNanoseconds"]
    n = len(theirs["traceEvents"])
    assert merged["traceEvents"][:n] == theirs["traceEvents"]
    rest = merged["traceEvents"][n:]
    assert len(rest) == len(ours["traceEvents"])
    for mine, e in zip(ours["traceEvents"], rest):
        if "ts" in mine:
            assert _absolute_ns(merged, e) == pytest.approx(_absolute_ns(ours, mine), abs=1)
    assert not {e["pid"] for e in theirs["traceEvents"] if "pid" in e} & {e["pid"] for e in rest}

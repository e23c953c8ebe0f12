"""End to end (issue 5): a real multi-host capture feeds the what-if, and the verdict matches the link.

Four network namespaces run a real torch.distributed gloo job (fixtures/collective/gloo_allreduce.py):
ITERS iterations of a FORWARD_S sleep (the compute; on one worker the iteration takes FORWARD_S, so
T = FORWARD_S is the single-worker iteration time) followed by an all-reduce of S = 4·NUMEL bytes. Each host
captures with `ringscope capture run` (tcpdump per namespace), then `ringscope analyze RUN --json` and
`ringscope whatif RESULT.json --json` run as a user would. Ground truth is fixed before the capture: N = 4,
S, T, the link speed (the tc rate, or the veth's own speed), and so the ring's wire time per iteration
2(N−1)/N·8S/B.

What the verdict must say, and why:

* **100 Mbit/s (tc htb).** The ring needs 2·3/4·8·4 MB / 100 Mbit/s = 0.48 s per iteration against a backward
  pass of ~0.2 s: even fully used and perfectly overlapped, the link leaves scaling factor ≈ 0.5. The transport
  fills the shaped link while it talks (≥ 70 %), so the network itself is the bottleneck — "the link itself is
  too slow", not "fill the link first".
* **Unthrottled veth.** The veth says 10 Gbit/s; nothing shapes it, and on a small machine four gloo ranks plus
  four tcpdumps are CPU-bound, so the transport moves a small share of that while communicating (≈ 14 %,
  1.2–1.4 Gbit/s, on our 2-core VMs). Calling the network "the bottleneck" here would be wrong: a faster link
  would change nothing. The right verdict is that the link's capacity is not the bottleneck and — where the
  measured efficiency is below FILLS_LINK — that the transport (or the CPU) does not fill the link; with the
  all-reduce overlapped behind backward that costs almost nothing. On a machine fast enough to fill the veth,
  the verdict says instead that the transport's rate is not what limits scaling; the test accepts either,
  chosen by the efficiency the capture measured.

In both runs the measured scaling factor (T / period) is well below the model's because this job does not
overlap the all-reduce with its compute; the verdict must say that (period − T ≈ the communication time),
not blame stragglers.

The capture uses `--filter tcp`, as a deployment would to keep the capture to the job: fresh namespaces also
send IPv6 multicast (router solicitations, MLD), which the topology step once counted as peers.

Two last tests, without root, use the bundled example capture: when `ringscope analyze` adds the section (with the
link speed from meta.json or --link-speed, not with the analyzer's stand-in for an unknown one), and the replay
error `ringscope whatif RUN --profile` prints for the run.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.clirun import ringscope
from tests.support.netns import launch_argv, netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.requirements import require

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
SCRIPT = ROOT / "fixtures" / "collective" / "gloo_allreduce.py"
N, NUMEL, ITERS, FORWARD_S = 4, 1_000_000, 5, 0.3
S = 4 * NUMEL  # float32 gradient bytes all-reduced per iteration
RING_FACTOR = 2 * (N - 1) / N  # each host sends 2(N−1)/N·S per ring all-reduce


def _veth_speed_bps(host: str) -> float | None:
    """The speed the host's interface reports before anything is captured (None: it reports none)."""
    text = subprocess.run(
        ["ip", "netns", "exec", host, "cat", "/sys/class/net/eth0/speed"], capture_output=True, text=True
    ).stdout.strip()
    try:
        mbit = int(text)
    except ValueError:
        return None
    return mbit * 1e6 if mbit > 0 else None


def _capture_and_analyze(tmp_path: Path, cluster, link_bps: float | None) -> tuple[dict, dict, float, Path]:
    """Capture the gloo job on the cluster; returns (analyze result, whatif scaling, link bps, run)."""
    hosts = cluster.names
    extra = [] if link_bps else ["--link-speed", "10Gbit"]  # a veth that reports no speed: say one
    link_bps = link_bps or 10e9
    run = tmp_path / "run"
    done = subprocess.run(
        [
            PY,
            str(ROOT / "cli.py"),
            "capture",
            "run",
            "--out",
            str(run),
            "--hosts",
            ",".join(hosts),
            "--remote-shell",
            "ip netns exec {host}",
            "--filter",
            "tcp",
            *extra,
            "--",
            *launch_argv(hosts, [], port=29640),
            "env",
            f"PYTHONPATH={ROOT}",
            PY,
            str(SCRIPT),
            str(NUMEL),
            str(ITERS),
            str(FORWARD_S),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result_json, whatif_json, html = tmp_path / "result.json", tmp_path / "whatif.json", tmp_path / "report.html"
    analyzed = ringscope(
        "analyze", run, "--json", result_json, "--html", html, "--single-iteration-time", f"{FORWARD_S * 1e3:g}ms"
    )
    assert analyzed.returncode == 0, analyzed.stderr
    result = json.loads(result_json.read_text())
    assert "scaling" in result, (result["assumptions"], result.get("iterations", {}).get("notes"))
    assert result["scaling"]["verdict"] in html.read_text().replace("&#x27;", "'")  # the report shows it
    lines = analyzed.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("what-if (ringscope model)"))
    assert 1 <= len([x for x in lines[head + 1 : head + 4] if x.startswith("  ")]) <= 3  # verdict in 1-3 lines
    whatif = ringscope("whatif", result_json, "--single-iteration-time", str(FORWARD_S), "--json", whatif_json)
    assert whatif.returncode == 0, whatif.stderr
    scaling = json.loads(whatif_json.read_text())["scaling"]
    return result, scaling, link_bps, run


def _check_inputs(result: dict, scaling: dict, link_bps: float) -> dict:
    """Inputs extracted from the capture equal the ground truth; analyze and whatif agree. Returns measured."""
    import jsonschema

    jsonschema.validate(result, json.loads((ROOT / "analyze" / "model" / "result.schema.json").read_text()))
    m = scaling["measured"]
    assert m["workers"] == N and len(result["hosts"]) == N
    assert m["link_speed_bps"] == pytest.approx(link_bps)
    assert all(h["link_speed_bps"] == pytest.approx(link_bps) for h in result["hosts"])
    # ip bytes: headers ride on GSO segments of up to 64 KB on veth, far below 1 % of the payload
    assert S <= m["gradient_bytes"] <= 1.01 * S
    assert result["topology"]["kind"] == "ring"  # gloo's ring: rank r sends to rank r−1
    assert result["topology"]["direction"] == "against_launch_order"
    its = result["iterations"]
    assert its["count"] == ITERS and m["iteration_time_ns"] / 1e9 == pytest.approx(its["period_ns"] / 1e9)
    wire_s = RING_FACTOR * 8 * S / link_bps  # the least time the ring can take on this link
    assert FORWARD_S + wire_s <= m["iteration_time_ns"] / 1e9 <= FORWARD_S + 0.25 + wire_s / 0.6
    assert (
        wire_s <= m["comm_time_ns"] / 1e9 <= 1.1 * (m["iteration_time_ns"] / 1e9 - FORWARD_S) + 0.02
    )  # bins are 10 ms
    assert scaling["single_iteration_time_ns"] / 1e9 == pytest.approx(FORWARD_S)
    assert m["measured_scaling_factor"] == pytest.approx(FORWARD_S / (m["iteration_time_ns"] / 1e9))
    # the same calculation inside `ringscope analyze` and in `ringscope whatif RESULT.json`
    ours = result["scaling"]
    assert ours["measured"] == pytest.approx(m) and ours["verdict"] == scaling["verdict"]
    assert len(ours["points"]) == len(scaling["points"]) == 1
    assert ours["points"][0] == pytest.approx(scaling["points"][0])
    assert [(p["workers"], p["bandwidth_bps"]) for p in scaling["points"]] == [(N, pytest.approx(link_bps))]
    # the job does not overlap communication with compute: where that makes the measured scaling factor well
    # below the model's (by 0.05), the verdict says the communication is exposed (not "stragglers"). On the
    # unthrottled veth a fast run's all-reduce can take under 5 % of the iteration, and then there is no gap
    # to explain (a CI run's verdict had none)
    model_sf = min(
        m["full_utilization_scaling_factor"],
        m.get("scaling_factor_at_measured_efficiency") or m["full_utilization_scaling_factor"],
    )
    exposed = "of the communication is exposed rather than overlapping the computation"
    assert (exposed in scaling["verdict"]) == (m["measured_scaling_factor"] < model_sf - 0.05), scaling["verdict"]
    assert "time is lost outside the link" not in scaling["verdict"]
    return m


def _require_tools() -> None:
    require(importlib.util.find_spec("torch") is not None, "needs torch (the gloo job)")
    require(importlib.util.find_spec("jsonschema") is not None, "needs jsonschema")


def test_100mbit_link_is_the_bottleneck(tmp_path, netns_cluster):  # noqa: F811
    _require_tools()
    t0 = time.monotonic()
    cluster = netns_cluster(N, rate="100mbit")  # htb on every host's egress and its bridge port
    result, scaling, link_bps, run = _capture_and_analyze(tmp_path, cluster, 100e6)
    m = _check_inputs(result, scaling, link_bps)
    verdict, sf = scaling["verdict"], m["full_utilization_scaling_factor"]
    assert "of the communication is exposed rather than overlapping the computation" in verdict  # 0.48 s of it
    # By hand: fully used, the ring takes comm = 2(N−1)/N·8S/B ≈ 0.48 s; gradients are ready evenly over
    # backward = 2/3·T = 0.2 s in 5 ms Horovod cycles, so the link is saturated from the first bucket (~5 ms)
    # and overhead ≈ 5 ms + comm + 2(N−1)·10 µs per bucket − backward.
    comm = RING_FACTOR * 8 * m["gradient_bytes"] / link_bps
    buckets = scaling["profile"]["buckets"][0]
    overhead = 0.005 + comm + buckets * 2 * (N - 1) * 10e-6 - 2 / 3 * FORWARD_S
    assert sf == pytest.approx(FORWARD_S / (FORWARD_S + overhead), abs=0.01)
    assert sf < 0.6 and scaling["points"][0]["scaling_factor"] == pytest.approx(sf)
    assert "The network is the bottleneck" in verdict and "not the bottleneck" not in verdict
    # tc shapes the link and TCP fills it while the job talks: the link, not the transport, is the limit
    assert m["transport_efficiency"] >= 0.7
    assert "the link itself is too slow" in verdict and "needs to use the link it has" not in verdict
    assert m["measured_scaling_factor"] < m["scaling_factor_at_measured_efficiency"] < sf
    # a faster link helps: communication would hide behind backward well above 100 Mbit/s
    assert scaling["hide_bandwidth_bps"] > 5 * link_bps

    # the API: the same section from analyze(), and the what-if costs well under 50 ms of `ringscope analyze`
    from analyze.api import analyze
    from analyze.whatif.attach import add_whatif

    res = analyze([run], workers=1, single_iteration_time_s=FORWARD_S)
    assert res.scaling is not None and res.scaling.verdict == verdict
    costs = []
    for _ in range(3):
        start = time.perf_counter()
        add_whatif(res, single_iteration_time_s=FORWARD_S)
        costs.append(time.perf_counter() - start)
    print(
        json.dumps(
            {
                "link": "100mbit",
                "while_busy": m["transport_efficiency"],
                "sf_full": sf,
                "sf_at_efficiency": m["scaling_factor_at_measured_efficiency"],
                "sf_measured": m["measured_scaling_factor"],
                "period_s": m["iteration_time_ns"] / 1e9,
                "comm_s": m["comm_time_ns"] / 1e9,
                "gradient_bytes": m["gradient_bytes"],
                "whatif_ms": min(costs) * 1e3,
                "test_s": time.monotonic() - t0,
            }
        )
    )
    assert min(costs) < 0.05


def test_unthrottled_link_is_not_the_bottleneck(tmp_path, netns_cluster):  # noqa: F811
    _require_tools()
    t0 = time.monotonic()
    cluster = netns_cluster(N)
    veth_bps = _veth_speed_bps(cluster.names[0])  # what the link says it can carry, known before the capture
    result, scaling, link_bps, _run = _capture_and_analyze(tmp_path, cluster, veth_bps)
    m = _check_inputs(result, scaling, link_bps)
    verdict, sf = scaling["verdict"], m["full_utilization_scaling_factor"]
    # fully used, 6 MB per host per iteration take ~5 ms of a 10 Gbit/s link, hidden in a 0.2 s backward
    assert sf > 0.99 and scaling["hide_bandwidth_bps"] < link_bps
    assert "not the bottleneck" in verdict and "The network is the bottleneck" not in verdict
    from analyze.confidence.thresholds import FILLS_LINK

    eff = m["transport_efficiency"]
    # the rate over the communication time, from the bytes, is the busy bins' rate less the time the link idled
    # between ring steps (CPU-bound gloo reduces each chunk before it sends the next). Held to the busy bins'
    # alone, it failed two CI runs of 2026-11-29 by a factor of 2 (2.29 against 4.61 Gbit/s at 1 ms bins, the ring
    # edges idle 37-47 % of the communication): never faster than while busy, and within 50 % of that less idle
    busy = eff * link_bps
    ring = sorted(result["transport"]["edges"], key=lambda e: -e["payload_bytes"])[:N]
    idle = float(np.median([e["idle_in_communication"] or 0.0 for e in ring]))
    assert m["achieved_rate_bps"] <= 1.1 * busy, (m["achieved_rate_bps"], busy)
    assert m["achieved_rate_bps"] == pytest.approx(busy * (1 - idle), rel=0.5), (busy, idle)
    if eff < FILLS_LINK:  # CPU-bound gloo on a fast veth: say the transport does not fill the link
        assert "does not fill the link" in verdict and "not the network" in verdict
    else:  # a machine fast enough to fill the veth
        assert "not what limits scaling" in verdict
    assert m["scaling_factor_at_measured_efficiency"] > 0.95  # even at the measured rate it would hide
    print(
        json.dumps(
            {
                "link": "veth",
                "link_bps": link_bps,
                "while_busy": eff,
                "achieved_bps": m["achieved_rate_bps"],
                "sf_full": sf,
                "sf_at_efficiency": m["scaling_factor_at_measured_efficiency"],
                "sf_measured": m["measured_scaling_factor"],
                "period_s": m["iteration_time_ns"] / 1e9,
                "comm_s": m["comm_time_ns"] / 1e9,
                "test_s": time.monotonic() - t0,
            }
        )
    )


def test_analyze_adds_scaling_only_with_a_known_link_speed(tmp_path):
    """The bundled example (4 hosts, 1 Gbit/s tc links in meta.json, 4 MiB all-reduced per iteration)."""
    import jsonschema

    example = ROOT / "fixtures" / "example"
    require((example / "run.json").is_file(), "fixtures/example/ is missing")
    schema = json.loads((ROOT / "analyze" / "model" / "result.schema.json").read_text())
    done = ringscope("analyze", example, "--json", "-")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    jsonschema.validate(doc, schema)
    s = doc["scaling"]
    # the wire model: T and the overlap read from the capture, and its replay of the measured iteration checked
    assert s["model"] == "wire" and s["replay"]["flagged"] is False and abs(s["replay"]["error"]) < 0.03
    assert s["measured"]["workers"] == 4 and s["measured"]["link_speed_bps"] == 1e9
    assert abs(s["measured"]["gradient_bytes"] / 4_194_304 - 1) < 0.01
    assert "measured_scaling_factor" not in s["measured"]  # T was not given: read from the wire, and said
    assert any(a.startswith("wire model:") for a in s["assumptions"])
    for p in s["points"]:
        assert p["iteration_ns_low"] <= p["iteration_ns"] <= p["iteration_ns_high"]
    # no meta.json: the link speed is the analyzer's stand-in, so no verdict about it
    bare = tmp_path / "bare"
    shutil.copytree(example, bare)
    for meta in bare.glob("*/meta.json"):
        meta.unlink()
    done = ringscope("analyze", bare, "--json", "-")
    doc = json.loads(done.stdout)
    assert "scaling" not in doc and any("no what-if (scaling) section" in a for a in doc["assumptions"])
    done = ringscope("analyze", bare, "--json", "-", "--link-speed", "1Gbit", "--single-iteration-time", "50ms")
    doc = json.loads(done.stdout)
    jsonschema.validate(doc, schema)
    assert "link speed as given with --link-speed" in doc["scaling"]["assumptions"]
    assert doc["scaling"]["measured"]["measured_scaling_factor"] == pytest.approx(
        0.05 / (doc["scaling"]["measured"]["iteration_time_ns"] / 1e9)
    )
    bad = ringscope("analyze", bare, "--single-iteration-time", "soon")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "soon" in bad.stderr


def test_whatif_with_a_profile_replays_the_example_run(tmp_path):
    """`ringscope whatif RUN --profile F` reproduces the run's iteration period from its own measurements.

    The profile is one 4 MiB tensor ready at the end of a 20 ms backward, so the exposed communication is one ring
    all-reduce at the run's N = 4 and rate while communicating (1 Gbit/s × measured efficiency e): 1.5·8S/(e·B)
    + 6 steps × 10 µs. T not given is solved so that T plus it is the period: the replay reproduces it exactly.
    """
    example = ROOT / "fixtures" / "example"
    require((example / "run.json").is_file(), "fixtures/example/ is missing")
    s_bytes = 4 * 1024 * 1024
    profile = tmp_path / "profile.csv"
    profile.write_text(f"name,wait_s,bytes\nfc.weight,0.02,{s_bytes}\n")
    done = ringscope("whatif", example, "--profile", profile, "--json", tmp_path / "w.json")
    assert done.returncode == 0, done.stderr
    scaling = json.loads((tmp_path / "w.json").read_text())["scaling"]
    m, replay = scaling["measured"], scaling["replay"]
    period, eff = m["iteration_time_ns"] / 1e9, m["transport_efficiency"]
    assert replay["measured_iteration_ns"] == round(period * 1e9)
    exposed_s = 1.5 * 8 * s_bytes / (eff * 1e9) + 6 * 10e-6
    assert scaling["single_iteration_time_ns"] / 1e9 == pytest.approx(period - exposed_s, abs=1e-9)
    assert replay["modelled_iteration_ns"] == replay["measured_iteration_ns"] and replay["error"] == 0.0
    assert replay["flagged"] is False and replay["single_iteration_time_given"] is False
    line = done.stdout.splitlines()[1]
    assert line.startswith("replay of the measured run (N = 4, ") and f"(error {replay['error']:+.1%})" in line
    # the measured line gives durations in ms, as the JSON's nanoseconds read
    measured = next(x for x in done.stdout.splitlines() if x.startswith("measured: "))
    assert f"iteration_time={m['iteration_time_ns'] / 1e6:.4g} ms" in measured and "_ns=" not in measured


def test_whatif_keeps_the_ring_model_when_its_refinements_are_asked(tmp_path):
    """The wire model replays the capture; --fp16 (a refinement only the ring model has) keeps the ring model and
    says so, rather than answering from a model that ignores it."""
    example = ROOT / "fixtures" / "example-ddp" / "run"
    require((example / "run.json").is_file(), "fixtures/example-ddp/ is missing")
    done = ringscope("analyze", example, "--json", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    for extra, model in (((), "wire"), (("--fp16",), "ringscope")):
        done = ringscope("whatif", tmp_path / "r.json", "--bandwidth", "10G", *extra, "--json", tmp_path / "w.json")
        assert done.returncode == 0, done.stderr
        scaling = json.loads((tmp_path / "w.json").read_text())["scaling"]
        assert scaling["model"] == model
        noted = any("wire model (the default) was not used" in a for a in scaling["assumptions"])
        assert noted is (model == "ringscope")


def test_a_link_slower_than_the_run_or_a_result_without_iterations_is_one_line(tmp_path):
    """The bundled example sent at 76 % of its 1 Gbit/s links while busy. Told its links are 500 Mbit/s, it beat
    them by half: `analyze` keeps every other finding and says why there is no what-if; `whatif` on that result
    is one error line, exit 2, as it is on a result whose iterations were not found."""
    example = ROOT / "fixtures" / "example"
    require((example / "run.json").is_file(), "fixtures/example/ is missing")
    bare = tmp_path / "bare"
    shutil.copytree(example, bare)
    for meta in bare.glob("*/meta.json"):
        meta.unlink()
    done = ringscope("analyze", bare, "--link-speed", "500Mbit", "--json", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert "scaling" not in doc and doc["iterations"]["count"] > 0
    why = [a for a in doc["assumptions"] if a.startswith("no what-if (scaling) section: the link speed 0.5 Gbit/s")]
    reached = float(why[0].split("while sending (")[1].split(" Gbit/s")[0]) if why else 0.0
    assert 0.7 <= reached <= 1.05, doc["assumptions"]  # the example's links: tc-shaped to 1 Gbit/s, its README
    bad = ringscope("whatif", tmp_path / "r.json", "--bandwidth", "10G")
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 1 and "below the rate the hosts reached" in lines[0], bad.stderr
    del doc["iterations"]
    (tmp_path / "none.json").write_text(json.dumps(doc))
    bad = ringscope("whatif", tmp_path / "none.json", "--bandwidth", "10G")
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 1 and lines[0].startswith("ringscope: error:"), bad.stderr

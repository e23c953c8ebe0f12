"""`ringscope analyze` through typer's runner and as the installed console script: outputs, options, errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
from typer.testing import CliRunner

from analyze.model.jsonform import plain
from analyze.model.result import SCHEMA_PATH, SCHEMA_VERSION
from cli import app
from tests.support.clirun import one_line_error, ringscope
from tests.support.expect import FIXTURES, flows_by_key, run, wire_truth
from tests.support.pcapgen import BASE_NS, ETHERNET, Flow, ip_packet, pcap_bytes, write
from tests.support.scenarios import load_truth, mixed

EXAMPLE = FIXTURES / "example"
EXPECTED = json.loads((EXAMPLE / "expected.json").read_text())
SCHEMA = json.loads(SCHEMA_PATH.read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
TABLES = ["flows", "flow_views", "hosts", "host_series", "flow_series"]


def invoke(*args: object):  # noqa: ANN201 - click's Result
    """`ringscope analyze ARGS` in this process."""
    return CliRunner().invoke(app, ["analyze", *map(str, args)])


def _flow_bytes(doc: dict) -> dict[tuple, int]:
    return {(f["src"], f["dst"], f["sport"], f["dport"], f["proto"]): f["bytes"] for f in doc["flows"]}


def test_schema_is_valid_and_documents_every_key_the_result_emits(tmp_path: Path) -> None:
    """The schema is draft 2020-12, requires the issue's keys, and lists exactly the nested keys to_json writes:
    a TCP flow's, and an RDMA queue pair's, which adds its QP; a run over RDMA validates with its `rdma` section."""
    from tests.support import rocegen as R

    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert {"schema", "hosts", "flows", "captures", "warnings"} <= set(SCHEMA["required"])
    doc = run([EXAMPLE]).to_json()
    defs = SCHEMA["$defs"]
    assert set(doc["hosts"][0]) == set(defs["HostSummary"]["properties"])
    assert set(doc["hosts"][0]["tx_utilization"]) == set(defs["Utilization"]["properties"])
    only_where_holes = {"held", "short_in"}  # a flow some capture missed part of (issue 47)
    assert set(doc["flows"][0]) == set(defs["FlowRecord"]["properties"]) - {"qp"} - only_where_holes
    assert set(doc["captures"][0]) == set(defs["CaptureSummary"]["properties"])
    roce = run([R.write_run(tmp_path / "roce", R.generate(R.RoceRing(hosts=3, iterations=2)))]).to_json()
    VALIDATOR.validate(roce)
    assert set(roce["flows"][0]) == set(defs["FlowRecord"]["properties"]) - only_where_holes
    assert set(roce["rdma"]["edges"][0]) >= set(defs["RdmaEdge"]["required"])


def test_json_file_validates_and_the_summary_goes_to_stdout(tmp_path: Path) -> None:
    """--json FILE writes schema-2 JSON that validates; the human summary still prints."""
    out = tmp_path / "result.json"
    res = invoke(EXAMPLE, "--json", out)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    VALIDATOR.validate(doc)
    assert doc["schema"] == 2 and doc["byte_mode"] == "ip"
    assert {h["name"]: h["tx_bytes"] for h in doc["hosts"]} == {
        h: v["tx_ip_bytes"] for h, v in EXPECTED["hosts"].items()
    }
    assert "top flows" in res.stdout and all(h in res.stdout for h in EXPECTED["launch_order"])


def test_json_to_stdout_is_nothing_but_json() -> None:
    """--json - prints only the JSON document (no summary, no progress), so it can be piped."""
    res = invoke(FIXTURES / "formats/multi.pcapng", "--json", "-")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    VALIDATOR.validate(doc)
    assert len(doc["flows"]) == len(load_truth(FIXTURES / "formats/multi.pcapng")["flows"])


def test_out_writes_every_table_as_csv_and_parquet(tmp_path: Path) -> None:
    """--out DIR: flows, flow_views, hosts, host_series, flow_series, each as CSV and Parquet with the same rows."""
    res = invoke(EXAMPLE, "--out", tmp_path / "tables")
    assert res.exit_code == 0, res.output
    for name in TABLES:
        csv = pd.read_csv(tmp_path / "tables" / f"{name}.csv")
        parquet = pd.read_parquet(tmp_path / "tables" / f"{name}.parquet")
        assert list(csv.columns) == list(parquet.columns) and len(csv) == len(parquet) > 0
    hosts = pd.read_parquet(tmp_path / "tables/hosts.parquet").set_index("name")
    assert hosts["tx_bytes"].to_dict() == {h: v["tx_ip_bytes"] for h, v in EXPECTED["hosts"].items()}
    flows = pd.read_parquet(tmp_path / "tables/flows.parquet")
    assert flows["payload_bytes"].sum() == sum(v["tx_payload_bytes"] for v in EXPECTED["hosts"].values())


def _wire_capture(tmp_path: Path) -> tuple[Path, dict]:
    data, frames = pcap_bytes(mixed(ETHERNET, 50, BASE_NS), linktype=1, nano=True)
    return write(tmp_path / "mixed.pcap", data), wire_truth(frames)


@pytest.mark.parametrize("mode", ["ip", "payload", "wire"])
def test_bytes_option_gives_the_documented_numbers(tmp_path: Path, mode: str) -> None:
    """--bytes ip: IP total length; payload: TCP/UDP payload; wire: ip + 38 B framing per frame, padded minimum."""
    if mode == "wire":
        path, want = _wire_capture(tmp_path)
    else:
        path = FIXTURES / "accounting/tso-headers-only.pcap"
        want = {
            (t["src"], t["dst"], t["sport"], t["dport"], t["proto"]): t[f"{mode}_bytes"]
            for t in load_truth(path)["flows"]
        }
    res = invoke(path, "--bytes", mode, "--json", "-")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["byte_mode"] == mode
    assert _flow_bytes(doc) == want


def test_one_millisecond_bins_on_a_long_capture(tmp_path: Path) -> None:
    """--bin 1ms over 20 minutes (1.2 M bins) stays sparse: one series row per non-empty bin; idle bins count."""
    flow = Flow("10.60.0.1", "10.60.0.2", 40060, 29500, "udp")
    seconds = 1200
    frames = [ip_packet(ETHERNET, BASE_NS + s * 1_000_000_000 + 123_456, flow, 1000) for s in range(seconds)]
    path = write(tmp_path / "long.pcap", pcap_bytes(frames, linktype=1, nano=True)[0])
    res = invoke(
        path, "--bin", "1ms", "--json", tmp_path / "r.json", "--out", tmp_path / "tables", "--link-speed", "100M"
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["bin_ns"] == 1_000_000
    util = doc["hosts"][0]["tx_utilization"]
    one_bin = 1028 * 8 / 1e-3 / 1e8  # one 1028-byte datagram in a 1 ms bin of a 100 Mbit/s link
    span_bins = (seconds - 1) * 1000 + 1
    assert util["peak"] == pytest.approx(one_bin) and util["p99"] == 0.0
    assert util["busy_fraction"] == pytest.approx(seconds / span_bins)
    assert util["mean"] == pytest.approx(seconds * one_bin / span_bins)
    series = pd.read_parquet(tmp_path / "tables/host_series.parquet")
    tx = series[series["direction"] == "tx"]
    assert len(tx) == seconds and (tx["t_ns"] % 1_000_000 == 0).all()


@pytest.mark.parametrize("text,bps", [("25Gbit", 25e9), ("100M", 1e8), ("1e9", 1e9), ("12.5GB/s", 1e11)])
def test_link_speed_is_parsed_and_used_for_hosts_without_metadata(text: str, bps: float) -> None:
    """--link-speed RATE sets hosts whose meta.json gives none; bit/s with SI prefixes, B for bytes."""
    res = invoke(FIXTURES / "accounting/tso-headers-only.pcap", "--link-speed", text, "--json", "-")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [(h["link_speed_bps"], h["link_speed_source"]) for h in doc["hosts"]] == [(bps, "cli")]
    assert not any("link speed" in a for a in doc["assumptions"])


def test_meta_json_link_speed_wins_over_the_option() -> None:
    """A capture directory's meta.json knows its link; --link-speed only fills gaps."""
    res = invoke(EXAMPLE, "--link-speed", "25G", "--json", "-")
    doc = json.loads(res.stdout)
    assert {(h["link_speed_bps"], h["link_speed_source"]) for h in doc["hosts"]} == {(1e9, "meta")}


@pytest.mark.parametrize(
    "option,value,fragment",
    [
        ("--bytes", "bogus", "--bytes 'bogus'"),
        ("--bin", "abc", "'abc'"),
        ("--bin", "0", "--bin '0'"),
        ("--bin", "-1ms", "'-1ms'"),
        ("--link-speed", "fast", "'fast'"),
        ("--link-speed", "0G", "'0G'"),
        ("--workers", "0", "--workers"),
    ],
)
def test_bad_option_values_are_one_line_and_exit_2(option: str, value: str, fragment: str) -> None:
    """A bad value is named in one line on stderr; nothing is read or written."""
    line = one_line_error(ringscope("analyze", FIXTURES / "formats/pcap-us-le.pcap", option, value))
    assert fragment in line


@pytest.mark.parametrize(
    "options,line",
    [
        (["--bytes", "bogus"], "ringscope: error: bad --bytes 'bogus': choose ip, wire or payload"),
        (["--workers", "0"], "ringscope: error: --workers must be at least 1"),
        (
            ["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"],
            "ringscope: error: --workers sets local processes and --scheduler reads on a Dask cluster: give one of "
            "them",
        ),
    ],
)
def test_one_check_per_option_says_the_same_in_analyze_and_convert(tmp_path: Path, options: list, line: str) -> None:
    """The scan options are checked in one place (analyze.read.reading.ReadOptions): both commands that read
    captures print the same line for the same bad value, and neither starts reading."""
    capture = FIXTURES / "formats/pcap-us-le.pcap"
    assert one_line_error(ringscope("analyze", capture, *options)) == line
    assert one_line_error(ringscope("convert", capture, "--parquet", tmp_path / "out", *options)) == line
    assert not (tmp_path / "out").exists()


def test_unknown_option_exits_2_naming_it() -> None:
    """A mistyped option is a usage error: exit 2, the option named."""
    proc = ringscope("analyze", FIXTURES / "formats/pcap-us-le.pcap", "--bytez", "ip")
    assert proc.returncode == 2 and "--bytez" in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_option_is_one_line() -> None:
    """Usage errors follow the project's convention too: one line."""
    one_line_error(ringscope("analyze", FIXTURES / "formats/pcap-us-le.pcap", "--bytez", "ip"))


def test_console_script_on_the_bundled_example(tmp_path: Path) -> None:
    """The README's first command, as a subprocess: exit 0, summary on stdout, valid JSON with exact tx bytes."""
    proc = ringscope("analyze", EXAMPLE, "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "h3" in proc.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    VALIDATOR.validate(doc)
    assert [h["name"] for h in doc["hosts"]] == EXPECTED["launch_order"]
    result = run([EXAMPLE])
    assert doc["flows"] == [plain(f) for f in result.flows]  # as to_json writes each (a TCP flow has no qp)
    assert flows_by_key(result).keys() == {
        (f["src"], f["dst"], f["sport"], f["dport"], f["proto"]) for f in EXPECTED["flows"]
    }


@pytest.mark.parametrize("argv", [["--help"], ["analyze", "--help"], ["capture", "agent", "--help"]])
def test_help_loads_none_of_the_heavy_libraries(argv: list[str]) -> None:
    """The start-up target (--help under 0.5 s) as a check that cannot flake: help imports no numpy,
    pandas, numba, plotly, pyarrow, torch, dask or pydantic (together several seconds on a cold machine)."""
    heavy = ("numpy", "pandas", "numba", "plotly", "pyarrow", "torch", "dask", "distributed", "pydantic")
    out = _loaded_after(argv, heavy)
    assert "Usage" in out.stdout, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "LOADED []"


def test_analyze_parses_options_without_pydantic(tmp_path: Path) -> None:
    """typer 0.29 builds a pydantic TypeAdapter per option (0.15 s on every command); pyproject keeps it below."""
    out = _loaded_after(["analyze", str(EXAMPLE), "--json", str(tmp_path / "r.json")], ("pydantic",))
    assert (tmp_path / "r.json").is_file(), out.stderr
    assert out.stdout.strip().splitlines()[-1] == "LOADED []"


def _cli_then(argv: list[str], report: str, env: dict[str, str] | None = None) -> "subprocess.CompletedProcess[str]":
    """Run the CLI's main() with `argv` in a fresh interpreter (`env` replacing OPENBLAS_NUM_THREADS), then
    the Python expression `report`, printed as its last stdout line."""
    import subprocess
    import sys

    code = (
        "import os, sys, cli\n"
        f"sys.argv = ['ringscope', *{argv!r}]\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        f"print({report})"
    )
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        cwd=Path(__file__).resolve().parents[2],
        timeout=120,
    )


def _loaded_after(argv: list[str], modules: tuple[str, ...]) -> "subprocess.CompletedProcess[str]":
    """The CLI run in a fresh interpreter; its last stdout line lists which of `modules` got imported."""
    return _cli_then(argv, f"'LOADED', sorted(m for m in {modules!r} if m in sys.modules)")


def _threads_after(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Threads of a fresh interpreter after the CLI ran `argv`, and its OPENBLAS_NUM_THREADS."""
    out = _cli_then(argv, "'THREADS', len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS')", env)
    _, threads, value = out.stdout.strip().splitlines()[-1].split()
    return int(threads), value


def test_analyze_keeps_openblas_to_one_thread_and_capture_leaves_it_alone(tmp_path: Path) -> None:
    """OpenBLAS's spinning threads took CPU from the readers; analyze asks for one thread unless the user chose,
    and the capture commands (whose training job inherits the environment) set nothing."""
    argv = ["analyze", str(EXAMPLE), "--json", str(tmp_path / "r.json")]
    ours, value = _threads_after(argv, {})
    assert value == "1"
    theirs, value = _threads_after(argv, {"OPENBLAS_NUM_THREADS": "2"})
    assert value == "2"  # the user's choice wins
    if len(os.sched_getaffinity(0)) >= 2:  # OpenBLAS starts no more threads than there are cores
        assert theirs == ours + 1  # and the setting is what removed OpenBLAS's thread
    assert _threads_after(["capture", "agent", "--help"], {})[1] == "None"


def test_console_script_writes_everything_before_its_fast_exit(tmp_path: Path) -> None:
    """The executable skips the interpreter's teardown after an analysis: stdout (a pipe here), the tables and
    the report must still be whole, with the exact bytes of the example's ground truth."""
    proc = ringscope("analyze", EXAMPLE, "--json", "-", "--out", tmp_path / "t", "--html", tmp_path / "r.html")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {h["name"]: h["tx_bytes"] for h in doc["hosts"]} == {
        h: v["tx_ip_bytes"] for h, v in EXPECTED["hosts"].items()
    }
    hosts = pd.read_parquet(tmp_path / "t/hosts.parquet").set_index("name")
    assert hosts["tx_bytes"].to_dict() == {h: v["tx_ip_bytes"] for h, v in EXPECTED["hosts"].items()}
    assert all(len(pd.read_csv(tmp_path / "t" / f"{name}.csv")) for name in TABLES)
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")
    assert ringscope("capture", "agent", "--help").returncode == 0  # capture exits the ordinary way
    one_line_error(ringscope("analyze", tmp_path / "missing.pcap"))


def test_report_of_a_saved_result_takes_a_whatif_json_and_judges_again(tmp_path: Path) -> None:
    """`report RESULT.json WHATIF.json`: the result is read back typed, the whatif JSON's scaling replaces the
    run's, and the verdict is judged again on it (the result JSON's own verdict is the old what-if's)."""
    from analyze.model.jsonform import from_plain, plain
    from analyze.model.findings import WhatIf
    from analyze.model.result import Result
    from analyze.verdict import judge

    assert invoke(EXAMPLE, "--json", tmp_path / "r.json").exit_code == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    saved = Result.from_json(doc)
    # the example's link was busy all through each all-reduce: the wire cannot tell how much overlapped, and the
    # scaling factor's range straddles the bottleneck line
    assert saved.scaling is not None and saved.verdict is not None and saved.verdict.answer == "unclear"
    assert saved.to_json() == doc  # read back whole: the report draws what the analysis found
    res = CliRunner().invoke(app, ["whatif", str(tmp_path / "r.json"), "--json", str(tmp_path / "w.json")])
    assert res.exit_code == 0, res.output
    scaling = json.loads((tmp_path / "w.json").read_text())["scaling"]
    assert plain(from_plain(WhatIf, scaling)) == scaling
    # a what-if in which the run's own link, fully used, hides the communication, and the wire showed it: "no"
    scaling["wire"]["hidden"] = False
    scaling["measured"]["full_utilization_scaling_factor"] = 0.99
    scaling["measured"]["scaling_factor_at_measured_efficiency"] = 0.99
    (tmp_path / "w.json").write_text(json.dumps({"scaling": scaling}))
    saved.scaling = from_plain(WhatIf, scaling)
    assert judge(saved).answer == "no"
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(tmp_path / "r.json"), str(tmp_path / "w.json"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert 'data-answer="no"' in out.read_text() and 'data-answer="unclear"' not in out.read_text()
    res = CliRunner().invoke(app, ["report", str(tmp_path / "w.json"), "-o", str(out)])
    assert res.exit_code == 2 and "a whatif JSON alone has no run to report" in res.output


@pytest.mark.parametrize(
    "options,kwargs,words",
    [
        (["--world-size", "0"], {"world_size": 0}, "bad --world-size 0: must be at least 1"),
        (["--ranks-per-host", "-2"], {"ranks_per_host": -2}, "bad --ranks-per-host -2: must be at least 1"),
        (["--iterations", "0"], {"iterations": 0}, "bad --iterations 0: must be at least 1"),
        (
            ["--world-size", "8", "--ranks-per-host", "2"],
            {"world_size": 8, "ranks_per_host": 2},
            "give --world-size or --ranks-per-host, not both",
        ),
        (["--bytes", "bogus"], {"byte_mode": "bogus"}, "bad --bytes 'bogus': choose ip, wire or payload"),
        (["--workers", "0"], {"workers": 0}, "--workers must be at least 1"),
        (
            ["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"],
            {"workers": 2, "scheduler": "tcp://127.0.0.1:1"},
            "--workers sets local processes and --scheduler reads on a Dask cluster: give one of them",
        ),
    ],
)
def test_the_python_api_refuses_what_the_command_refuses(options: list, kwargs: dict, words: str) -> None:
    """The job options (analyze.model.result.Given) and the read options (analyze.read.reading.ReadOptions) are
    records checked once when made: `analyze(paths, world_size=0)` from a notebook gets the ValueError the command
    prints as its one line (issue 46: it was taken and ignored)."""
    from analyze.api import analyze

    capture = FIXTURES / "formats/pcap-us-le.pcap"
    assert one_line_error(ringscope("analyze", capture, *options)) == f"ringscope: error: {words}"
    with pytest.raises(ValueError) as refused:
        analyze([capture], **{"workers": 1, **kwargs})
    assert str(refused.value) == words


def test_the_python_api_refuses_a_gradient_of_no_bytes() -> None:
    """The command's size parser refuses '0' itself ("bad size '0': must be positive"); from Python the record
    does, before anything is read."""
    from analyze.api import analyze

    with pytest.raises(ValueError, match=r"^bad --gradient-bytes 0\.0: must be positive$"):
        analyze([FIXTURES / "formats/pcap-us-le.pcap"], workers=1, gradient_bytes=0.0)


def test_help_names_the_schema_the_json_is_written_in() -> None:
    """`analyze --help` said "schema 1" after the JSON moved to schema 2 (integer ns): the words kept with the code."""
    out = ringscope("analyze", "--help")
    words = " ".join(out.stdout.replace("│", " ").split())  # the help's box, wrapped at any width
    assert f"(JSON, schema {SCHEMA_VERSION})" in words, out.stdout

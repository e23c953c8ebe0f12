"""Inputs of the what-if: the analyzer's result, profile files, and the verdict a run gets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from analyze.model.jsonform import plain
from analyze.model.result import Result
from analyze.whatif.backward_profile import (
    BackwardProfile,
    ProfileFormatError,
    load_profile,
    load_reduce_cost,
    save_profile,
)
from analyze.whatif.inputs import inputs_from_result
from analyze.whatif.request import split_values
from analyze.whatif.request import WhatIfOptions
from analyze.api import load_result, run_whatif
from cli import app

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "training-bottleneck"


def result_doc(
    link_bps: float, period_s: float, comm_s: float, busy: float, hosts: int = 4, gradient_bytes: float = 25e6
) -> dict:
    """A result as `ringscope analyze --json` writes it (only the keys the what-if reads)."""
    return {
        "schema": 1,
        "hosts": [
            {"name": f"h{i}", "link_speed_bps": link_bps, "tx_utilization": {"while_busy": busy}} for i in range(hosts)
        ],
        "iterations": {
            "period_ns": int(period_s * 1e9),
            "implied_gradient_bytes": gradient_bytes,
            "per_iteration": [
                {"comm_ns": int(comm_s * 1e9)},
                {"comm_ns": int(comm_s * 1e9) + 2},
                {"comm_ns": int(comm_s * 1e9) - 2},
            ],
        },
    }


def test_inputs_from_result_reads_everything() -> None:
    doc = result_doc(25e9, 0.2, 0.05, 0.8)
    doc["hosts"][3]["link_speed_bps"] = 10e9
    doc["hosts"][3]["tx_utilization"]["while_busy"] = 0.4
    got = inputs_from_result(Result.from_json(doc))
    assert (got.workers, got.link_speed_bps, got.iteration_time_s, got.gradient_bytes) == (4, 10e9, 0.2, 25e6)
    assert got.comm_time_s == pytest.approx(0.05)
    assert got.transport_efficiency == pytest.approx((0.8 * 3 + 0.4) / 4)
    # Ring goodput implied by bytes and time: 2·3/4·8·25e6 / 0.05 s = 6 Gbit/s.
    assert got.achieved_rate_bps() == pytest.approx(6e9)
    text = " ".join(got.assumptions)
    assert "slowest" in text and "one per captured host" in text and "median" in text


def test_inputs_from_result_tolerates_absent_keys(tmp_path: Path) -> None:
    # a result JSON that knew little: what it lacks is None once read back, and no input is made up from it
    got = inputs_from_result(Result.from_json({"hosts": [{"name": "a"}, {"name": "b", "link_speed_bps": None}]}))
    assert got.workers == 2 and got.link_speed_bps is None and got.iteration_time_s is None
    assert got.gradient_bytes is None and got.comm_time_s is None and got.transport_efficiency is None
    empty = inputs_from_result(Result.from_json({"hosts": []}))
    assert empty.workers is None and empty.assumptions == []
    (tmp_path / "wrapped.json").write_text(json.dumps({"result": result_doc(1e9, 1.0, 0.5, 1.2)}))
    wrapped = inputs_from_result(load_result(tmp_path / "wrapped.json"))
    assert wrapped.workers == 4 and wrapped.transport_efficiency == 1.0  # > 1 is clamped, and said
    assert any("taken as 1" in a for a in wrapped.assumptions)


def test_profile_formats_round_trip(tmp_path: Path) -> None:
    prof = BackwardProfile(
        np.array([[0.001, 0.0005, 0.002], [0.0012, 0.0004, 0.0021]]),
        np.array([4000.0, 8192000.0, 8192.0]),
        names=("fc.bias", "fc.weight", "bn.weight"),
    )
    for suffix in (".bk.log", ".json", ".csv"):
        path = tmp_path / f"p{suffix}"
        save_profile(prof, path)
        back = load_profile(path)
        assert back.size_bytes.tolist() == prof.size_bytes.tolist()
        if suffix == ".bk.log":  # keeps every batch
            np.testing.assert_allclose(back.wait_s, prof.wait_s, rtol=1e-12)
        else:  # one averaged batch
            np.testing.assert_allclose(back.wait_s[0], prof.wait_s.mean(axis=0), rtol=1e-12)
            assert back.names == prof.names


def test_csv_with_ready_times_and_microseconds(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("name,ready_s,bytes\nx,0.001,10\ny,0.003,20\n")
    assert load_profile(tmp_path / "a.csv").wait_s.tolist() == [pytest.approx([0.001, 0.002])]
    (tmp_path / "b.csv").write_text("wait_us,size_bytes\n1000,10\n-5,20\n")
    assert load_profile(tmp_path / "b.csv").wait_s.tolist() == [[0.001, 0.0]]  # negative gaps clamp to 0


@pytest.mark.parametrize(
    "content, suffix, match",
    [
        ("comment\n1\n3\n1,2\n", ".bk.log", "batch 0 has 1 of 3"),
        ("comment\nx\n", ".bk.log", "lines 2-3"),
        ("{not json", ".json", "not valid JSON"),
        ('{"tensors": [{"wait_s": 1}]}', ".json", "bytes"),
        ("name,bytes\nx,1\n", ".csv", "wait_s"),
    ],
)
def test_bad_profiles_name_the_file(tmp_path: Path, content: str, suffix: str, match: str) -> None:
    path = tmp_path / f"bad{suffix}"
    path.write_text(content)
    with pytest.raises(ProfileFormatError, match=match) as info:
        load_profile(path)
    assert str(path) in str(info.value)


def test_reduce_cost_table_is_sorted_and_interpolated(tmp_path: Path) -> None:
    (tmp_path / "t.log").write_text("200,3e-6\n100,1e-6\n")
    table = load_reduce_cost(tmp_path / "t.log")
    assert table.cost_s(150.0) == pytest.approx(2e-6) and table.cost_s(1e9) == pytest.approx(3e-6)
    (tmp_path / "bad.log").write_text("100;1\n")
    with pytest.raises(ProfileFormatError, match="bad.log:1"):
        load_reduce_cost(tmp_path / "bad.log")


def test_split_values_accepts_repeats_and_lists() -> None:
    assert split_values(["4,8", "16", " 32, 64 "], int, "workers") == [4, 8, 16, 32, 64]
    with pytest.raises(ValueError, match="bad workers 'x'"):
        split_values(["4,x"], int, "workers")


def _whatif_from(tmp_path: Path, doc: dict, *args: str, **kwargs) -> dict:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return plain(run_whatif(path, WhatIfOptions(**kwargs)))


def test_throttled_link_is_called_the_bottleneck(tmp_path: Path) -> None:
    # 4 hosts on a 100 Mbit/s link, 25 MB of gradients: the ring alone needs 2·3/4·8·25e6/1e8 = 3 s per
    # iteration, against a compute of 0.5 s (2.5 s period − 2 s of communication, as assumed).
    s = _whatif_from(tmp_path, result_doc(100e6, 2.5, 2.0, 0.95))
    assert s["single_iteration_time_ns"] / 1e9 == pytest.approx(0.5)
    assert [(p["workers"], p["bandwidth_bps"]) for p in s["points"]] == [(4, 100e6)]
    assert s["points"][0]["scaling_factor"] < 0.3
    assert "The network is the bottleneck" in s["verdict"]
    assert any("minus its communication time" in a for a in s["assumptions"])
    assert any("no backward profile" in a for a in s["assumptions"])
    # the command prints it and writes exactly the library's what-if as {"scaling": ...}
    res = CliRunner().invoke(app, ["whatif", str(tmp_path / "result.json"), "--json", str(tmp_path / "out.json")])
    assert res.exit_code == 0, res.output
    assert "The network is the bottleneck" in res.stdout
    assert json.loads((tmp_path / "out.json").read_text())["scaling"] == s


def test_fast_link_badly_used_blames_the_transport(tmp_path: Path) -> None:
    # 10 Gbit/s, 25 MB: full use needs 30 ms per iteration, far less than the 0.33 s backward → hidden.
    # At 5 % of line rate (500 Mbit/s) the ring needs 0.6 s: exposed.
    s = _whatif_from(tmp_path, result_doc(10e9, 0.6, 0.1, 0.05), single_iteration_time="0.5")
    m = s["measured"]
    assert m["full_utilization_scaling_factor"] > 0.95 > m["scaling_factor_at_measured_efficiency"]
    assert m["measured_scaling_factor"] == pytest.approx(0.5 / 0.6)
    assert "not the bottleneck" in s["verdict"] and "the transport needs to use the link it has" in s["verdict"]


def test_fast_link_well_used_is_fine(tmp_path: Path) -> None:
    s = _whatif_from(tmp_path, result_doc(10e9, 0.55, 0.05, 0.9), single_iteration_time="0.5")
    assert "not the bottleneck" in s["verdict"] and "not what limits scaling" in s["verdict"]
    assert s["measured"]["full_utilization_scaling_factor"] > 0.95


def test_missing_inputs_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--workers"):
        run_whatif(
            None, WhatIfOptions(profile=FIXTURES / "resnet50.bk.log", single_iteration_time="0.128", bandwidth=["10G"])
        )
    with pytest.raises(ValueError, match="--single-iteration-time"):
        run_whatif(None, WhatIfOptions(profile=FIXTURES / "resnet50.bk.log", workers=["8"], bandwidth=["10G"]))
    with pytest.raises(ValueError, match="--profile"):
        run_whatif(None, WhatIfOptions(single_iteration_time="0.1", workers=["8"], bandwidth=["10G"]))
    (tmp_path / "r.json").write_text("[1]")
    with pytest.raises(ValueError, match="JSON object"):
        run_whatif(tmp_path / "r.json")
    (tmp_path / "w.json").write_text('{"scaling": {}}')  # a whatif JSON has no run to take inputs from
    with pytest.raises(ValueError, match="w.json: not a result JSON .* no hosts list"):
        run_whatif(tmp_path / "w.json")

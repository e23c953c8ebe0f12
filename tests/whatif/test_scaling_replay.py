"""The replay error (issue 18, item 4): with a measured backward profile, the what-if first reproduces the measured
iteration from the measured inputs and says how far off it is.

Every expected number is fixed here by hand from the ring formula, before the code runs. One gradient tensor of
S = 1 MB is ready at the end of a 20 ms backward (one Horovod bucket, sent at backward end), so the exposed
communication is exactly one ring all-reduce. The run: N = 4 hosts on 1 Gbit/s links that the transport filled to
80 % while communicating, so the replay runs at 800 Mbit/s:

    wire     2·(N−1)/N · 8S / (0.8 · 1 Gbit/s) = 1.5 · 8e6 / 8e8 = 15 ms
    latency  2·(N−1) steps · 10 µs                                 = 0.06 ms
    T = 100 ms (given)  →  modelled iteration T + 15.06 ms        = 115.06 ms
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from typer.testing import CliRunner

from analyze.model.jsonform import plain
from analyze.model.result import SCHEMA_PATH
from analyze.whatif.backward_profile import BackwardProfile, stand_in_profile
from analyze.whatif.calculation import what_if
from analyze.whatif.inputs import WhatIfInputs
from analyze.whatif.model import RingscopeModel
from analyze.whatif.paper import PaperModel
from cli import app

N, LINK_BPS, BUSY, S, BACKWARD_S, T_S = 4, 1e9, 0.8, 1_000_000, 0.020, 0.100
OVERHEAD_S = 2 * (N - 1) / N * 8 * S / (BUSY * LINK_BPS) + 2 * (N - 1) * 10e-6  # 15.06 ms
MODELLED_NS = 115_060_000  # (T + OVERHEAD_S) in ns, written out
assert round((T_S + OVERHEAD_S) * 1e9) == MODELLED_NS
PROFILE = BackwardProfile(np.array([BACKWARD_S]), np.array([float(S)]), source="one tensor")
_SCHEMA = json.loads(SCHEMA_PATH.read_text())
SCALING_SCHEMA = {"$schema": _SCHEMA["$schema"], "$defs": _SCHEMA["$defs"], "$ref": "#/$defs/WhatIf"}


def measured(period_ns: int, busy: float | None = BUSY) -> WhatIfInputs:
    return WhatIfInputs(
        workers=N,
        link_speed_bps=LINK_BPS,
        iteration_time_s=period_ns / 1e9,
        gradient_bytes=S,
        comm_time_s=0.020,
        transport_efficiency=busy,
    )


def replay_of(
    period_ns: int,
    busy: float | None = BUSY,
    model=RingscopeModel(),
    profile=PROFILE,  # noqa: ANN001
    profile_measured: bool = True,
) -> dict | None:
    # the counterfactual asked (64 workers, 10 Gbit/s) is not the run: the replay must still use the run's N and rate
    return plain(
        what_if(
            profile,
            T_S,
            model,
            [64],
            [10e9],
            measured=measured(period_ns, busy),
            single_worker_measured=True,
            profile_measured=profile_measured,
        )
    ).get("replay")


def test_a_period_the_model_gives_replays_with_no_error() -> None:
    r = replay_of(MODELLED_NS)
    assert r == {
        "measured_iteration_ns": MODELLED_NS,
        "modelled_iteration_ns": MODELLED_NS,
        "error": 0.0,
        "flagged": False,
        "workers": N,
        "bandwidth_bps": pytest.approx(800e6),
        "single_iteration_time_given": True,
    }


@pytest.mark.parametrize(
    "period_ns, error, flagged",
    [
        (143_825_000, -0.2, True),  # measured 25 % longer than the model: 115.06 / 143.825 − 1 = −0.2
        (100_000_000, 0.1506, True),  # the model 15 % slower than the run: 115.06 / 100 − 1
        (110_000_000, 5.06 / 110, True),  # beyond 3 %: 115.06 / 110 − 1 = +4.6 %
        (127_000_000, 115.06 / 127 - 1, True),  # −9.4 %
        (113_000_000, 2.06 / 113, False),  # within 3 %: 115.06 / 113 − 1 = +1.8 %
        (117_000_000, 115.06 / 117 - 1, False),  # −1.7 %
    ],
)
def test_error_is_modelled_over_measured_minus_one(period_ns: int, error: float, flagged: bool) -> None:
    r = replay_of(period_ns)
    assert r["modelled_iteration_ns"] == MODELLED_NS and r["measured_iteration_ns"] == period_ns
    assert r["error"] == pytest.approx(error, abs=1e-9) and r["flagged"] is flagged


def test_without_a_measured_efficiency_the_replay_runs_at_line_rate() -> None:
    # 1.5 · 8e6 / 1e9 = 12 ms + 0.06 ms → 112.06 ms
    r = replay_of(MODELLED_NS, busy=None)
    assert r["bandwidth_bps"] == 1e9 and r["modelled_iteration_ns"] == 112_060_000


def test_the_paper_model_replays_without_latency() -> None:
    # no per-step latency: 100 + 15 ms = 115 ms against 115.06 ms measured
    r = replay_of(MODELLED_NS, model=PaperModel())
    assert r["modelled_iteration_ns"] == 115_000_000 and r["error"] == pytest.approx(115 / 115.06 - 1, abs=1e-9)


def test_no_replay_from_a_stand_in_profile_or_without_a_period() -> None:
    stand_in, _ = stand_in_profile(S, T_S)
    assert replay_of(MODELLED_NS, profile=stand_in, profile_measured=False) is None
    no_period = what_if(
        PROFILE,
        T_S,
        RingscopeModel(),
        [N],
        [LINK_BPS],
        profile_measured=True,
        measured=WhatIfInputs(workers=N, link_speed_bps=LINK_BPS, gradient_bytes=S),
    )
    assert "replay" not in plain(no_period) and no_period.replay is None
    no_run = what_if(PROFILE, T_S, RingscopeModel(), [N], [LINK_BPS], profile_measured=True)
    assert "replay" not in plain(no_run)


# ---- through `ringscope whatif RESULT.json --profile F` --------------------------------------------------------------


def result_doc(period_ns: int, comm_ns: int = 20_000_000) -> dict:
    """A result as `ringscope analyze --json` writes it (the keys the what-if reads), period and comm exact."""
    return {
        "schema": 1,
        "hosts": [
            {"name": f"h{i}", "link_speed_bps": LINK_BPS, "tx_utilization": {"while_busy": BUSY}} for i in range(N)
        ],
        "iterations": {
            "period_ns": period_ns,
            "implied_gradient_bytes": S,
            "per_iteration": [{"comm_ns": comm_ns}, {"comm_ns": comm_ns + 2}, {"comm_ns": comm_ns - 2}],
        },
    }


def whatif(tmp_path: Path, period_ns: int, *extra: str, profile: bool = True) -> tuple[dict, str]:
    (tmp_path / "result.json").write_text(json.dumps(result_doc(period_ns)))
    (tmp_path / "profile.csv").write_text(f"name,wait_s,bytes\nfc.weight,{BACKWARD_S},{S}\n")
    args = ["whatif", str(tmp_path / "result.json"), "--json", str(tmp_path / "w.json"), *extra]
    res = CliRunner().invoke(app, [*args, "--profile", str(tmp_path / "profile.csv")] if profile else args)
    assert res.exit_code == 0, res.output
    scaling = json.loads((tmp_path / "w.json").read_text())["scaling"]
    jsonschema.validate(scaling, SCALING_SCHEMA)
    return scaling, res.stdout


def test_cli_prints_the_replay_before_the_counterfactuals(tmp_path: Path) -> None:
    scaling, text = whatif(
        tmp_path, MODELLED_NS, "--single-iteration-time", "100ms", "--workers", "64", "--bandwidth", "10G"
    )
    r = scaling["replay"]
    assert (r["measured_iteration_ns"], r["modelled_iteration_ns"], r["error"], r["flagged"]) == (
        MODELLED_NS,
        MODELLED_NS,
        0.0,
        False,
    )
    line = (
        "replay of the measured run (N = 4, 800 Mbit/s: 1 Gbit/s at the measured 80% efficiency): the model gives "
        "115.1 ms per iteration against 115.1 ms measured (error +0.0%)"
    )
    lines = text.splitlines()
    assert lines[1] == line
    assert lines[3].split() == ["workers", "bandwidth", "compr.", "overhead", "scaling", "iteration"]
    assert "should not be trusted" not in text and "T was taken from the measured period" not in text


def test_cli_flags_a_replay_that_misses_by_more_than_three_percent(tmp_path: Path) -> None:
    scaling, text = whatif(tmp_path, 143_825_000, "--single-iteration-time", "100ms")
    r = scaling["replay"]
    assert r["error"] == pytest.approx(-0.2, abs=1e-9) and r["flagged"] is True
    assert "against 143.8 ms measured (error -20.0%)" in text
    warning = text.splitlines()[2]
    assert warning.startswith(
        "  The replay misses the measured iteration by more than 3%: the what-if below does not "
        "reproduce the measured job and should not be trusted until it does."
    )
    assert "(1.0 MB of gradients against 1.0 MB implied by the capture, backward 20 ms)" in warning
    assert "--buckets" in warning and "single-GPU iteration time" in warning


def test_cli_without_t_solves_it_so_the_replay_reproduces_the_period(tmp_path: Path) -> None:
    # the profile's exposed communication at 800 Mbit/s is 15.06 ms, so T = 115.06 − 15.06 = 100 ms: the value
    # the run was built from (MODELLED_NS), found from the period alone
    scaling, text = whatif(tmp_path, MODELLED_NS)
    r = scaling["replay"]
    assert r["modelled_iteration_ns"] == MODELLED_NS and r["single_iteration_time_given"] is False
    assert r["error"] == 0.0 and r["flagged"] is False
    assert scaling["single_iteration_time_ns"] / 1e9 == pytest.approx(0.100, abs=1e-9)
    assert "so the replay reproduces the measured iteration" in " ".join(scaling["assumptions"])


def test_cli_says_when_a_profile_cannot_reproduce_the_period(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(json.dumps(result_doc(10_000_000)))  # 10 ms: under the 15 ms exposed
    (tmp_path / "profile.csv").write_text(f"name,wait_s,bytes\nfc.weight,{BACKWARD_S},{S}\n")
    res = CliRunner().invoke(app, ["whatif", str(tmp_path / "result.json"), "--profile", str(tmp_path / "profile.csv")])
    assert res.exit_code == 2
    assert "the profile cannot reproduce the measured iteration" in res.output and "Traceback" not in res.output


def test_cli_without_a_profile_has_no_replay(tmp_path: Path) -> None:
    scaling, text = whatif(tmp_path, 143_825_000, "--single-iteration-time", "100ms", profile=False)
    assert "replay" not in scaling and "replay" not in text

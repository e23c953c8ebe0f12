"""`ringscope profile`: gradient-ready times and sizes of a real torch model, measured with autograd hooks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.requirements import require_module

torch = require_module("torch")

from typer.testing import CliRunner  # noqa: E402

from analyze.whatif.backward_profile import load_profile  # noqa: E402
from analyze.whatif.torch_profile import load_factory, profile_model, profile_spec  # noqa: E402
from cli import app  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SMALL_CNN = f"{REPO / 'fixtures' / 'torch_models.py'}:small_cnn"


def tiny_transformer_block():  # a factory defined in the test module, returning (module, make_input, loss_fn)
    torch.manual_seed(0)
    block = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    return block, lambda batch: torch.randn(batch, 8, 32), lambda out: out.pow(2).mean()


@pytest.fixture(scope="module")
def cnn_profile():
    return profile_spec(SMALL_CNN, batch_size=4, device="cpu", steps=3)


def test_sizes_are_the_parameters_bytes(cnn_profile) -> None:
    model, _ = load_factory(SMALL_CNN)()
    params = dict(model.named_parameters())
    assert sorted(cnn_profile.names) == sorted(params)
    for name, size in zip(cnn_profile.names, cnn_profile.size_bytes):
        assert size == params[name].numel() * params[name].element_size()
    assert cnn_profile.gradient_bytes == sum(p.numel() * 4 for p in params.values())


def test_ready_times_are_in_backward_order(cnn_profile) -> None:
    ready = cnn_profile.ready_s()[0]
    assert (cnn_profile.wait_s >= 0).all() and all(a <= b for a, b in zip(ready, ready[1:]))
    names = list(cnn_profile.names)
    # The classifier (module 11) is the last layer forward, so its gradients are ready first; conv 0 last.
    assert names.index("11.weight") < names.index("7.weight") < names.index("3.weight") < names.index("0.weight")


def test_ready_times_sum_to_the_measured_backward(cnn_profile) -> None:
    # Both are measured from the same start stamp in the same steps; they differ by the engine's tail after
    # the last hook. Tolerance 10 % + 2 ms: this shared 2-core machine may preempt us in that tail.
    total = float(cnn_profile.wait_s.sum())
    backward = cnn_profile.meta["backward_s"]
    assert total <= backward * 1.0001
    assert abs(total - backward) <= 0.10 * backward + 2e-3


def test_factory_in_a_test_module_with_loss_and_frozen_parameters() -> None:
    prof = profile_model(tiny_transformer_block, batch_size=2, device="cpu", steps=2)
    block, _, _ = tiny_transformer_block()
    assert prof.gradient_bytes == sum(p.numel() * p.element_size() for p in block.parameters())
    frozen = load_factory(f"{REPO / 'fixtures' / 'torch_models.py'}:mlp_with_frozen")
    prof = profile_model(frozen, batch_size=2, device="cpu", steps=1)
    assert sorted(prof.names) == ["2.bias", "2.weight", "4.bias", "4.weight"]  # layer 0 is frozen


def test_profile_cli_writes_a_profile_whatif_reads(tmp_path: Path) -> None:
    out = tmp_path / "cnn.json"
    res = CliRunner().invoke(
        app, ["profile", SMALL_CNN, "--batch-size", "2", "--steps", "2", "--device", "cpu", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["kind"] == "backward_profile" and doc["device"] == "cpu" and doc["batch_size"] == 2
    assert [t["ready_s"] for t in doc["tensors"]] == sorted(t["ready_s"] for t in doc["tensors"])
    assert load_profile(out).gradient_bytes == doc["gradient_bytes"]
    res = CliRunner().invoke(
        app,
        [
            "whatif",
            "--profile",
            str(out),
            "--single-iteration-time",
            "50ms",
            "--workers",
            "4",
            "--bandwidth",
            "1G",
            "--json",
            str(tmp_path / "w.json"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "w.json").read_text())["scaling"]["profile"]["tensors"] == len(doc["tensors"])


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_colon", "expected MODULE:FACTORY"),
        ("no_such_module_xyz:f", "cannot import"),
        (f"{REPO / 'fixtures' / 'torch_models.py'}:nothing", "no callable 'nothing'"),
    ],
)
def test_bad_model_spec_is_one_line(spec: str, message: str) -> None:
    res = CliRunner().invoke(app, ["profile", spec, "--device", "cpu"])
    assert res.exit_code == 2 and res.output.startswith("ringscope: error:") and message in res.output, res.output


def test_factory_must_say_how_to_make_inputs() -> None:
    with pytest.raises(ValueError, match="make_input"):
        profile_model(lambda: torch.nn.Linear(2, 2), batch_size=1, device="cpu", steps=1)
    with pytest.raises(ValueError, match="the model failed on its input: RuntimeError"):
        profile_model(lambda: (torch.nn.Linear(2, 2), lambda b: torch.randn(b, 3)), batch_size=1, device="cpu", steps=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_profile_matches_parameter_bytes() -> None:
    prof = profile_spec(SMALL_CNN, batch_size=8, device="cuda", steps=3)
    assert prof.meta["device"].startswith("cuda")
    assert abs(float(prof.wait_s.sum()) - prof.meta["backward_s"]) <= 0.10 * prof.meta["backward_s"] + 2e-3


def test_an_unknown_device_is_one_line() -> None:
    """torch.device('foo') raises a RuntimeError with a traceback; the CLI names the choices instead."""
    from tests.support.clirun import one_line_error, ringscope

    line = one_line_error(ringscope("profile", SMALL_CNN, "--device", "foo"))
    assert line == "ringscope: error: bad --device 'foo': choose auto, cpu or cuda (cuda:N for one GPU)"

"""NCCL's RAS keep-alives beside RDMA data (issue 47 item 3): set apart from the collective, and a silent host named.

Ground truth from the generators: the RoCEv2 ring's data (tests/support/rocegen.py) and the RAS ring's keep-alives
over the same hosts (tests/support/rasgen.py, following NCCL's src/ras), with the schedule of which host hangs and
for how long; the same ring without the keep-alives gives the answers the data alone gives.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from analyze.api import analyze
from reports.text import summary_text
from tests.support import rasgen, rocegen as R

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "analyze" / "model" / "result.schema.json").read_text())
SPEC = R.RoceRing(link_bps=100e9, iterations=6, gradient_bytes=32 << 20, compute_ns=20_000_000)
SECONDS = 70
STARTED = R.BASE_NS - 20_000_000_000  # the keep-alives run from 20 s before the data to 50 s after


def _run(tmp: Path, hangs: tuple[rasgen.Hang, ...]):  # type: ignore[no-untyped-def]
    frames = rasgen.keepalives([SPEC.address(h) for h in range(SPEC.hosts)], STARTED, SECONDS, hangs)
    return analyze([R.write_run(tmp / "run", R.with_frames(R.generate(SPEC), frames))], workers=1)


@pytest.fixture(scope="module")
def data_alone(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return analyze([R.write_run(tmp_path_factory.mktemp("alone") / "run", R.generate(SPEC))], workers=1)


def _answers(result):  # type: ignore[no-untyped-def]
    return (
        result.topology.kind,
        [(e.src, e.dst) for e in result.topology.edges],
        (result.iterations.count, result.iterations.confident),
        sorted((e.src, e.dst, e.limiter) for e in result.rdma.edges),
    )


@pytest.mark.parametrize(
    "hang, meaning",
    [
        (rasgen.Hang(host=2, from_s=30, seconds=12), "5 s"),
        (rasgen.Hang(host=2, from_s=30, seconds=26), "20 s"),
        (rasgen.Hang(host=1, from_s=45, seconds=40), "20 s"),  # still silent when the capture ends
    ],
)
def test_a_silent_host_is_named_and_the_data_reads_as_alone(tmp_path: Path, data_alone, hang, meaning: str) -> None:  # type: ignore[no-untyped-def]
    result = _run(tmp_path, (hang,))
    ka = result.keepalives
    assert ka is not None and ka.connections >= 4 and ka.hosts == [SPEC.host(h) for h in range(4)]
    (silence,) = ka.silences
    seconds = min(hang.seconds, SECONDS - hang.from_s)
    assert silence.host == SPEC.host(hang.host)
    assert silence.seconds == pytest.approx(seconds, abs=1.1)  # keep-alives come a second apart
    assert meaning in silence.meaning and silence.until_end is (hang.from_s + hang.seconds >= SECONDS)
    assert _answers(result) == _answers(data_alone)
    jsonschema.Draft202012Validator(SCHEMA).validate(result.to_json())
    assert f"SILENT: {silence.host} sent no keep-alive" in summary_text(result)


def test_a_healthy_ras_ring_has_no_silence(tmp_path: Path, data_alone) -> None:  # type: ignore[no-untyped-def]
    result = _run(tmp_path, ())
    assert result.keepalives is not None and result.keepalives.connections == 4
    assert result.keepalives.silences == []
    assert _answers(result) == _answers(data_alone)

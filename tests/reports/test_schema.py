"""The committed JSON schema (analyze/model/result.schema.json) is generated from the records it describes
(analyze/model/schema.py, issue 46 item 1): this holds the file to the generator, holds the prose to the fields it
describes, and validates what the analyses really wrote against it.

Ground truth from outside the generator: the golden results (tests/golden/*/result.json), written by the analyses
on the fixtures' captures and compared value by value in tests/e2e/test_golden.py."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from analyze.model import schema as S
from analyze.model.result import SCHEMA_PATH

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = sorted((ROOT / "tests" / "golden").glob("*/result.json"))


def test_the_committed_schema_is_the_generated_one() -> None:
    assert json.loads(SCHEMA_PATH.read_text()) == S.generated(), "run `python -m analyze.model.schema`"


@pytest.mark.parametrize("path", GOLDEN, ids=[p.parent.name for p in GOLDEN])
def test_every_golden_result_validates(path: Path) -> None:
    doc = {"ringscope_version": "golden", **json.loads(path.read_text())}  # the goldens leave the version out
    jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text())).validate(doc)


def test_a_field_the_schema_requires_is_one_always_written() -> None:
    """An `optional()` field is left out while None: required only where jsonform always writes it."""
    defs = json.loads(SCHEMA_PATH.read_text())["$defs"]
    assert "iteration_ns" not in defs["ScalingPoint"]["required"]  # optional(): absent without an interval
    assert "scaling_factor" in defs["ScalingPoint"]["required"]
    assert defs["ScalingPoint"]["additionalProperties"] is False


def test_prose_for_a_field_that_is_gone_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notes = json.loads(S.NOTES_PATH.read_text())
    notes["TransportEdge"]["rtt_median_ms"] = {"description": "a field renamed since"}
    stale = tmp_path / "notes.json"
    stale.write_text(json.dumps(notes))
    monkeypatch.setattr(S, "NOTES_PATH", stale)
    with pytest.raises(ValueError, match="TransportEdge has no field rtt_median_ms"):
        S.generated()
    notes["Gone"] = {"$": {"description": "a record removed since"}}
    del notes["TransportEdge"]["rtt_median_ms"]
    stale.write_text(json.dumps(notes))
    with pytest.raises(ValueError, match="records the result does not have: Gone"):
        S.generated()

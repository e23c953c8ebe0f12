"""The JSON form: dataclasses converted as asdict would, and the file layout parses back to the same document
with one flow, host or iteration per line."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path

import pytest

from analyze.api import analyze
from analyze.model.result import Result, json_text, plain

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result():  # noqa: ANN201 - analyze.model.result.Result
    return analyze([REPO / "fixtures" / "example"], workers=1, link_speed_bps=25e9)


def _as_written(x: object) -> dict:
    """asdict, less the optional fields (jsonform.optional: metadata set) that are None: JSON leaves those out, in
    nested records too (a capture's coverage)."""
    omitted = {f.name for f in fields(x) if f.metadata and getattr(x, f.name) is None}  # type: ignore[arg-type]
    out = {k: v for k, v in asdict(x).items() if k not in omitted}  # type: ignore[call-overload]
    for f in fields(x):  # type: ignore[arg-type]
        inner = getattr(x, f.name)
        if f.name in out and is_dataclass(inner) and not isinstance(inner, type):
            out[f.name] = _as_written(inner)
    return out


def test_plain_gives_what_asdict_gives(result) -> None:  # noqa: ANN001
    for items in (result.hosts, result.flows, result.captures):
        assert json.dumps(plain(items)) == json.dumps([_as_written(x) for x in items])
    assert plain(result.hosts)[0]["tx_utilization"] == asdict(result.hosts[0].tx_utilization)


def test_written_json_parses_back_one_record_per_line(result, tmp_path: Path) -> None:  # noqa: ANN001
    path = tmp_path / "r.json"
    result.write_json(path)
    text = path.read_text()
    assert json.loads(text) == json.loads(json.dumps(result.to_json()))
    lines = text.splitlines()
    flows = [json.loads(line.strip().rstrip(",")) for line in lines if line.startswith('    {"src": ')]
    assert [(f["src"], f["dst"], f["bytes"]) for f in flows] == [(f.src, f.dst, f.bytes) for f in result.flows]
    iterations = [line for line in lines if line.startswith('      {"index": ')]
    assert result.iterations is not None and len(iterations) == result.iterations.count == 10


@pytest.mark.parametrize(
    "doc",
    [
        {},
        [],
        {"a": {}, "b": [], "c": [[]], "d": {"e": {"f": [1, {"g": None}]}}},
        {"long": ["x" * 60, "y" * 60], "short": [1, 2], "nested": {"rows": [{"k": i} for i in range(30)]}},
        [{"a": 1}] * 40,
        "text",
        3.5,
        None,
    ],
)
def test_layout_parses_back_to_the_document(doc) -> None:  # noqa: ANN001
    assert json.loads(json_text(doc)) == doc


def test_keys_that_are_not_strings_are_written_as_json_writes_them() -> None:
    doc = {"by_rank": {0: "h1", 1: "h2"}, "flags": {True: 1, None: 2}}
    assert (
        json.loads(json_text(doc))
        == json.loads(json.dumps(doc))
        == {"by_rank": {"0": "h1", "1": "h2"}, "flags": {"true": 1, "null": 2}}
    )


def test_nan_is_refused_as_before() -> None:
    with pytest.raises(ValueError):
        json_text({"a": [{"x": math.nan}] * 5})


def test_a_result_json_of_the_wrong_shape_is_one_line_naming_the_place(result, tmp_path: Path) -> None:  # noqa: ANN001
    """A result JSON edited or cut by hand: the place that does not fit the result's types, in one line, before
    anything renders it (a wrong type used to surface as a traceback from the report)."""
    from analyze.model.saved import read_result

    doc = json.loads(json.dumps(result.to_json()))
    cases = {
        ("topology", "edges"): ([{"src": 1}], "$.topology.edges[0].src: text expected, got 1"),
        ("iterations",): (3, "$.iterations: an object expected, got 3"),
        ("iterations", "count"): ("7", "$.iterations.count: an integer expected, got '7'"),
        ("topology", "kind"): (None, None),  # null is read as unknown, as the writer writes it
    }
    for keys, (value, message) in cases.items():
        bad = json.loads(json.dumps(doc))
        target = bad
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value
        path = tmp_path / "r.json"
        path.write_text(json.dumps(bad))
        if message is None:
            read_result(path)
            continue
        with pytest.raises(ValueError) as caught:
            read_result(path)
        assert str(caught.value) == f"{path}: not a result JSON (from `ringscope analyze --json`): {message}"
    del doc["iterations"]["count"]
    assert Result.from_json(doc).iterations.count == 0  # a key with a default: the default
    del doc["topology"]["kind"]
    assert Result.from_json(doc).topology.kind is None  # a partial document: what it does not say is unknown
    with pytest.raises(ValueError, match=r"\$\.topology: no 'kind'"):
        Result.from_json(doc, complete=True)  # what a report draws whole must be whole


def test_a_misspelt_key_fails_in_this_versions_document_and_is_left_aside_in_anothers(result) -> None:  # noqa: ANN001
    """jsonform's strict mode: a document this very version wrote has no key it does not know, so an unknown one
    is misspelt (it would vanish, and what it held with it); another version's document may carry keys added
    since (the JSON only gains keys), so there they are left aside."""
    from analyze.model.findings import Silence
    from analyze.model.jsonform import from_plain

    doc = json.loads(json.dumps(result.to_json()))
    doc["topology"]["kinds"] = "ring"
    with pytest.raises(ValueError, match=r"^\$\.topology: 'kinds' not a field of Topology$"):
        Result.from_json(doc)
    doc["ringscope_version"] = "99.0.0"  # a newer ringscope's: its new keys are not errors here
    assert Result.from_json(doc).topology.kind == result.topology.kind
    row = {"host": "a", "peers": [], "start_ns": 0, "seconds": 9.0, "until_end": False, "meaning": "", "peer": 1}
    with pytest.raises(ValueError, match=r"^\$\[0\]: 'peer' not a field of Silence$"):
        from_plain(list[Silence], [row], strict=True)
    assert from_plain(Silence, row).host == "a"

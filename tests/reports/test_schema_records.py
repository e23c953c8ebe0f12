"""The committed JSON schema (analyze/model/result.schema.json) against the records it describes: each finding's
shape is written twice, as a dataclass and as the schema with its prose and enums, and this keeps the two from
drifting (issue 46 item 1).

Walked from Result down through every field whose type is a record (lists and optional ones too) beside the
schema node that describes it ($ref, anyOf and items followed): a property the schema lists must be a field; a key
it requires must be a field that is always written (not one `jsonform.optional` leaves out while None); a closed
object (additionalProperties false) must list every field. A record the schema describes only in prose is not
walked below; the test names which, so a new record does not go unnoticed.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, Iterator

from analyze.model.result import SCHEMA_PATH, Result

SCHEMA = json.loads(SCHEMA_PATH.read_text())
DEFS = SCHEMA["$defs"]
HEAD = {"schema", "ringscope_version"}  # written by to_json, not fields
# records the schema describes in prose only (an object without its properties listed); grow it consciously
IN_PROSE = {"Clock", "EdgeIterations", "EdgeSeries", "HostClock", "NcclNetEdge", "QpRate", "RdmaSeries"}


def _resolve(node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = DEFS[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _alternatives(node: Any) -> Iterator[dict]:
    node = _resolve(node)
    if not isinstance(node, dict):
        return
    for key in ("anyOf", "oneOf"):
        for sub in node.get(key, []):
            yield from _alternatives(sub)
    yield node


def _records(hint: Any, node: Any) -> Iterator[tuple[type, dict]]:
    """(record type, schema node) for what a field of type HINT holds, as far as the schema NODE follows it."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(hint):
            if arg is not type(None):
                yield from _records(arg, node)
    elif origin is list:
        (item,) = typing.get_args(hint)
        for alternative in _alternatives(node):
            if "items" in alternative:
                yield from _records(item, alternative["items"])
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        for alternative in _alternatives(node):
            if "properties" in alternative or "required" in alternative:
                yield hint, alternative


def _check(kind: type, node: dict, path: str, problems: list[str], walked: set[str]) -> None:
    walked.add(kind.__name__)
    fields = {f.name: f for f in dataclasses.fields(kind) if not f.metadata.get("table")}
    always = {name for name, f in fields.items() if not f.metadata.get("omit_if_none")}
    listed = node.get("properties", {})
    problems += [f"{path}.{p}: not a field of {kind.__name__}" for p in listed if p not in fields and p not in HEAD]
    for key in node.get("required", []):
        if key in HEAD:
            continue
        if key not in fields:
            problems.append(f"{path}: requires {key!r}, not a field of {kind.__name__}")
        elif key not in always:
            problems.append(f"{path}: requires {key!r}, which {kind.__name__} leaves out while None")
    if node.get("additionalProperties") is False:
        problems += [
            f"{path}: closed, but {kind.__name__}.{name} is not listed" for name in fields if name not in listed
        ]
    hints = typing.get_type_hints(kind)
    for name, sub in listed.items():
        if name in hints:
            for record, subnode in _records(hints[name], sub):
                _check(record, subnode, f"{path}.{name}", problems, walked)


def _reachable(kind: type, found: set[str]) -> set[str]:
    for hint in typing.get_type_hints(kind).values():
        for arg in [hint, *typing.get_args(hint), *(a for h in typing.get_args(hint) for a in typing.get_args(h))]:
            if isinstance(arg, type) and dataclasses.is_dataclass(arg) and arg.__name__ not in found:
                found.add(arg.__name__)
                if arg.__name__ != "Tables":  # pandas frames beside the JSON, not in it
                    _reachable(arg, found)
    return found


def test_the_schema_lists_only_fields_and_requires_only_what_is_always_written() -> None:
    problems: list[str] = []
    walked: set[str] = set()
    _check(Result, SCHEMA, "$", problems, walked)
    assert problems == []
    reachable = _reachable(Result, set()) - {"Tables"}
    assert reachable - walked == IN_PROSE, sorted(reachable - walked)

"""The result's JSON Schema (result.schema.json), generated from the records it describes (issue 46).

Why generated: written by hand, each finding's shape was written twice, as a dataclass and as the schema, and the
two drifted. Here the shape comes from the dataclasses' type hints, as analyze.model.jsonform writes them: every
field is a property, a field written always is required (an `optional()` one is left out while None), a record
is a closed object under $defs, `X | None` may be null, and a float may be null too (jsonform writes NaN and the
infinities as null). What a type cannot say, the prose, lives in result.schema.notes.json by record and field:
descriptions, enums, bounds. A note for a record or field that does not exist is an error, so prose cannot outlive
its field either.

    python -m analyze.model.schema    writes result.schema.json (a test holds the committed file to it)
"""

from __future__ import annotations

import json
import sys
import types
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Union

__all__ = ["generated", "NOTES_PATH"]

NOTES_PATH = Path(__file__).with_name("result.schema.notes.json")
_LEAF_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean"}


def generated() -> dict[str, Any]:
    """The JSON Schema of Result.to_json(), from the records and their notes."""
    from analyze.model.result import SCHEMA_VERSION, Result

    notes: dict[str, dict[str, Any]] = json.loads(NOTES_PATH.read_text())
    defs: dict[str, Any] = {}
    root = _record(Result, notes, defs)
    head: dict[str, dict[str, Any]] = {"schema": {"const": SCHEMA_VERSION}, "ringscope_version": {"type": "string"}}
    for key, node in head.items():
        node.update(notes["Result"].get(key, {}))
    root["properties"] = {**head, **root["properties"]}
    root["required"] = [*head, *root["required"]]
    unknown = sorted(set(notes) - set(defs) - {"Result"})
    if unknown:
        raise ValueError(f"{NOTES_PATH.name}: notes for records the result does not have: {', '.join(unknown)}")
    meta = root.pop("$meta")
    return {**meta, **root, "$defs": dict(sorted(defs.items()))}


def _record(kind: type, notes: dict[str, dict[str, Any]], defs: dict[str, Any]) -> dict[str, Any]:
    """The object node of a record: its fields (the Result's tables aside: they are written beside the JSON)."""
    mine = notes.get(kind.__name__, {})
    hints = typing.get_type_hints(kind)
    listed = [f for f in fields(kind) if not f.metadata.get("table")]
    stale = sorted(set(mine) - {f.name for f in listed} - {"$", "schema", "ringscope_version"})
    if stale:
        raise ValueError(f"{NOTES_PATH.name}: {kind.__name__} has no field {', '.join(stale)}")
    properties = {}
    for f in listed:
        node = _node(hints[f.name], notes, defs)
        extra = dict(mine.get(f.name, {}))
        for key in ("items", "additionalProperties"):  # a leaf's prose inside a list or a map
            if key in extra:
                _inner(node, key).update(extra.pop(key))
        properties[f.name] = {**node, **extra}
    own = dict(mine.get("$", {}))
    top = {k: own.pop(k) for k in ("$schema", "$id", "title") if k in own}
    doc = kind.__doc__ or ""
    if "description" not in own and doc and not doc.startswith(kind.__name__ + "("):  # not dataclass's stand-in
        own["description"] = " ".join(doc.split("\n\n")[0].split())
    return {
        "$meta": top,
        "type": "object",
        **own,
        "required": [f.name for f in listed if not f.metadata.get("omit_if_none")],
        "properties": properties,
        "additionalProperties": False,
    }


def _inner(node: dict[str, Any], key: str) -> dict[str, Any]:
    """The item (or value) node inside NODE, through a nullable alternative."""
    for alternative in node.get("anyOf", [node]):
        if key in alternative:
            return alternative[key]  # type: ignore[no-any-return]
    raise ValueError(f"{NOTES_PATH.name}: a note for {key} where the field has none")


def _node(hint: Any, notes: dict[str, dict[str, Any]], defs: dict[str, Any]) -> dict[str, Any]:
    """The schema node of one type hint."""
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        kept = [a for a in typing.get_args(hint) if a is not type(None)]
        return _nullable(_node(kept[0], notes, defs) if len(kept) == 1 else {})
    args = typing.get_args(hint)
    if origin is list or origin is tuple:
        return {"type": "array", "items": _node(args[0], notes, defs) if args else {}}
    if origin is dict:
        return {"type": "object", "additionalProperties": _node(args[1], notes, defs) if args else {}}
    if isinstance(hint, type) and is_dataclass(hint):
        if hint.__name__ not in defs:
            defs[hint.__name__] = {}  # a placeholder first: a record may nest itself
            node = _record(hint, notes, defs)
            node.pop("$meta")
            defs[hint.__name__] = node
        return {"$ref": f"#/$defs/{hint.__name__}"}
    if hint is float:
        return {"type": ["number", "null"]}  # jsonform writes NaN and the infinities as null
    if hint in _LEAF_TYPES:
        return {"type": _LEAF_TYPES[hint]}
    if hint is Path:
        return {"type": "string"}
    return {}  # Any: the model's own options, a run.json as read


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """NODE or null."""
    if not node:
        return node
    kind = node.get("type")
    if isinstance(kind, str):
        return {**node, "type": [kind, "null"]}
    if isinstance(kind, list):
        return node if "null" in kind else {**node, "type": [*kind, "null"]}
    return {"anyOf": [node, {"type": "null"}]}


def main() -> int:
    from analyze.model.result import SCHEMA_PATH

    SCHEMA_PATH.write_text(json.dumps(generated(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One way between the result's records (dataclasses) and their JSON form, both directions.

Why one generic pair instead of a to_json/from_json per record: the result has some forty records, and a
hand-written pair each is eighty places to forget a key. `plain` writes a record as JSON-ready dicts and lists,
field by field in declaration order; `from_plain` reads one back from its type hints. A field declared with
`optional()` is left out of the JSON while it is None (a key the analysis adds only when it has something to
say); every other field is always written, null included, so the JSON only ever gains keys. Keys a reader does
not know (a newer ringscope's) are ignored, not an error, unless the document is the project's own and its
version is this one (`strict`): there an unknown key is a misspelt one, and it fails instead of vanishing.

The analyses build their records directly (dataclass constructors, which mypy checks); `from_plain` reads JSON.
"""

from __future__ import annotations

import math
import numbers
import types
import typing
from dataclasses import MISSING, Field, field, fields, is_dataclass
from functools import lru_cache
from typing import Any, TypeVar, Union

_LEAVES = {str, int, bool, type(None)}
_OMIT = "omit_if_none"
T = TypeVar("T")


def optional(default: Any = None) -> Any:
    """A field written to JSON only while it is not None."""
    return field(default=default, metadata={_OMIT: True})


@lru_cache(maxsize=None)
def _layout(kind: type) -> tuple[tuple[str, bool], ...]:
    return tuple((f.name, bool(f.metadata.get(_OMIT))) for f in fields(kind))


def plain(value: Any) -> Any:
    """A record as JSON-ready dicts and lists: tuples as lists, numpy scalars as Python numbers, NaN and
    infinities as None (JSON has neither). Faster than dataclasses.asdict, which deep-copies every leaf (0.18 s
    against 0.03 s for 10,000 flow records)."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is list or kind is tuple:
        return [plain(v) for v in value]
    if kind is dict:
        return {k: plain(v) for k, v in value.items()}
    if is_dataclass(kind):
        out = {}
        for name, omit in _layout(kind):
            v = getattr(value, name)
            if not (omit and v is None):
                out[name] = plain(v)
        return out
    if kind.__module__ == "numpy" and hasattr(value, "item"):
        return plain(value.item())
    return value


def from_plain(kind: type[T], data: Any, complete: bool = False, strict: bool = False) -> T:
    """The record of type KIND that `plain` wrote as DATA (missing keys take the field's default, or None: what a
    partial document does not say is unknown). ValueError, naming the place, where DATA does not have the record's
    shape: a list or an object where the type wants another, text where it wants a number; with COMPLETE, also a
    required key missing (a document that will be rendered whole); with STRICT, also a key the record does not
    have (the project's own document of this version: a misspelt key). A result JSON edited or cut by hand then
    ends in one line, not in a traceback from the code that renders it."""
    return _read(kind, data, "$", (complete, strict))


@lru_cache(maxsize=None)
def _names(kind: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(kind))


@lru_cache(maxsize=None)
def _hints(kind: type) -> tuple[tuple[str, Any, Field], ...]:
    hints = typing.get_type_hints(kind)
    return tuple((f.name, hints[f.name], f) for f in fields(kind))


_NUMBERS: dict[Any, tuple[type, ...]] = {int: (int,), float: (float, int)}  # exact types: bool is not taken


@lru_cache(maxsize=None)
def _shape(hint: Any) -> tuple[str, tuple[Any, ...]]:
    """What a hint asks for ("union", "list", "dict", "record" or "value") and its arguments, read once per hint."""
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return "union", tuple(a for a in typing.get_args(hint) if a is not type(None))
    if origin is list:
        return "list", typing.get_args(hint) or (Any,)
    if origin is dict:
        return "dict", typing.get_args(hint) or (str, Any)
    if isinstance(hint, type) and is_dataclass(hint):
        return "record", ()
    return "value", ()


Where = Any  # "$", or (the parent's Where, ".name" or an index): a path spelt out only for an error's message


def _spelt(where: Where) -> str:
    parts = []
    while isinstance(where, tuple):
        where, step = where
        parts.append(f"[{step}]" if isinstance(step, int) else f".{step}")
    return where + "".join(reversed(parts))


def _read(hint: Any, data: Any, where: Where, rules: tuple[bool, bool]) -> Any:
    if data is None or hint is Any:
        return data
    shape, args = _shape(hint)
    if shape == "union":
        return _read(args[0], data, where, rules) if len(args) == 1 else data
    if shape == "list":
        _expect(isinstance(data, list), "a list", data, where)
        (item,) = args
        if item in _NUMBERS and all(type(v) in _NUMBERS[item] for v in data):
            return data  # a series of plain numbers, checked in one pass (a call per number took 1 s at 250 k)
        return [_read(item, v, (where, i), rules) for i, v in enumerate(data)]
    if shape == "dict":
        _expect(isinstance(data, dict), "an object", data, where)
        item = args[1]
        return {k: _read(item, v, (where, k), rules) for k, v in data.items()}
    if shape == "record":
        _expect(isinstance(data, dict), "an object", data, where)
        complete, strict = rules
        kwargs = {}
        hints = _hints(hint)
        unknown = sorted(k for k in data if k not in _names(hint)) if strict else []
        if unknown:
            raise ValueError(f"{_spelt(where)}: {', '.join(map(repr, unknown))} not a field of {hint.__name__}")
        for name, sub, f in hints:
            if name in data:
                kwargs[name] = _read(sub, data[name], (where, name), rules)
            elif f.default is MISSING and f.default_factory is MISSING:
                if complete:
                    raise ValueError(f"{_spelt(where)}: no {name!r}")
                kwargs[name] = None  # a required key the writer did not have: unknown, as a null is
        return hint(**kwargs)
    if hint is bool:
        _expect(isinstance(data, bool) or type(data).__name__ == "bool_", "true or false", data, where)
    elif hint is int:
        _expect(isinstance(data, numbers.Integral) and not isinstance(data, bool), "an integer", data, where)
    elif hint is float:
        _expect(isinstance(data, numbers.Real) and not isinstance(data, bool), "a number", data, where)
    elif hint is str:
        _expect(isinstance(data, str), "text", data, where)
    return data


def _expect(ok: bool, what: str, data: Any, where: Where) -> None:
    if not ok:
        shown = repr(data) if len(repr(data)) <= 40 else repr(data)[:37] + "..."
        raise ValueError(f"{_spelt(where)}: {what} expected, got {shown}")

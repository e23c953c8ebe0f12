"""Backward profiles (when each gradient becomes ready, and how big it is) and reduction-cost tables.

The what-if calculation replays a backward pass; this module is the only place that knows the file
formats it can come from:

* the paper's ``.bk.log`` (netx-repo/training-bottleneck): a comment line, the number of batches, the
  number of tensors, then per batch one ``wait_us,size_bytes`` line per tensor in backward order;
* JSON written by ``ringscope profile`` (``{"kind": "backward_profile", "tensors": [{"name", "wait_s",
  "bytes"}, ...]}``; ``ready_s`` may stand in for ``wait_s``);
* CSV with a header naming ``wait_s`` (or ``wait_us`` / ``ready_s``) and ``bytes`` (or ``size_bytes``).

A reduction-cost table is the paper's ``cuda_vec_add.log``: ``bytes,seconds`` lines, interpolated linearly.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

__all__ = [
    "BackwardProfile",
    "ReduceCostTable",
    "load_profile",
    "save_profile",
    "load_reduce_cost",
    "synthetic_profile",
    "ProfileFormatError",
]

PROFILE_KIND = "backward_profile"


class ProfileFormatError(ValueError):
    """A profile or cost-table file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class BackwardProfile:
    """Per-tensor gradient-ready gaps and sizes, in backward order (last layer first).

    ``wait_s`` has shape (batches, tensors): the time from the previous gradient being ready (the first
    counts from the start of ``loss.backward()``) — several batches are replayed separately and their
    overheads averaged, as the paper does. ``size_bytes`` has shape (tensors,).
    """

    wait_s: np.ndarray
    size_bytes: np.ndarray
    names: tuple[str, ...] = ()
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        wait = np.atleast_2d(np.asarray(self.wait_s, dtype=np.float64))
        sizes = np.asarray(self.size_bytes, dtype=np.float64).reshape(-1)
        if wait.shape[1] != sizes.shape[0]:
            raise ProfileFormatError(
                f"{self.source or 'profile'}: {wait.shape[1]} wait times but {sizes.shape[0]} sizes"
            )
        if not (np.all(np.isfinite(wait)) and np.all(np.isfinite(sizes)) and np.all(sizes >= 0)):
            raise ProfileFormatError(
                f"{self.source or 'profile'}: wait times and sizes must be finite, sizes non-negative"
            )
        # The paper's log clamps negative gaps (clock jitter between hooks) to 0; so do we.
        object.__setattr__(self, "wait_s", np.maximum(wait, 0.0))
        object.__setattr__(self, "size_bytes", sizes)

    @property
    def tensors(self) -> int:
        """Number of gradient tensors."""
        return int(self.size_bytes.shape[0])

    @property
    def gradient_bytes(self) -> float:
        """Total gradient bytes of one iteration (what one all-reduce pass must move)."""
        return float(self.size_bytes.sum())

    @property
    def backward_s(self) -> float:
        """Backward time, averaged over batches: the moment the last gradient is ready."""
        return float(self.wait_s.sum(axis=1).mean())

    def ready_s(self) -> np.ndarray:
        """Gradient-ready times (batches, tensors) from the start of backward."""
        return np.cumsum(self.wait_s, axis=1)


@dataclass(frozen=True)
class ReduceCostTable:
    """Time of the reduction (vector add) of a buffer, as a table of (bytes, seconds) interpolated linearly."""

    size_bytes: np.ndarray
    seconds: np.ndarray
    source: str = ""

    def cost_s(self, size_bytes: np.ndarray | float) -> np.ndarray:
        """Interpolated seconds for buffers of ``size_bytes`` (np.interp: clamped outside the table)."""
        return np.interp(size_bytes, self.size_bytes, self.seconds)


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError as exc:
        raise ProfileFormatError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ProfileFormatError(f"{path}: cannot read: {exc}") from exc


def load_bk_log(path: Path) -> BackwardProfile:
    """Read the paper's ``.bk.log`` (times in microseconds)."""
    lines = _read_lines(path)
    try:
        batches, tensors = int(lines[1].strip()), int(lines[2].strip())
    except (IndexError, ValueError) as exc:
        raise ProfileFormatError(f"{path}: lines 2-3 must give the number of batches and tensors") from exc
    waits = np.zeros((batches, tensors))
    sizes: Optional[np.ndarray] = None
    for b in range(batches):
        rows = lines[3 + b * tensors : 3 + (b + 1) * tensors]
        if len(rows) != tensors:
            raise ProfileFormatError(f"{path}: batch {b} has {len(rows)} of {tensors} tensor lines")
        try:
            pairs = np.array([[float(x) for x in row.split(",")[:2]] for row in rows])
        except ValueError as exc:
            raise ProfileFormatError(f"{path}: batch {b}: lines must be 'wait_us,size_bytes': {exc}") from exc
        waits[b] = pairs[:, 0] / 1e6
        if sizes is None:
            sizes = pairs[:, 1]
        elif not np.array_equal(sizes, pairs[:, 1]):
            raise ProfileFormatError(f"{path}: batch {b} lists different tensor sizes than batch 0")
    return BackwardProfile(waits, sizes if sizes is not None else np.zeros(0), source=str(path))


def _profile_from_rows(rows: Sequence[dict[str, Any]], source: str, meta: dict[str, Any]) -> BackwardProfile:
    if not rows:
        raise ProfileFormatError(f"{source}: no tensors")
    keys = rows[0].keys()
    size_key = "bytes" if "bytes" in keys else "size_bytes" if "size_bytes" in keys else None
    if size_key is None:
        raise ProfileFormatError(f"{source}: tensors need a 'bytes' (or 'size_bytes') field")
    try:
        sizes = np.array([float(r[size_key]) for r in rows])
        if "wait_s" in keys:
            waits = np.array([float(r["wait_s"]) for r in rows])
        elif "wait_us" in keys:
            waits = np.array([float(r["wait_us"]) for r in rows]) / 1e6
        elif "ready_s" in keys:
            waits = np.diff(np.array([float(r["ready_s"]) for r in rows]), prepend=0.0)
        else:
            raise ProfileFormatError(f"{source}: tensors need 'wait_s', 'wait_us' or 'ready_s'")
    except (TypeError, ValueError, KeyError) as exc:
        raise ProfileFormatError(f"{source}: bad tensor row: {exc}") from exc
    names = tuple(str(r.get("name", i)) for i, r in enumerate(rows))
    return BackwardProfile(waits, sizes, names=names, source=source, meta=meta)


def load_profile(path: Path | str) -> BackwardProfile:
    """Read a backward profile in any supported format, chosen by content and extension."""
    path = Path(path)
    if not path.is_file():
        raise ProfileFormatError(f"{path}: no such profile file")
    if path.suffix == ".json":
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ProfileFormatError(f"{path}: not valid JSON: {exc}") from exc
        if isinstance(doc, dict) and "profile" in doc and isinstance(doc["profile"], dict):
            doc = doc["profile"]
        if not isinstance(doc, dict) or not isinstance(doc.get("tensors"), list):
            raise ProfileFormatError(f"{path}: expected an object with a 'tensors' list")
        meta = {k: v for k, v in doc.items() if k != "tensors"}
        return _profile_from_rows(doc["tensors"], str(path), meta)
    if path.suffix == ".csv":
        with path.open(newline="") as fh:
            return _profile_from_rows(list(csv.DictReader(fh)), str(path), {})
    return load_bk_log(path)


def save_profile(profile: BackwardProfile, path: Path | str) -> None:
    """Write a profile; the extension picks the format (.json, .csv, anything else: the paper's .bk.log)."""
    path = Path(path)
    names = profile.names or tuple(str(i) for i in range(profile.tensors))
    if path.suffix == ".json":
        tensors = [
            {"name": n, "wait_s": float(w), "ready_s": float(r), "bytes": int(s)}
            for n, w, r, s in zip(
                names, profile.wait_s.mean(axis=0), profile.ready_s().mean(axis=0), profile.size_bytes
            )
        ]
        doc = {
            "kind": PROFILE_KIND,
            "schema": 1,
            **profile.meta,
            "backward_s": profile.meta.get("backward_s", profile.backward_s),
            "gradient_bytes": int(profile.gradient_bytes),
            "tensors": tensors,
        }
        path.write_text(json.dumps(doc, indent=1) + "\n")
    elif path.suffix == ".csv":
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["name", "wait_s", "bytes"])
            for n, w, s in zip(names, profile.wait_s.mean(axis=0), profile.size_bytes):
                writer.writerow([n, repr(float(w)), int(s)])
    else:
        lines = [
            "ringscope backward profile: wait_us since previous gradient ready, size_bytes; backward order",
            str(profile.wait_s.shape[0]),
            str(profile.tensors),
        ]
        for batch in profile.wait_s:
            lines += [f"{float(w) * 1e6!r},{int(s)}" for w, s in zip(batch, profile.size_bytes)]
        path.write_text("\n".join(lines) + "\n")


def load_reduce_cost(path: Path | str) -> ReduceCostTable:
    """Read a ``bytes,seconds`` reduction-cost table (the paper's cuda_vec_add.log)."""
    path = Path(path)
    rows: list[tuple[float, float]] = []
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            x, y = (float(v) for v in line.split(",")[:2])
        except ValueError as exc:
            raise ProfileFormatError(f"{path}:{number}: expected 'bytes,seconds', got {line!r}") from exc
        rows.append((x, y))
    if not rows:
        raise ProfileFormatError(f"{path}: empty reduction-cost table")
    table = np.array(sorted(rows))
    return ReduceCostTable(table[:, 0], table[:, 1], source=str(path))


def synthetic_profile(gradient_bytes: float, backward_s: float, tensors: int = 100) -> BackwardProfile:
    """Equal tensors ready at an even pace over ``backward_s``: the stand-in when only totals were measured."""
    waits = np.full(tensors, backward_s / tensors)
    sizes = np.full(tensors, gradient_bytes / tensors)
    return BackwardProfile(waits, sizes, source=f"synthetic: {tensors} equal tensors over {backward_s:.4g} s")


BACKWARD_SHARE = 2.0 / 3.0  # backward ≈ 2× forward: the share of T a synthetic profile spends in backward


def stand_in_profile(gradient_bytes: float, single_iteration_s: float) -> tuple[BackwardProfile, str]:
    """The profile the what-if uses when no backward profile was given, and the assumption that says so."""
    note = (
        f"no backward profile: {gradient_bytes / 1e6:.1f} MB of gradients ready at an even pace "
        f"over a backward pass of {BACKWARD_SHARE:.2g}·T"
    )
    return synthetic_profile(gradient_bytes, BACKWARD_SHARE * single_iteration_s), note

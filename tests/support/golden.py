"""Golden outputs: the JSON, summary, CSV and Parquet that `ringscope analyze` writes for every fixture, stored
as normalised text under tests/golden/<case>/ and compared structurally, so moving code around (a refactor of
rooms, types or names) can be shown to change no answer, on any machine.

Why not digests: floating-point results of least squares and reductions differ in their last bits between CPUs
and BLAS kernels, and a digest of a float-carrying file cannot tell that from a changed answer (nor show which
value changed). So the comparison is by value, with stated tolerances:

- integers, strings, booleans and keys: exactly;
- floats: within a relative tolerance of REL_TOL (or ABS_TOL near zero);
- numbers printed in the summary: integers exactly, decimals within one unit of their last printed digit
  (a last-bit difference can carry a rounding over);
- tables: the CSV is stored; both the CSV and the Parquet written are read back as frames and compared column by
  column with the same rules, and the Parquet's column types are stored beside them (tables/schema.json).

The ringscope version is left out. A failure lists each differing place with both values. After an intended
change of output, re-record (from the repository root) and read the diff of tests/golden/:

    .venv/bin/python -m tests.support.golden --record
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
REL_TOL = 1e-6
ABS_TOL = 1e-9
DROPPED_KEYS = frozenset({"ringscope_version"})
MAX_LINES = 40  # differences listed per case; the count of the rest is given

# (name, paths, options): every fixture the analyzer reads (corrupt.pcap is refused), the example in each byte mode
CASES = [
    *[(f"example-{mode}", ["fixtures/example"], {"byte_mode": mode}) for mode in ("ip", "wire", "payload")],
    *[
        (f"{folder}/{p.name}", [f"fixtures/{folder}/{p.name}"], {})
        for folder in ("accounting", "formats", "linktypes")
        for p in sorted((ROOT / "fixtures" / folder).glob("*"))
        if not p.name.endswith(".json")
    ],
    ("bad/truncated.pcap", ["fixtures/bad/truncated.pcap"], {}),  # the valid part, with its warning
    *[
        (f"real-training/{p.name}", [f"fixtures/real-training/{p.name}/run"], {})
        for p in sorted((ROOT / "fixtures" / "real-training").glob("*"))
        if (p / "run").is_dir()
    ],
]


def case_dir(name: str) -> Path:
    """Where a case's golden files live: its name with '/' as '__' and '.' as '_', so that no folder looks like a
    capture file to a glob."""
    return GOLDEN / name.replace("/", "__").replace(".", "_")


def produce(paths: list[str], options: dict[str, Any], out: Path) -> Path:
    """Run one analysis as `ringscope analyze --json --summary --tables` would and write its outputs into OUT."""
    from analyze.api import analyze
    from reports.tables import write_tables
    from reports.text import summary_text

    cwd = os.getcwd()
    os.chdir(ROOT)  # the cases name their files relative to the root, and the JSON names them as given
    try:
        result = analyze(paths, workers=1, **options)
    finally:
        os.chdir(cwd)
    out.mkdir(parents=True, exist_ok=True)
    result.write_json(out / "result.json")
    (out / "summary.txt").write_text(summary_text(result))
    with redirect_stdout(io.StringIO()):
        write_tables(result, out / "tables")
    return out


# --- comparison -------------------------------------------------------------------------------------------------


def _floats_differ(want: float, got: float) -> bool:
    if math.isnan(want) or math.isnan(got):
        return not (math.isnan(want) and math.isnan(got))
    return not math.isclose(want, got, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def diff_json(want: Any, got: Any, where: str = "$") -> Iterator[str]:
    """Each place where GOT differs from WANT: JSON paths with both values."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got), key=str):
            if key not in got:
                yield f"{where}.{key}: missing (want {_short(want[key])})"
            elif key not in want:
                yield f"{where}.{key}: unexpected (got {_short(got[key])})"
            else:
                yield from diff_json(want[key], got[key], f"{where}.{key}")
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            yield f"{where}: {len(got)} items, want {len(want)}"
        for i, (w, g) in enumerate(zip(want, got)):
            yield from diff_json(w, g, f"{where}[{i}]")
    elif _is_number(want) and _is_number(got) and (isinstance(want, float) or isinstance(got, float)):
        if _floats_differ(float(want), float(got)):
            yield f"{where}: got {got!r}, want {want!r}"
    elif type(want) is not type(got) or want != got:
        yield f"{where}: got {_short(got)}, want {_short(want)}"


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _short(x: Any) -> str:
    text = json.dumps(x, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?")


def diff_text(want: str, got: str) -> Iterator[str]:
    """Line by line: the words exactly, integers exactly, decimals within one unit of the last printed digit."""
    want_lines, got_lines = want.splitlines(), got.splitlines()
    if len(want_lines) != len(got_lines):
        yield f"{len(got_lines)} lines, want {len(want_lines)}"
    for n, (w, g) in enumerate(zip(want_lines, got_lines), start=1):
        if w != g and not _same_line(w, g):
            yield f"line {n}:\n    want: {w}\n    got:  {g}"


def _same_line(want: str, got: str) -> bool:
    if _NUMBER.split(want) != _NUMBER.split(got):
        return False
    for w, g in zip(_NUMBER.findall(want), _NUMBER.findall(got)):
        if w == g:
            continue
        if "." not in w or "." not in g or "e" in w.lower() or "e" in g.lower():
            return False
        decimals = len(w.split(".")[1])
        if len(g.split(".")[1]) != decimals:
            return False
        if abs(float(w.replace(",", "")) - float(g.replace(",", ""))) > 1.01 * 10.0**-decimals:
            return False
    return True


def diff_frames(want: pd.DataFrame, got: pd.DataFrame) -> Iterator[str]:
    """Column by column: names and row count exactly, integer and text columns exactly, floats within tolerance."""
    if list(want.columns) != list(got.columns):
        yield f"columns {list(got.columns)}, want {list(want.columns)}"
        return
    if len(want) != len(got):
        yield f"{len(got)} rows, want {len(want)}"
        return
    for col in want.columns:
        w, g = want[col], got[col]
        if pd.api.types.is_integer_dtype(w) and pd.api.types.is_integer_dtype(g):
            wv, gv = w.to_numpy().tolist(), g.to_numpy().tolist()
            bad = w.to_numpy() != g.to_numpy()
        elif _numeric(w) and _numeric(g):
            wv, gv = w.to_numpy(dtype=float).tolist(), g.to_numpy(dtype=float).tolist()
            bad = ~np.isclose(
                g.to_numpy(dtype=float), w.to_numpy(dtype=float), rtol=REL_TOL, atol=ABS_TOL, equal_nan=True
            )
        else:
            wv, gv = _as_text(w), _as_text(g)
            bad = wv != gv
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            yield f"column {col}: {int(bad.sum())} row(s) differ; first row {i}: got {gv[i]!r}, want {wv[i]!r}"


def _numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def _as_text(s: pd.Series) -> np.ndarray:
    """Text as CSV writes it, so a Parquet column (categorical, boolean, nullable) compares with its CSV form."""
    return np.array(["" if pd.isna(v) else str(v) for v in s.astype(object)], dtype=object)


def parquet_schema(tables: Path) -> dict[str, dict[str, str]]:
    """The column types of every Parquet table written, as pandas reads them back."""
    return {p.stem: {c: str(t) for c, t in pd.read_parquet(p).dtypes.items()} for p in sorted(tables.glob("*.parquet"))}


def diff_case(golden: Path, produced: Path) -> list[str]:
    """Every difference between a case's golden files and a fresh run's outputs, prefixed by the file."""
    out: list[str] = []
    want_files = sorted(p.relative_to(golden).as_posix() for p in golden.rglob("*") if p.is_file())
    got_files = sorted(
        p.relative_to(produced).as_posix() for p in produced.rglob("*") if p.is_file() and p.suffix != ".parquet"
    )
    got_files.append("tables/schema.json")
    for name in sorted(set(want_files) ^ set(got_files)):
        out.append(f"{name}: {'missing' if name in want_files else 'not in the golden set'}")
    for name in sorted(set(want_files) & set(got_files)):
        out += [f"{name}: {d}" for d in _diff_file(name, golden, produced)]
    return out


def _diff_file(name: str, golden: Path, produced: Path) -> Iterator[str]:
    want_path = golden / name
    if name == "result.json":
        yield from diff_json(load_result_json(want_path), load_result_json(produced / name))
    elif name == "summary.txt":
        yield from diff_text(want_path.read_text(), (produced / name).read_text())
    elif name == "tables/schema.json":
        yield from diff_json(json.loads(want_path.read_text()), parquet_schema(produced / "tables"))
    else:  # a table: its CSV, and the Parquet beside it, against the golden CSV
        want = pd.read_csv(want_path, keep_default_na=False, na_values=[""])
        yield from diff_frames(want, pd.read_csv(produced / name, keep_default_na=False, na_values=[""]))
        parquet = (produced / name).with_suffix(".parquet")
        yield from (f"(parquet) {d}" for d in diff_frames(want, pd.read_parquet(parquet)))


def load_result_json(path: Path) -> Any:
    """The result's JSON without the keys that name the build (the version)."""
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if k not in DROPPED_KEYS}


def report(name: str, differences: list[str]) -> str:
    """The readable failure: the first MAX_LINES differences, then how many more."""
    lines = [f"{name}: {len(differences)} difference(s) from {case_dir(name).relative_to(ROOT)}"]
    lines += [f"  {d}" for d in differences[:MAX_LINES]]
    if len(differences) > MAX_LINES:
        lines.append(f"  ... and {len(differences) - MAX_LINES} more")
    lines.append("  (an intended change: re-record with `python -m tests.support.golden --record`)")
    return "\n".join(lines)


# --- recording --------------------------------------------------------------------------------------------------


def record_case(produced: Path, golden: Path) -> None:
    """Store one run's outputs as golden text: the JSON without its version, the summary, the CSVs, the schema."""
    if golden.exists():
        shutil.rmtree(golden)
    (golden / "tables").mkdir(parents=True)
    result = load_result_json(produced / "result.json")
    (golden / "result.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    shutil.copy(produced / "summary.txt", golden / "summary.txt")
    for csv in sorted((produced / "tables").glob("*.csv")):
        shutil.copy(csv, golden / "tables" / csv.name)
    schema = parquet_schema(produced / "tables")
    (golden / "tables" / "schema.json").write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    import tempfile

    if argv != ["--record"]:
        print("usage: python -m tests.support.golden --record", file=sys.stderr)
        return 2
    if GOLDEN.exists():
        shutil.rmtree(GOLDEN)
    with tempfile.TemporaryDirectory() as tmp:
        for name, paths, options in CASES:
            produced = produce(paths, options, Path(tmp) / case_dir(name).name)
            record_case(produced, case_dir(name))
    print(f"recorded {len(CASES)} cases in {GOLDEN.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Golden outputs: the JSON, summary, CSV and Parquet that `ringscope analyze` writes for every fixture,
recorded as SHA-256 digests, so moving code around (a refactor of rooms, types or names) can be shown to
change no output byte. tests/e2e/test_golden.py compares; after an intended change of output, re-record:

    python tests/support/golden.py --record

The cases run from the repository root with relative paths (the JSON names the files as given).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIGESTS = Path(__file__).resolve().parent / "golden.json"
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


def outputs(paths: list[str], options: dict, tmp: Path) -> dict[str, str]:
    """Digest of every output file of one analysis: result.json, summary.txt and the tables."""
    from analyze.api import analyze
    from reports.text import summary_text
    from reports.tables import write_tables

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = analyze(paths, workers=1, **options)
    finally:
        os.chdir(cwd)
    tmp.mkdir(parents=True, exist_ok=True)
    result.write_json(tmp / "result.json")
    (tmp / "summary.txt").write_text(summary_text(result))
    with redirect_stdout(io.StringIO()):
        write_tables(result, tmp / "tables")
    files = sorted(p for p in tmp.rglob("*") if p.is_file())
    return {str(p.relative_to(tmp)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def record(tmp: Path) -> dict[str, dict[str, str]]:
    return {name: outputs(paths, options, tmp / name.replace("/", "_")) for name, paths, options in CASES}


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/support/golden.py --record")
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as d:
        DIGESTS.write_text(json.dumps(record(Path(d)), indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(CASES)} cases in {DIGESTS}")

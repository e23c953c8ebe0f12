"""The house rules (DESIGN.md) hold: the import contracts in pyproject.toml (import-linter), and cli.py as the
one face that nothing imports (a module, which import-linter's contracts cannot name as a root)."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from requirements import require

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    require(lint is not None, "needs import-linter (pip install -e '.[test]')")
    done = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_nothing_imports_cli():
    offenders = []
    for path in [*ROOT.glob("analyze/**/*.py"), *ROOT.glob("capture/**/*.py"), *ROOT.glob("reports/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "cli" or n.startswith("cli.")]
    assert offenders == []

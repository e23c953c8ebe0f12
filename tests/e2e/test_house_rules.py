"""The house rules (DESIGN.md) hold, checked by the same tools a developer runs (pyproject.toml configures
them; .pre-commit-config.yaml runs them before a commit): the import contracts (import-linter), cli.py as the
one face that nothing imports (a module, which import-linter's contracts cannot name as a root), ruff's lint
and format, and mypy on analyze/ and capture/."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from requirements import require

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    require(found is not None, f"needs {name} (pip install -e '.[test]')")
    assert found is not None
    return found


@pytest.mark.parametrize(
    "argv",
    [["lint-imports"], ["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["import contracts", "ruff lint", "ruff format", "mypy"],
)
def test_tool_passes(argv: list[str]) -> None:
    done = subprocess.run([_tool(argv[0]), *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_nothing_imports_cli() -> None:
    offenders = []
    for path in [*ROOT.glob("analyze/**/*.py"), *ROOT.glob("capture/**/*.py"), *ROOT.glob("reports/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "cli" or n.startswith("cli.")]
    assert offenders == []

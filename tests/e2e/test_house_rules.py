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

from tests.support.requirements import require

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


def test_the_readme_stays_a_readme() -> None:
    """At most 250 lines (issue 46): the details live in docs/, where each command's page can grow."""
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 250, f"README.md has {lines} lines: move details to docs/"


def test_the_readme_commands_are_the_setup_scripts_and_the_first_installs_only_analysis() -> None:
    """The README's first command sets up analysis only: no torch, Horovod build, browser or test tools (a user
    who reads pcaps waited 6 minutes for Horovod once). Its second is what CI runs: every test, the live and slow ones
    in a pass of their own, one at a time (beside the parallel pass a tshark run under pyshark exited 255 once)."""
    readme = (ROOT / "README.md").read_text()
    first = "bash .ci/setup && .venv/bin/ringscope analyze fixtures/example-ddp/run --html example-report.html"
    second = (
        'bash .ci/setup-tests && .venv/bin/python -m pytest -q -m "not live and not slow" -n 2 '
        '&& .venv/bin/python -m pytest -q -m "live or slow"\n'
    )
    assert first in readme and second in readme
    assert readme.index(second) < 2000, "the test command is on the README's first screen"
    assert second in (ROOT / ".ci/run").read_text()
    setup = (ROOT / ".ci/setup").read_text()
    commands = [line for line in setup.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for heavy in ("torch", "horovod", "chromium", "tshark", "[test]"):
        assert not any(heavy in line for line in commands), f".ci/setup installs {heavy}"


def test_no_import_cycles() -> None:
    """No module reaches itself through imports, function-level ones included (grimp reads them all): a cycle
    hidden inside a function is still two rooms that cannot be understood, tested or moved apart."""
    import grimp

    graph = grimp.build_graph("analyze", "capture", "reports")
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert cycles == []


def _strongly_connected(graph) -> list[list[str]]:  # noqa: ANN001 - grimp's ImportGraph
    """Tarjan's components of the module graph, iteratively (no recursion limit on deep chains)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def test_analyze_root_holds_at_most_six_modules_and_the_api_only_faces() -> None:
    """DESIGN.md's rooms: analyses go into packages, and api.py delegates (issue 46's 12 root modules and a 491-line
    api.py that built every table are what this keeps from coming back)."""
    root_modules = sorted(p.name for p in (ROOT / "analyze").glob("*.py") if p.name != "__init__.py")
    assert len(root_modules) <= 6, root_modules
    api_lines = len((ROOT / "analyze" / "api.py").read_text().splitlines())
    assert api_lines < 150, api_lines


def test_functions_read_in_one_sitting() -> None:
    """No function body (docstring aside) over 100 lines, the compiled kernel's included: its packet walk is
    inline helpers per layer, which numba joins into one loop (issue 46: classify, _iterations, diagnose and six
    more had grown past it, the packet walk to 360 lines)."""
    long = []
    for path in [
        ROOT / "cli.py",
        *ROOT.glob("analyze/**/*.py"),
        *ROOT.glob("capture/**/*.py"),
        *ROOT.glob("reports/**/*.py"),
    ]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1:
                    body = body[1:]
                lines = (node.end_lineno or node.lineno) - body[0].lineno + 1
                if lines > 100:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert long == []


def test_from_plain_only_reads_saved_documents() -> None:
    """Analyses build their records with the dataclasses' constructors, which mypy checks; `from_plain` (which a
    misspelt key in a producer's dict would pass, lenient) reads JSON from disk only: the result's own reader and
    the CLI's (issue 46 item 1: ten producers converted their dicts with it)."""
    callers = []
    for path in [ROOT / "cli.py", *ROOT.glob("analyze/**/*.py"), *ROOT.glob("reports/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "from_plain":
                callers.append(path.relative_to(ROOT).as_posix())
    assert sorted(set(callers)) == ["analyze/model/result.py", "cli.py"], callers

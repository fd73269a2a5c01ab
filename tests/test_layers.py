"""The house rules of the layout (ARCHITECTURE.md), read from the source.

Every ``import perfctl...`` counts, including the lazy ones inside functions:
a lazy import still makes a dependency, it only moves its cost.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "perfctl"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if "data" in rel.parts:  # the demo project is user code, not perfctl
            continue
        name = ".".join(rel.parts).removesuffix(".__init__")
        found[name] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "perfctl":
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    out.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "perfctl")
    return out


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read() -> None:
    # Guards the checks below against passing on an empty graph.
    assert "perfctl.stats.decision" in GRAPH
    assert "perfctl.model" in GRAPH["perfctl.stats.decision"]
    assert "perfctl.jobs.compare" in GRAPH["perfctl.cli.compare"]


def test_no_import_cycles() -> None:
    assert _cycles() == []


def _edges_from(prefixes: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    for src, deps in GRAPH.items():
        if src.startswith(prefixes):
            for dep in deps:
                yield src, dep


@pytest.mark.parametrize("stage", ["perfctl.cli", "perfctl.render"])
def test_cli_and_render_never_open_the_store(stage: str) -> None:
    bad = [(s, d) for s, d in _edges_from((stage,)) if d.startswith("perfctl.store")]
    assert bad == []


def test_stats_imports_nothing_above_the_model() -> None:
    allowed = ("perfctl.stats", "perfctl.model", "perfctl.errors")
    bad = [(s, d) for s, d in _edges_from(("perfctl.stats",)) if not d.startswith(allowed)]
    assert bad == []


def test_no_stage_calls_up_into_the_cli() -> None:
    bad = [(s, d) for s, deps in GRAPH.items() for d in deps if d.startswith("perfctl.cli")]
    bad = [(s, d) for s, d in bad if not s.startswith(("perfctl.cli", "perfctl.__main__"))]
    assert bad == []


def test_modules_stay_small() -> None:
    big = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert big == {}


def _is_typer_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    # A CLI command (``@guarded``, registered with typer): its signature is one
    # ``Annotated[..., typer.Option(...)]`` per flag, long by nature.
    return any(isinstance(d, ast.Name) and d.id == "guarded" for d in node.decorator_list)


def _long_functions(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            # Every line from `def` (signature and docstring too), except a typer
            # command's signature: its body is counted from its docstring on.
            first = node.body[0].lineno if _is_typer_command(node) else node.lineno
            length = (node.end_lineno or first) - first + 1
            if length > MAX_FUNCTION_LINES:
                yield f"{node.name} ({length} lines)"


def test_functions_stay_small() -> None:
    long = {name: found for name, path in MODULES.items() if (found := list(_long_functions(path)))}
    assert long == {}

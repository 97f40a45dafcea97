"""Issue 34: the house rules on size — no function or method over 60 lines, no module over 600 lines.

Lengths are measured the way the issue measures them: with an ast walk, end_lineno - lineno + 1 (decorators not
counted, the docstring counted)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dspark_lsp"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 600


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def long_functions(path: Path, root: Path = ROOT, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Every function or method in ``path`` longer than ``limit`` lines, as 'file:line name (length)'."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length})")
    return out


def test_the_walk_finds_a_long_function(tmp_path: Path) -> None:
    # The measure itself must be able to fail: a 61-line function is caught, a 60-line one is not.
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    (tmp_path / "ok.py").write_text(f"def ok() -> None:\n{body}\n", encoding="utf-8")
    (tmp_path / "long.py").write_text(f"class C:\n    def long(self) -> None:\n    {body.replace(chr(10), chr(10) + '    ')}\n        y = 1\n", encoding="utf-8")
    assert long_functions(tmp_path / "ok.py", root=tmp_path) == []
    assert long_functions(tmp_path / "long.py", root=tmp_path) == ["long.py:2 long (61)"]


def test_no_function_is_longer_than_sixty_lines() -> None:
    found = [hit for path in _modules() for hit in long_functions(path)]
    assert found == []


def test_no_module_is_longer_than_six_hundred_lines() -> None:
    found = []
    for path in _modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{path.relative_to(ROOT)} ({lines})")
    assert found == []


# --- No import cycle among the package's modules --------------------------------------------------------------
# Counted: module-level imports and imports inside functions (a cycle closed by a deferred import still ties
# the two modules together and breaks the first time the function runs during the other's import). Not
# counted: imports under `if TYPE_CHECKING:` (never run). Importing a.b.c also runs a/__init__ and
# a/b/__init__, but a package that is already being imported is no cycle hazard for its submodules, so only
# the module named is an edge; `from pkg import name` is an edge to pkg.name when that is a submodule, else
# to pkg's __init__ (where the name must be defined — a real edge, which can close a cycle).


def module_names(package_dir: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file for every module under ``package_dir`` (a package's __init__ is the package)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = [package, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_time_imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node`` that can run, skipping the body of `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append(child)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                found.extend(_run_time_imports(ast.Module(body=[other], type_ignores=[])))
        else:
            found.extend(_run_time_imports(child))
    return found


def import_graph(package_dir: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package modules it imports at run time."""
    names = module_names(package_dir, package)
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        # The package a relative import starts from: the module's own package (for __init__, itself).
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _run_time_imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
            graph[name].update(t for t in targets if t in names and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as [a, b, ..., a], or [] when the graph has none (depth-first, in name order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return []


def test_the_import_checker_finds_a_planted_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg import a\nVALUE = 1\n", encoding="utf-8")
    (pkg / "a.py").write_text("import pkg.sub.b\n", encoding="utf-8")
    (pkg / "sub" / "__init__.py").write_text("", encoding="utf-8")
    # A deferred import closes the cycle; the TYPE_CHECKING one must not count.
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
        "def f() -> None:\n    from .. import VALUE\n", encoding="utf-8")
    graph = import_graph(pkg, "pkg")
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.sub.b"}, "pkg.sub": set(), "pkg.sub.b": {"pkg"}}
    assert find_cycle(graph) == ["pkg", "pkg.a", "pkg.sub.b", "pkg"]
    # Without the deferred import of the package's own name there is no cycle.
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n",
                                      encoding="utf-8")
    assert find_cycle(import_graph(pkg, "pkg")) == []


def test_no_import_cycle_among_the_packages_modules() -> None:
    cycle = find_cycle(import_graph(PACKAGE, "dspark_lsp"))
    assert cycle == [], "import cycle: " + " -> ".join(cycle)

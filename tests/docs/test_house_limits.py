"""Issue 34: the house rules on size — no function or method over 60 lines, no module over 600 lines.

Lengths are measured the way the issue measures them: with an ast walk, end_lineno - lineno + 1 (decorators not
counted, the docstring counted)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dspark_lsp"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 600
# Other parts of the package are still being split under the same issue; the lead removes this once they land.
PENDING = pytest.mark.xfail(strict=False, reason="issue 34: lsp/server.py and bench are being split")


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


@PENDING
def test_no_function_is_longer_than_sixty_lines() -> None:
    found = [hit for path in _modules() for hit in long_functions(path)]
    assert found == []


@PENDING
def test_no_module_is_longer_than_six_hundred_lines() -> None:
    found = []
    for path in _modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{path.relative_to(ROOT)} ({lines})")
    assert found == []

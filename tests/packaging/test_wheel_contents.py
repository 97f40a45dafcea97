"""The wheel carries the tree-sitter data (issue 15: `pip install .` gave a package without its grammars).

Builds the wheel from this checkout (`pip wheel . --no-deps --no-build-isolation`), checks that every
`grammars/<lang>/{language.toml,*.scm}` is inside it under `dspark_lsp/grammars/`, then imports the
package from the unpacked wheel alone (no checkout next to it) and asks the syntax layer for a scope.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from wheel_testlib import build_wheel

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_holds_every_grammar_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"dspark_lsp/grammars/{p.relative_to(ROOT / 'grammars').as_posix()}"
        for p in (ROOT / "grammars").glob("*/*")
        if p.suffix == ".scm" or p.name == "language.toml"
    }
    assert len(expected) >= 27  # 9 languages x (language.toml, keys.scm, scope.scm) today
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"


def test_unpacked_wheel_finds_its_grammars(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import sys\n"
        f"sys.path.insert(0, {str(site)!r})\n"
        "import dspark_lsp\n"
        f"assert dspark_lsp.__file__.startswith({str(site)!r}), dspark_lsp.__file__\n"
        "from dspark_lsp.syntax import SyntaxDocument, detect_language\n"
        "from dspark_lsp.syntax.languages import grammars_dir\n"
        "print(grammars_dir())\n"
        "text = 'def f(x):\\n    '\n"
        "print(SyntaxDocument(text, detect_language('a.py', None)).completion_scope(len(text)).value)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "DSPARK_GRAMMARS_DIR"}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, scope = proc.stdout.split()
    assert Path(where) == site / "dspark_lsp" / "grammars"
    assert scope == "multi_line"

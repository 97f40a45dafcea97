"""Emacs, headless (`emacs --batch`), with Debian's eglot and editors/README.md's snippet as written.

The driver (editors/emacs/test/e2e.el) evaluates the snippet, opens a Python file, runs eglot, types
inside a function and asks eglot's completion-at-point (textDocument/completion) until an item comes,
then accepts it. The server is `dspark-lsp` from PATH, as in the snippet: this environment's console
script, with the real default model (the snippet names no model).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "editors" / "emacs" / "test" / "e2e.el"
README = ROOT / "editors" / "README.md"
TYPED = "return fib"
SAMPLE = "def fibonacci(n):\n    if n < 2:\n        return n\n    \n\n\nprint(fibonacci(10))\n"


def _eglot_available() -> bool:
    emacs = shutil.which("emacs")
    if not emacs:
        return False
    probe = subprocess.run(
        [emacs, "--batch", "--eval", "(progn (require 'package) (package-initialize) (require 'eglot))"],
        capture_output=True, timeout=60,
    )
    return probe.returncode == 0


pytestmark = [
    pytest.mark.skipif(not _eglot_available(), reason="emacs with eglot not installed (apt-get install emacs-nox elpa-eglot)"),
    pytest.mark.real_model,
    pytest.mark.timeout(420),
]


def readme_snippet() -> str:
    section = README.read_text().split("## Emacs (eglot)", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```elisp\n(.*?)```", section, re.S)
    assert m, "editors/README.md's Emacs section has no elisp block"
    return m.group(1)


def test_readme_snippet_gets_a_completion_in_emacs(tmp_path: Path) -> None:
    pytest.importorskip("dspark_lsp.lsp.server")
    from dspark_lsp.errors import ModelError
    from dspark_lsp.models.cache import cache_root
    from dspark_lsp.models.loader import resolve_model
    from dspark_lsp.models.registry import DEFAULT_TARGET

    try:
        resolve_model(DEFAULT_TARGET)
    except ModelError:
        pytest.skip(f"the default model is not prepared (dspark-lsp models prepare {DEFAULT_TARGET})")
    server = Path(sys.executable).parent / "dspark-lsp"
    assert server.is_file(), f"no dspark-lsp console script next to {sys.executable}"
    snippet = tmp_path / "snippet.el"
    snippet.write_text(readme_snippet())
    src = tmp_path / "project" / "sample.py"
    src.parent.mkdir()
    src.write_text(SAMPLE)
    out = tmp_path / "result.json"
    env = {
        **os.environ,
        # The snippet runs "dspark-lsp" from PATH: this environment's.
        "PATH": f"{server.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path / "home"),  # nothing of the user's init, nothing written to theirs
        "DSPARK_CACHE_DIR": str(cache_root(None)),  # resolved before HOME moves
        "DSPARK_E2E_SNIPPET": str(snippet),
        "DSPARK_E2E_FILE": str(src),
        "DSPARK_E2E_LINE": "4",
        "DSPARK_E2E_TYPE": TYPED,
        "DSPARK_E2E_OUT": str(out),
        "DSPARK_E2E_TIMEOUT_S": "300",
    }
    proc = subprocess.run(
        ["emacs", "--batch", "-l", str(DRIVER)], env=env, capture_output=True, text=True, timeout=400
    )
    assert out.is_file(), f"the driver wrote no result (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    r = json.loads(out.read_text())
    assert "error" not in r, (r, proc.stderr[-3000:])
    assert r["connected"] is True
    assert '"dspark-lsp" "--stdio"' in r["server_program"]
    assert r["candidates"], f"no completion item came: {r}"
    # The item re-types the word before the cursor and continues it: `fib` + `onacci(...)`.
    assert all(c.startswith("fib") for c in r["candidates"]), r["candidates"]
    # completion-at-point applied the item's edit to the buffer.
    assert r["line"].startswith(f"    {TYPED}") and len(r["line"]) > len(f"    {TYPED}"), r["line"]
    assert r["buffer"].splitlines()[3] == r["line"]
    assert r["buffer"].splitlines()[:3] == SAMPLE.splitlines()[:3]

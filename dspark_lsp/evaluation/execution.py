"""pass@1: does the document with the completion inserted pass the problem's tests?

The one implementation of functional correctness in the project: `dspark-lsp eval` and `dspark-lsp bench`
both call ``passes``. The program runs in a fresh interpreter (a completion may loop, exit or crash) with a
timeout, in a temporary directory so a completion that writes files leaves nothing behind.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_TIMEOUT_S = 10.0


def humaneval_program(text: str, offset: int, completion: str, test: str, entry_point: str) -> str:
    """The document with ``completion`` at ``offset``, then HumanEval's ``check`` on the entry point."""
    return f"{text[:offset]}{completion}{text[offset:]}\n{test}\ncheck({entry_point})\n"


def run_python_check(program: str, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when ``program`` exits 0 within ``timeout`` seconds."""
    with tempfile.TemporaryDirectory(prefix="dspark-eval-") as tmp:
        path = Path(tmp) / "program.py"
        path.write_text(program, encoding="utf-8")
        try:
            proc = subprocess.run(
                # -I: isolated (no user site, no cwd on sys.path: the repository's modules stay out).
                [sys.executable, "-I", str(path)],
                cwd=tmp,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0


def passes(
    text: str, offset: int, completion: str, test: str, entry_point: str, timeout: float = DEFAULT_TIMEOUT_S
) -> bool:
    """pass@1 of one greedy completion of a HumanEval hole."""
    return run_python_check(humaneval_program(text, offset, completion, test, entry_point), timeout)

"""Building this checkout's wheel for the wheel tests (contents and a fresh-venv install)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(out: Path) -> Path:
    build_dir = ROOT / "build"
    had_build_dir = build_dir.exists()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=280,
        )
    finally:
        if not had_build_dir:  # setuptools' scratch folder: leave the checkout as it was
            shutil.rmtree(build_dir, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheels = list(out.glob("dspark_lsp-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]

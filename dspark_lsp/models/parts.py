"""Installing the pinned part packages and finding their data files without importing them.

The part packages are unofficial re-uploads: we never import their code (an ``__init__`` could do
anything), we only read the one data file each ships, found through its installed-files metadata.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dspark_lsp.errors import ModelError

# Installs requirement strings ("name==version") into the current environment; raises ModelError.
Installer = Callable[[Sequence[str]], None]


def installed_version(dist_name: str) -> str | None:
    """The installed version of ``dist_name``, or None when it is not installed."""
    try:
        return md.version(dist_name)
    except md.PackageNotFoundError:
        return None


def missing_parts(parts: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The parts whose exact pinned version is not installed (a wrong version counts as missing)."""
    importlib.invalidate_caches()
    return [(dist, ver) for dist, ver in parts if installed_version(dist) != ver]


def _pip_error_line(output: str) -> str:
    """The most telling line of pip's output: its last ``ERROR:`` line, else its last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    picked = errors[-1] if errors else (lines[-1] if lines else "no output")
    return picked.removeprefix("ERROR:").strip()


def pip_installer(requirements: Sequence[str]) -> None:
    """Install ``requirements`` with ``python -m pip install --no-deps`` into this interpreter's env."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-input",
        "--disable-pip-version-check",
        *requirements,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ModelError(f"could not run pip to install {', '.join(requirements)}: {exc}") from None
    if proc.returncode != 0:
        if "No module named pip" in proc.stderr:
            raise ModelError(
                f"pip is not available in {sys.executable}'s environment (needed to install "
                f"{', '.join(requirements)}); run `{sys.executable} -m ensurepip` and retry"
            )
        raise ModelError(
            f"pip could not install part package {', '.join(requirements)} "
            f"({_pip_error_line(proc.stdout + proc.stderr)}); check the connection to PyPI"
        )


def locate_part_file(dist_name: str, version: str) -> Path:
    """The data file (``<pkg>/data/*.bin``) that the installed part package ``dist_name`` ships."""
    importlib.invalidate_caches()
    try:
        dist = md.distribution(dist_name)
    except md.PackageNotFoundError:
        raise ModelError(f"part package {dist_name}=={version} is not installed") from None
    if dist.version != version:
        raise ModelError(f"part package {dist_name} is version {dist.version}, expected {version}")
    data = [f for f in (dist.files or []) if f.suffix == ".bin" and "data" in f.parts[:-1]]
    if len(data) != 1:
        raise ModelError(
            f"part package {dist_name}=={version} should list exactly one data/*.bin file, found {len(data)}"
        )
    path = Path(str(dist.locate_file(data[0])))
    if not path.is_file():
        raise ModelError(
            f"part file {data[0]} of {dist_name}=={version} is missing from {path.parent} "
            f"(reinstall it: pip install --force-reinstall --no-deps {dist_name}=={version})"
        )
    return path

"""The training corpus: permissively licensed source files found on this machine, split by file.

The held-out split is chosen by a hash of the file's path relative to its root, so it is stable across
runs and machines and a file is never in both splits.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from dspark_lsp.errors import UserError

# Site-packages distributions whose licences allow training on and redistributing derived weights,
# with the licence their metadata declares (checked when the corpus is collected).
PERMISSIVE_PACKAGES: dict[str, str] = {
    "numpy": "BSD-3-Clause",
    "networkx": "BSD-3-Clause",
    "click": "BSD-3-Clause",
    "jinja2": "BSD-3-Clause",
    "attrs": "MIT",
    "packaging": "Apache-2.0 OR BSD-2-Clause",
    "pygls": "Apache-2.0",
    "lsprotocol": "MIT",
    "anyio": "MIT",
    "pydantic": "MIT",
    "accelerate": "Apache-2.0",
    "gguf": "MIT",
    "fsspec": "BSD-3-Clause",
    "platformdirs": "MIT",
}

SUFFIXES = (".py", ".js", ".mjs", ".cjs", ".ts")
# Other languages the server completes, for the feature draft's mix (extra_language_roots).
C_FAMILY_SUFFIXES = (".h", ".hpp", ".hh", ".c", ".cc", ".cpp")
MAX_FILE_BYTES = 200_000  # generated/minified giants teach little and skew token counts


@dataclass(frozen=True)
class SourceRoot:
    name: str
    path: Path
    licence: str


@dataclass(frozen=True)
class CorpusFile:
    root: str
    rel: str
    path: Path
    licence: str

    @property
    def key(self) -> str:
        return f"{self.root}/{self.rel}"


def is_held_out(key: str, held_out_percent: float) -> bool:
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:4], "big") % 10_000 < held_out_percent * 100


def default_roots() -> list[SourceRoot]:
    roots = [SourceRoot("cpython-stdlib", Path(sysconfig.get_paths()["stdlib"]), "PSF-2.0")]
    npm = Path("/usr/lib/node_modules/npm")
    if npm.is_dir():
        roots.append(SourceRoot("npm", npm, "Artistic-2.0 (npm) / MIT, ISC (bundled deps)"))
    for dist_name, licence in PERMISSIVE_PACKAGES.items():
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        top = (dist.read_text("top_level.txt") or dist_name).split()[0]
        pkg = Path(str(dist.locate_file(top)))
        if pkg.is_dir():
            roots.append(SourceRoot(f"site-packages/{dist_name}", pkg, licence))
    return roots


def extra_language_roots() -> list[SourceRoot]:
    """Permissively licensed C, C++ and TypeScript sources installed on this machine (the Python/JS roots
    above teach nothing of braces-and-types syntax). Hand-written code only: torch's generated operator
    headers (ATen/ops, thousands of near-identical files) are left out by picking its hand-written
    subtrees. Roots that are not installed are skipped."""
    roots: list[SourceRoot] = []
    try:
        import torch

        inc = Path(torch.__file__).parent / "include"
        for sub, licence in (("c10", "BSD-3-Clause (PyTorch)"), ("ATen/core", "BSD-3-Clause (PyTorch)"),
                             ("torch/csrc/api", "BSD-3-Clause (PyTorch)"), ("fmt", "MIT (fmt)"),
                             ("pybind11", "BSD-3-Clause (pybind11)")):
            if (inc / sub).is_dir():
                roots.append(SourceRoot(f"torch-include/{sub}", inc / sub, licence))
    except ImportError:
        pass
    py_inc = Path(sysconfig.get_paths()["include"])
    if py_inc.is_dir():
        roots.append(SourceRoot("cpython-include", py_inc, "PSF-2.0"))
    try:
        np_inc = Path(str(metadata.distribution("numpy").locate_file("numpy"))) / "_core" / "include"
        if np_inc.is_dir():
            roots.append(SourceRoot("numpy-include", np_inc, "BSD-3-Clause"))
    except metadata.PackageNotFoundError:
        pass
    ts = Path(__file__).resolve().parents[2] / "editors" / "vscode" / "node_modules" / "typescript" / "lib"
    if ts.is_dir():
        roots.append(SourceRoot("typescript-lib", ts, "Apache-2.0"))
    return roots


def collect(roots: list[SourceRoot], suffixes: tuple[str, ...] = SUFFIXES) -> list[CorpusFile]:
    files: list[CorpusFile] = []
    for root in roots:
        if not root.path.is_dir():
            raise UserError(f"corpus root {root.path} is not a directory")
        for path in sorted(root.path.rglob("*")):
            if path.suffix not in suffixes or not path.is_file():
                continue
            parts = set(path.relative_to(root.path).parts)
            if "site-packages" in parts or "__pycache__" in parts or path.name.endswith(".min.js"):
                continue
            if root.name == "cpython-stdlib" and parts & {"site-packages", "idlelib", "lib2to3"}:
                continue
            if path.stat().st_size > MAX_FILE_BYTES or path.stat().st_size < 200:
                continue
            files.append(CorpusFile(root.name, str(path.relative_to(root.path)), path, root.licence))
    return files


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def write_manifest(out: Path, roots: list[SourceRoot], counts: dict[str, dict[str, int]]) -> None:
    data = {"roots": [{**asdict(r), "path": str(r.path)} for r in roots], "counts": counts}
    out.write_text(json.dumps(data, indent=2))

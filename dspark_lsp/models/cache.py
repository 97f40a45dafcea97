"""Where prepared models live and how we decide that one is ready.

Layout under the cache root::

    <root>/models/<name>/                  a prepared model (config, safetensors, tokenizer files)
    <root>/models/<name>/dspark-model.json the manifest, written LAST: no manifest, not ready
    <root>/models/.<name>.tmp-XXXX/        a save in progress (deleted by the next prepare)
    <root>/gguf/<file>.gguf.partial        a join in progress (deleted by the next prepare)
    <root>/gguf/<file>.gguf                the verified joined GGUF: what the CPU's quantized path loads

A manifest that does not parse, names another source, or lists files whose sizes no longer match makes
the model "not ready": a later prepare then rebuilds it instead of trusting a half-written directory.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

MANIFEST_NAME = "dspark-model.json"
MANIFEST_VERSION = 1
ENV_CACHE_DIR = "DSPARK_CACHE_DIR"
TMP_MARKER = ".tmp-"
PARTIAL_SUFFIX = ".partial"


def cache_root(flag: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``--cache-dir`` flag > $DSPARK_CACHE_DIR > $XDG_CACHE_HOME/dspark-lsp > ~/.cache."""
    if flag:
        return Path(flag).expanduser()
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "dspark-lsp"
    return Path.home() / ".cache" / "dspark-lsp"


def models_dir(root: Path) -> Path:
    return root / "models"


def model_dir(root: Path, name: str) -> Path:
    """The directory a prepared model called ``name`` lives in (it may not exist)."""
    return models_dir(root) / name


def gguf_dir(root: Path) -> Path:
    return root / "gguf"


@dataclass
class Manifest:
    """What ``dspark-model.json`` records about a prepared model."""

    name: str
    source_sha256: str
    source_filename: str
    source_size_bytes: int
    files: dict[str, int] = field(default_factory=dict)  # relative path -> size in bytes
    created: str = ""
    version: int = MANIFEST_VERSION

    @property
    def prepared_bytes(self) -> int:
        return sum(self.files.values())


def write_manifest(directory: Path, manifest: Manifest) -> Path:
    """Write the manifest atomically (temp file + rename) so a crash never leaves half a manifest."""
    if not manifest.created:
        manifest.created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    path = directory / MANIFEST_NAME
    tmp = directory / (MANIFEST_NAME + PARTIAL_SUFFIX)
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(asdict(manifest), fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def read_manifest(directory: Path) -> Manifest | None:
    """The manifest in ``directory``, or None when it is missing or unreadable."""
    try:
        raw = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
        files = {str(k): int(v) for k, v in dict(raw["files"]).items()}
        return Manifest(
            name=str(raw["name"]),
            source_sha256=str(raw["source_sha256"]),
            source_filename=str(raw["source_filename"]),
            source_size_bytes=int(raw["source_size_bytes"]),
            files=files,
            created=str(raw.get("created", "")),
            version=int(raw.get("version", 0)),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def not_ready_reason(directory: Path, name: str, sha256: str | None = None) -> str | None:
    """Why ``directory`` is not a usable prepared model (None when it is ready).

    Checks are cheap (stat only): the manifest parses, names this model (and this source checksum when
    given), and every file it lists exists with the recorded size.
    """
    if not directory.is_dir():
        return "not prepared"
    manifest = read_manifest(directory)
    if manifest is None:
        return "no valid manifest (an interrupted prepare?)"
    if manifest.name != name:
        return f"manifest names {manifest.name!r}"
    if sha256 is not None and manifest.source_sha256 != sha256:
        return "prepared from a different source file"
    if not manifest.files:
        return "manifest lists no files"
    for rel, size in manifest.files.items():
        path = directory / rel
        try:
            actual = path.stat().st_size
        except OSError:
            return f"missing file {rel}"
        if actual != size:
            return f"file {rel} has {actual} bytes, expected {size}"
    return None


def is_ready(directory: Path, name: str, sha256: str | None = None) -> bool:
    return not_ready_reason(directory, name, sha256) is None


def list_files(directory: Path) -> dict[str, int]:
    """Relative path -> size of every regular file under ``directory`` (for the manifest)."""
    out: dict[str, int] = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            out[path.relative_to(directory).as_posix()] = path.stat().st_size
    return out


def dir_size(directory: Path) -> int:
    """Bytes on disk under ``directory`` (0 when it does not exist)."""
    if not directory.is_dir():
        return 0
    return sum(list_files(directory).values())


def stale_paths(root: Path) -> list[Path]:
    """Leftovers of interrupted runs: temp save dirs and ``*.partial`` joins."""
    found: list[Path] = []
    mdir = models_dir(root)
    if mdir.is_dir():
        found += [p for p in mdir.iterdir() if p.name.startswith(".") and TMP_MARKER in p.name]
    gdir = gguf_dir(root)
    if gdir.is_dir():
        found += [p for p in gdir.iterdir() if p.name.endswith(PARTIAL_SUFFIX)]
    return sorted(found)


def kept_gguf(root: Path, filename: str, size_bytes: int) -> Path | None:
    """The verified GGUF kept by ``models prepare`` (None when absent or not its recorded size: a file cut
    short is never loaded; its sha256 was checked when it was joined)."""
    path = gguf_dir(root) / filename
    try:
        return path if path.is_file() and path.stat().st_size == size_bytes else None
    except OSError:
        return None


def human_size(n: int) -> str:
    """1536 -> '1.5 KiB'; for tables, not for parsing."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")

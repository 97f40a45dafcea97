"""The repository-level set's packages: the manifest, and fetching them into a cache, checked.

The manifest (``bench/repo/manifest.json``) names each package by registry and exact version with the
sha256 of its archive, so the set's source text is fixed: a registry that served other bytes is an error,
not a silently different set. The archives come through the registries' ordinary clients (``pip
download``, ``npm pack``, ``apt-get download``), are checked, then unpacked with members that would land
outside the cache refused. Package sources are never committed; only the manifest and the holes are.

Layout of the cache (default ``<user cache>/dspark-lsp/repo-eval``)::

    archives/<archive file>          the download, as the registry served it
    src/<archive file stem>/<...>    its unpacked tree; ``Package.root`` is a folder inside it
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dspark_lsp.errors import UserError

REGISTRIES = ("pypi", "npm", "debian")
LANGUAGES = ("python", "typescript", "go")
DONE_MARK = ".unpacked"


@dataclass(frozen=True)
class Package:
    """One package of the set, as the manifest records it.

    ``root`` is the workspace folder inside the unpacked archive (what an editor would open: paths in
    the holes and in the prompt are relative to it); ``sources`` the folders under it whose files give
    holes; ``repo`` the short name the prompt's repository header carries."""

    name: str
    version: str
    registry: str
    language: str
    archive: str
    sha256: str
    root: str
    repo: str
    sources: tuple[str, ...] = (".",)
    module: str = ""  # Go: the module path, to tell the module's own imports from other modules'

    def problems(self) -> list[str]:
        out = []
        if self.registry not in REGISTRIES:
            out.append(f"{self.name}: registry {self.registry!r} is not one of {', '.join(REGISTRIES)}")
        if self.language not in LANGUAGES:
            out.append(f"{self.name}: language {self.language!r} is not one of {', '.join(LANGUAGES)}")
        if len(self.sha256) != 64 or any(c not in "0123456789abcdef" for c in self.sha256):
            out.append(f"{self.name}: sha256 must be 64 lowercase hex digits")
        for rel in (self.root, self.archive, *self.sources):
            if rel.startswith("/") or ".." in Path(rel).parts:
                out.append(f"{self.name}: path {rel!r} must stay inside the archive")
        if self.language == "go" and not self.module:
            out.append(f"{self.name}: a Go package needs its module path")
        return out


@dataclass(frozen=True)
class Manifest:
    packages: tuple[Package, ...]
    path: Path = field(default=Path("."))

    def for_language(self, language: str) -> list[Package]:
        return [p for p in self.packages if p.language == language]


def load_manifest(path: Path) -> Manifest:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = data["packages"]
        packages = tuple(
            Package(**{**e, "sources": tuple(e.get("sources", ["."]))}) for e in entries
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a repository-set manifest ({exc})") from exc
    errs = [msg for p in packages for msg in p.problems()]
    if errs:
        raise UserError(f"{path}: " + "; ".join(errs))
    return Manifest(packages, path)


def default_cache() -> Path:
    from dspark_lsp.models.cache import cache_root

    return cache_root(None) / "repo-eval"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download_command(pkg: Package, dest: Path) -> list[str]:
    """The registry's own client, asked for exactly this version, writing into ``dest``."""
    if pkg.registry == "pypi":
        import sys

        return [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                "-d", str(dest), f"{pkg.name}=={pkg.version}"]  # fmt: skip
    if pkg.registry == "npm":
        return ["npm", "pack", "--silent", "--pack-destination", str(dest), f"{pkg.name}@{pkg.version}"]
    return ["apt-get", "download", f"{pkg.name}={pkg.version}"]  # writes into its working directory


Runner = Callable[[list[str], Path], None]


def _run_client(cmd: list[str], cwd: Path) -> None:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"{cmd[0]}: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"{' '.join(cmd[:3])} ... failed: {tail[0]}")


def fetch_archive(pkg: Package, cache: Path, run: Runner = _run_client) -> Path:
    """The package's archive in the cache, downloaded when absent; its sha256 checked either way."""
    archives = cache / "archives"
    archives.mkdir(parents=True, exist_ok=True)
    path = archives / pkg.archive
    if not path.is_file():
        run(download_command(pkg, archives), archives)
        if not path.is_file():
            raise UserError(f"{pkg.name} {pkg.version}: the client wrote no {pkg.archive}")
    got = sha256_of(path)
    if got != pkg.sha256:
        raise UserError(
            f"{pkg.name} {pkg.version}: {path} has sha256 {got}, the manifest says {pkg.sha256} "
            "(delete it to download again)"
        )
    return path


def _safe_members(tar: tarfile.TarFile, dest: Path) -> list[tarfile.TarInfo]:
    """Regular files and folders only, each landing under ``dest`` (no links, devices, ``..``)."""
    out = []
    root = dest.resolve()
    for m in tar.getmembers():
        if not (m.isfile() or m.isdir()):
            continue
        target = (dest / m.name).resolve()
        if target != root and root not in target.parents:
            raise UserError(f"archive member {m.name!r} would land outside {dest}")
        out.append(m)
    return out


def _deb_data(blob: bytes) -> bytes:
    """The ``data.tar.*`` member of a Debian package (an ``ar`` archive: 8-byte magic, 60-byte headers)."""
    if not blob.startswith(b"!<arch>\n"):
        raise UserError("not a Debian package (no ar magic)")
    pos = 8
    while pos + 60 <= len(blob):
        header = blob[pos : pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        body = blob[pos + 60 : pos + 60 + size]
        if name.startswith("data.tar"):
            return body
        pos += 60 + size + (size & 1)  # members are padded to an even offset
    raise UserError("Debian package without a data.tar member")


def unpack_dir(pkg: Package, cache: Path) -> Path:
    return cache / "src" / pkg.archive.split(".tar")[0].removesuffix(".tgz").removesuffix(".deb")


def unpack(pkg: Package, archive: Path, cache: Path) -> Path:
    """The archive's tree under ``cache/src`` (unpacked once; a half-done unpack is redone)."""
    dest = unpack_dir(pkg, cache)
    if (dest / DONE_MARK).is_file():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    if pkg.registry == "debian":
        stream = io.BytesIO(_deb_data(archive.read_bytes()))
        tar = tarfile.open(fileobj=stream, mode="r:*")
    else:
        tar = tarfile.open(archive, mode="r:*")
    with tar:
        for member in _safe_members(tar, dest):
            tar.extract(member, dest, set_attrs=False, filter="data")
    (dest / DONE_MARK).write_text(pkg.sha256, encoding="utf-8")
    return dest


def package_root(pkg: Package, cache: Path) -> Path:
    """Where a fetched package's workspace folder is (UserError when it was not fetched)."""
    base = unpack_dir(pkg, cache)
    if not (base / DONE_MARK).is_file():
        raise UserError(f"{pkg.name} {pkg.version} is not fetched into {cache} (run the fetch step first)")
    root = base / pkg.root
    if not root.is_dir():
        raise UserError(f"{pkg.name} {pkg.version}: no folder {pkg.root} in its archive")
    return root


def fetch_all(manifest: Manifest, cache: Path, log: Callable[[str], None], run: Runner = _run_client) -> None:
    for pkg in manifest.packages:
        archive = fetch_archive(pkg, cache, run)
        unpack(pkg, archive, cache)
        log(f"{pkg.registry} {pkg.name} {pkg.version}: sha256 ok, in {package_root(pkg, cache)}")

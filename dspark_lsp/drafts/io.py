"""Saving, loading and finding trained drafts: ``model.safetensors`` + a config + ``vocab.json``.

Both drafts use this one format; the config's file name tells them apart: ``draft_config.json`` for the
token draft (drafts/token), ``feat_config.json`` for the feature draft (drafts/feature). Shipped drafts
live in the package (``dspark_lsp/drafts/<name>/``) so loading needs no network.

An export is atomic (:func:`atomic_export`): the files are written into a temp directory next to the
target, fsynced, and renamed into place, so a kill -9 mid-export leaves the previous export (or none),
never a half-written one under the real name. A damaged directory that gets loaded anyway (copied by
hand, a disk fault) is refused with a one-line ModelError naming the file, not a SafetensorError.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from dspark_lsp.drafts.feature.config import FeatDraftConfig
from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.token.config import DraftNetConfig
from dspark_lsp.drafts.token.model import DraftNet
from dspark_lsp.drafts.vocab import DraftVocab
from dspark_lsp.errors import ModelError, UserError

WEIGHTS, VOCAB = "model.safetensors", "vocab.json"
CONFIG = "draft_config.json"  # the token draft's
FEAT_CONFIG = "feat_config.json"  # the feature draft's
DEFAULT_DRAFT = "dspark-draft-qwc05"

M = TypeVar("M", bound=nn.Module)


_TMP_TAG, _OLD_TAG = ".tmp-", ".old-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _side_dirs(out: Path, tag: str) -> list[tuple[Path, int]]:
    """``.<name>.tmp-<pid>-*`` / ``.<name>.old-<pid>-*`` next to ``out`` with the pid that made them."""
    found = []
    for p in out.parent.glob(f".{out.name}{tag}*"):
        head = p.name[len(f".{out.name}{tag}") :].split("-", 1)[0]
        if p.is_dir() and head.isdigit():
            found.append((p, int(head)))
    return found


def clean_stale_exports(out: Path) -> None:
    """Remove what a killed export left next to ``out``: its temp dir (never loaded: another name), and
    the previous export it had moved aside, which goes back into place when the rename never happened."""
    if not out.parent.is_dir():
        return
    for tmp, pid in _side_dirs(out, _TMP_TAG):
        if pid == os.getpid() or not _pid_alive(pid):
            shutil.rmtree(tmp, ignore_errors=True)
    for old, pid in _side_dirs(out, _OLD_TAG):
        if pid != os.getpid() and _pid_alive(pid):
            continue  # a live export is between its two renames
        if not out.exists():
            os.replace(old, out)  # killed between the renames: the old export was whole, restore it
        else:
            shutil.rmtree(old, ignore_errors=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_export(out: Path) -> Iterator[Path]:
    """Yield a temp directory to write an export into; on success it replaces ``out`` in one rename.

    The temp dir sits next to ``out`` (same file system, so the rename is atomic) and is named after this
    process, so a later export can tell a dead writer's leftovers from a live one's. Files and the
    directories are fsynced before the rename: after a power cut the new name never points at data
    that is not on disk. On any error (or KeyboardInterrupt) the temp dir is removed and ``out`` is
    untouched."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_exports(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}{_TMP_TAG}{os.getpid()}-", dir=out.parent))
    try:
        yield tmp
        for f in tmp.iterdir():
            _fsync(f)
        _fsync(tmp)
        old: Path | None = None
        if out.exists():
            # os.replace cannot replace a non-empty directory: move the old export aside first.
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}{_OLD_TAG}{os.getpid()}-", dir=out.parent))
            os.replace(out, old)
        os.replace(tmp, out)
        _fsync(out.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_weights(path: Path, what: str) -> dict[str, torch.Tensor]:
    """A safetensors file, or a one-line ModelError saying it is damaged and what to do about it."""
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelError(
            f"{what} weights {path} are damaged or truncated ({_first_line(exc)}); "
            f"export the draft again or delete {path.parent}"
        ) from exc


def read_json(path: Path, what: str, check: Callable[[Any], Any] | None = None) -> Any:
    """A JSON file of a draft directory, or a one-line ModelError naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return check(data) if check is not None else data
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ModelError(
            f"{what} file {path} is damaged ({_first_line(exc)}); export the draft again or delete {path.parent}"
        ) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _save(out: Path, model: DraftNet | FeatDraft, config: str, vocab: DraftVocab, meta: dict[str, object],
          dtype: torch.dtype) -> None:
    # Tied embeddings (token draft): store the shared matrix once (safetensors refuses aliased tensors anyway).
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()}
    with atomic_export(out) as tmp:
        save_file(state, str(tmp / WEIGHTS), metadata={"format": "pt"})
        (tmp / config).write_text(model.cfg.to_json())
        (tmp / VOCAB).write_text(json.dumps({"target_ids": vocab.target_ids.tolist(),
                                             "target_vocab_size": vocab.target_vocab_size, **meta}))


def _split_vocab(data: object) -> tuple[DraftVocab, dict[str, object]]:
    """vocab.json holds the id map and the export's metadata (step, unroll ...) side by side."""
    if not isinstance(data, dict):
        raise TypeError(f"not an object but {type(data).__name__}")
    meta = dict(data)
    return DraftVocab(meta.pop("target_ids"), int(meta.pop("target_vocab_size"))), meta


def _load(d: Path, config: str, what: str, parse: Callable[[Any], Any], build: Callable[[Any], M],
          dtype: torch.dtype) -> tuple[M, DraftVocab, dict[str, object]]:
    """(model, vocab, the export's metadata) of the ``what`` ("draft", "feature draft") in ``d``."""
    for name in (WEIGHTS, config, VOCAB):
        if not (d / name).is_file():
            raise ModelError(f"{what} directory {d} lacks {name}")
    cfg = read_json(d / config, f"{what} config", parse)
    vocab, meta = read_json(d / VOCAB, f"{what} vocab", _split_vocab)
    if vocab.size != cfg.vocab_size:
        raise ModelError(f"{what} {d}: vocab.json has {vocab.size} ids, the config says {cfg.vocab_size}")
    model = build(cfg)
    weights = load_weights(d / WEIGHTS, what)
    try:
        model.load_state_dict({k: t.to(dtype) for k, t in weights.items()})
    except RuntimeError as exc:
        raise ModelError(f"{what} weights in {d} do not fit its config: {exc}") from exc
    return model.to(dtype).eval(), vocab, meta


def save_draft(
    out: Path, model: DraftNet, vocab: DraftVocab, meta: dict[str, object], dtype: torch.dtype = torch.float16
) -> None:
    _save(out, model, CONFIG, vocab, meta, dtype)


def save_feat_draft(out: Path, model: FeatDraft, vocab: DraftVocab, meta: dict[str, object],
                    dtype: torch.dtype = torch.float16) -> None:
    _save(out, model, FEAT_CONFIG, vocab, meta, dtype)


def is_feat_draft_dir(path: Path) -> bool:
    return (path / FEAT_CONFIG).is_file()


def _is_draft_dir(path: Path) -> bool:
    return (path / CONFIG).is_file() or is_feat_draft_dir(path)


def shipped_drafts() -> list[str]:
    root = resources.files("dspark_lsp") / "drafts"
    # A feature draft ships in the same folder; the folder's Python packages (token/, feature/) are no drafts.
    return sorted(p.name for p in root.iterdir() if p.is_dir() and _is_draft_dir(Path(str(p))))


def resolve_draft_dir(path_or_name: str | Path) -> Path:
    p = Path(path_or_name).expanduser()
    if p.is_dir():
        return p
    shipped = Path(str(resources.files("dspark_lsp") / "drafts" / str(path_or_name)))
    if shipped.is_dir() and _is_draft_dir(shipped):
        return shipped
    raise UserError(
        f"no draft model {str(path_or_name)!r}: not a directory, and the shipped drafts are "
        f"{', '.join(shipped_drafts()) or 'none'}"
    )


def trained_draft_dir(spec: str) -> Path | None:
    """The directory of a shipped draft name or a draft directory; None for anything else (an HF id,
    a plain model directory)."""
    try:
        where = resolve_draft_dir(spec)
    except UserError:
        return None
    return where if _is_draft_dir(where) else None


def load_draft_net(path_or_name: str | Path, dtype: torch.dtype = torch.float32) -> tuple[DraftNet, DraftVocab]:
    model, vocab, _meta = _load(resolve_draft_dir(path_or_name), CONFIG, "draft", DraftNetConfig.from_dict,
                                DraftNet, dtype)
    return model, vocab


def load_feat_draft(d: Path, dtype: torch.dtype = torch.float32) -> tuple[FeatDraft, DraftVocab, dict[str, object]]:
    return _load(d, FEAT_CONFIG, "feature draft", FeatDraftConfig.from_dict, FeatDraft, dtype)

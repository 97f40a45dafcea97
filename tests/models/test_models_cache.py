"""Cache root resolution, the manifest, and when a prepared dir is (not) trusted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dspark_lsp.models import cache


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    monkeypatch.delenv(cache.ENV_CACHE_DIR, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_cache_root_precedence(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert cache.cache_root() == tmp_path / "home" / ".cache" / "dspark-lsp"
    clean_env.setenv("XDG_CACHE_HOME", "relative/ignored")  # XDG: relative paths are invalid
    assert cache.cache_root() == tmp_path / "home" / ".cache" / "dspark-lsp"
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "xdg" / "dspark-lsp"
    clean_env.setenv(cache.ENV_CACHE_DIR, str(tmp_path / "env"))
    assert cache.cache_root() == tmp_path / "env"
    assert cache.cache_root(tmp_path / "flag") == tmp_path / "flag"
    assert cache.cache_root("~/c") == tmp_path / "home" / "c"
    assert cache.model_dir(tmp_path, "m") == tmp_path / "models" / "m"


def make_prepared(root: Path, name: str = "m", sha: str = "ab" * 32) -> Path:
    directory = cache.model_dir(root, name)
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    (directory / "sub").mkdir()
    (directory / "sub" / "w.bin").write_bytes(b"12345")
    cache.write_manifest(directory, cache.Manifest(name, sha, "m.gguf", 99, files=cache.list_files(directory)))
    return directory


def test_manifest_round_trip(tmp_path: Path) -> None:
    directory = make_prepared(tmp_path)
    manifest = cache.read_manifest(directory)
    assert manifest is not None
    assert manifest.files == {"config.json": 2, "sub/w.bin": 5}
    assert manifest.prepared_bytes == 7 and manifest.source_size_bytes == 99 and manifest.created
    assert not (directory / (cache.MANIFEST_NAME + cache.PARTIAL_SUFFIX)).exists()
    assert cache.is_ready(directory, "m", "ab" * 32)
    assert cache.dir_size(directory) == 7 + (directory / cache.MANIFEST_NAME).stat().st_size


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda d: (d / cache.MANIFEST_NAME).unlink(), "no valid manifest"),
        (lambda d: (d / cache.MANIFEST_NAME).write_text('{"name": "m"'), "no valid manifest"),
        (lambda d: (d / cache.MANIFEST_NAME).write_text("[1, 2]"), "no valid manifest"),
        (lambda d: (d / "sub" / "w.bin").unlink(), "missing file sub/w.bin"),
        (lambda d: (d / "sub" / "w.bin").write_bytes(b"12"), "file sub/w.bin has 2 bytes, expected 5"),
    ],
)
def test_damaged_dirs_are_not_ready(tmp_path: Path, damage: Callable[[Path], object], reason: str) -> None:
    directory = make_prepared(tmp_path)
    damage(directory)
    got = cache.not_ready_reason(directory, "m")
    assert got is not None and got.startswith(reason)
    assert not cache.is_ready(directory, "m")


def test_manifest_of_another_model_or_source(tmp_path: Path) -> None:
    directory = make_prepared(tmp_path)
    assert cache.not_ready_reason(directory, "other") == "manifest names 'm'"
    assert cache.not_ready_reason(directory, "m", "cd" * 32) == "prepared from a different source file"
    assert cache.not_ready_reason(tmp_path / "nothing", "m") == "not prepared"
    raw = json.loads((directory / cache.MANIFEST_NAME).read_text())
    raw["files"] = {}
    (directory / cache.MANIFEST_NAME).write_text(json.dumps(raw))
    assert cache.not_ready_reason(directory, "m") == "manifest lists no files"


def test_stale_paths(tmp_path: Path) -> None:
    make_prepared(tmp_path)
    (tmp_path / "models" / ".m.tmp-x1").mkdir()
    (tmp_path / "models" / ".m.lock").write_text("")
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "m.gguf.partial").write_bytes(b"")
    (tmp_path / "gguf" / "m.gguf").write_bytes(b"")
    assert cache.stale_paths(tmp_path) == [tmp_path / "gguf" / "m.gguf.partial", tmp_path / "models" / ".m.tmp-x1"]
    assert cache.stale_paths(tmp_path / "empty") == []


def test_human_size() -> None:
    assert cache.human_size(0) == "0 B"
    assert cache.human_size(1536) == "1.5 KiB"
    assert cache.human_size(491_400_064) == "468.6 MiB"
    assert cache.human_size(5 * 1024**4) == "5120.0 GiB"

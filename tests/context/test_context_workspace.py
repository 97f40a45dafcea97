"""Reading the workspace safely: a bounded background index, lookups, and reads that skip (with one log
line) what is outside the folders, linked out, looping, binary, huge, unreadable, vanished or changing."""

from __future__ import annotations

import logging
import os
import shutil
import time
import tracemalloc
from pathlib import Path

import pytest

from dspark_lsp.context import workspace as ws_mod
from dspark_lsp.context.workspace import Workspace, WorkspaceLimits

LOGGER = "dspark_lsp.context.workspace"


def write(root: Path, rel: str, text: str | bytes = "x = 1\n") -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


def built(root: Path | list[Path], **limits: object) -> Workspace:
    ws = Workspace(root if isinstance(root, list) else [root], WorkspaceLimits(**limits))  # type: ignore[arg-type]
    ws.start()
    assert ws.wait(20)
    return ws


def skips(caplog: pytest.LogCaptureFixture, reason: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and f": {reason}" in r.getMessage()]


def test_index_lookups_and_relative_paths(tmp_path: Path) -> None:
    write(tmp_path, "pkg/__init__.py")
    util = write(tmp_path, "pkg/util.py")
    write(tmp_path, "lib/util.py")
    write(tmp_path, "node_modules/dep/util.py")  # vendored: not indexed
    write(tmp_path, "pkg/__pycache__/util.py")
    ws = built(tmp_path)
    assert ws.ready and not ws.truncated
    assert sorted(ws.relative(p) for p in ws.files_named("util.py")) == ["lib/util.py", "pkg/util.py"]
    assert ws.find(["pkg/util.py", "nope/util.py", "pkg/./util.py"]) == [util]
    assert sorted(p.name for p in ws.files_in(tmp_path / "pkg")) == ["__init__.py", "util.py"]
    assert ws.file_count == 3 and len(list(ws.files())) == 3
    assert ws.relative(util) == "pkg/util.py"
    assert ws.relative("/elsewhere/x/thing.py") == "thing.py"  # outside: just its name
    assert ws.exists(util) and not ws.exists(tmp_path / "pkg") and not ws.exists(tmp_path / "missing.py")


def test_root_gitignore_names_are_skipped(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "# generated\ngen/\n*.log\n/cache\n!keep.log\nsrc/deep/path\n")
    write(tmp_path, "gen/a.py")
    write(tmp_path, "x.log")
    write(tmp_path, "cache/b.py")
    write(tmp_path, "src/deep/path/c.py")  # a pattern with a path inside: not handled, so indexed
    write(tmp_path, "src/main.py")
    ws = built(tmp_path)
    assert sorted(ws.relative(p) for p in ws.files()) == [".gitignore", "src/deep/path/c.py", "src/main.py"]


def test_file_cap_bounds_the_index(tmp_path: Path) -> None:
    for i in range(300):
        (tmp_path / f"f{i}.py").touch()
    ws = built(tmp_path, max_files=100)
    assert ws.file_count == 100 and ws.truncated


def test_entry_cap_bounds_a_tree_of_skipped_folders(tmp_path: Path) -> None:
    for i in range(200):
        (tmp_path / f"d{i}" / "node_modules").mkdir(parents=True)
    ws = built(tmp_path, max_entries=50)
    assert ws.truncated and ws.file_count == 0


def test_time_cap_stops_the_walk(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"f{i}.py").touch()
    began = time.monotonic()
    ws = built(tmp_path, index_seconds=0.0)
    assert time.monotonic() - began < 5 and ws.truncated and ws.file_count < 50


@pytest.mark.slow
def test_hundred_thousand_files_bounded_in_time_and_memory(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for d in range(100):
        folder = tree / f"d{d:03}"
        folder.mkdir(parents=True)
        for f in range(1000):
            os.close(os.open(folder / f"m{f}.py", os.O_CREAT | os.O_WRONLY))
    tracemalloc.start()
    began = time.monotonic()
    ws = built(tree)  # defaults: 50,000 files, 10 s
    took = time.monotonic() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    shutil.rmtree(tmp_path / "tree")  # pytest keeps the last runs' tmp folders: not 100k files each
    assert ws.truncated and ws.file_count == 50_000
    assert took < 11.0
    assert peak < 64 * 1024 * 1024, peak


def test_lookups_before_start_build_the_index(tmp_path: Path) -> None:
    write(tmp_path, "a/b.py")
    ws = Workspace([tmp_path])  # a batch caller never calls start()
    assert [ws.relative(p) for p in ws.files_named("b.py")] == ["a/b.py"]
    assert ws.ready


def test_no_roots_reads_nothing(tmp_path: Path) -> None:
    f = write(tmp_path, "a.py")
    ws = Workspace([])
    ws.start()
    assert ws.ready and ws.read(f) is None and ws.files_named("a.py") == [] and not ws.exists(f)
    assert ws.find(["a.py"]) == [] and list(ws.files()) == []


def test_links_out_and_link_loops(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    secret = write(outside, "secret.py", "TOKEN = 1\n")
    write(outside, "sub/other.py")
    inner = write(root, "pkg/real.py", "A = 1\n")
    (root / "pkg" / "out.py").symlink_to(secret)
    (root / "pkg" / "outdir").symlink_to(outside / "sub", target_is_directory=True)
    (root / "pkg" / "loop").symlink_to(root / "pkg", target_is_directory=True)
    (root / "pkg" / "self_loop.py").symlink_to(root / "pkg" / "self_loop.py")
    (root / "pkg" / "alias.py").symlink_to(inner)  # a link that stays inside is fine
    caplog.set_level(logging.INFO, LOGGER)
    ws = built(root)
    assert sorted(ws.relative(p) for p in ws.files()) == ["pkg/alias.py", "pkg/real.py"]
    assert ws.read(root / "pkg" / "out.py") is None
    assert ws.read(root / "pkg" / "outdir" / "other.py") is None
    assert ws.read(root / "pkg" / "self_loop.py") is None
    assert ws.read(secret) is None
    assert ws.read(root / "pkg" / "alias.py") == "A = 1\n"
    assert ws.read(root / "pkg" / "loop" / "real.py") == "A = 1\n"  # resolves inside the root
    assert len(skips(caplog, "outside the workspace")) == 3


def test_binary_huge_and_invalid_utf8(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    binary = write(tmp_path, "blob.py", b"abc\0def")
    bad = write(tmp_path, "bad.py", b"name = '\xff\xfe'\n")
    huge = tmp_path / "huge.py"
    with open(huge, "wb") as f:
        f.truncate(50 * 1024 * 1024)  # 50 MB (sparse)
    ws = built(tmp_path)
    assert ws.read(binary) is None
    assert ws.read(bad) == "name = '\ufffd\ufffd'\n"
    began = time.monotonic()
    assert ws.read(huge) is None
    assert time.monotonic() - began < 0.05  # refused from its size, never read
    assert ws.read(binary) is None and ws.read(huge) is None
    assert len(skips(caplog, "binary")) == 1  # once per path, however often asked
    assert len(skips(caplog, "larger than")) == 1


def test_unreadable_folder_and_file(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, LOGGER)
    write(tmp_path, "ok/a.py")
    write(tmp_path, "locked/b.py")
    secret = write(tmp_path, "ok/secret.py")
    real_scandir, real_open = os.scandir, os.open
    locked = str(tmp_path / "locked")

    def scandir(path: str):  # type: ignore[no-untyped-def]
        if str(path) == locked:
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    def os_open(path: str, flags: int, *a: object):  # type: ignore[no-untyped-def]
        if str(path).endswith("secret.py"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *a)

    monkeypatch.setattr(ws_mod.os, "scandir", scandir)
    monkeypatch.setattr(ws_mod.os, "open", os_open)
    ws = built(tmp_path)
    assert sorted(ws.relative(p) for p in ws.files()) == ["ok/a.py", "ok/secret.py"]
    assert skips(caplog, "unreadable folder")
    assert ws.read(secret) is None and skips(caplog, "unreadable (Permission denied)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 folder anyway")
def test_mode_000_folder_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path, "locked/b.py")
    write(tmp_path, "a.py")
    (tmp_path / "locked").chmod(0)
    try:
        caplog.set_level(logging.INFO, LOGGER)
        ws = built(tmp_path)
        assert [ws.relative(p) for p in ws.files()] == ["a.py"] and skips(caplog, "unreadable folder")
    finally:
        (tmp_path / "locked").chmod(0o755)


def test_vanished_and_changing_files(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, LOGGER)
    gone = write(tmp_path, "gone.py")
    moving = write(tmp_path, "moving.py", "v = 1\n")
    ws = built(tmp_path)
    gone.unlink()
    assert ws.read(gone) is None and skips(caplog, "vanished")
    real_fstat = os.fstat
    calls = {"n": 0}

    def fstat(fd: int) -> os.stat_result:  # every second stat sees a newer mtime: always changing
        st = real_fstat(fd)
        calls["n"] += 1
        if calls["n"] % 2 == 0:
            fields = list(st)
            fields[8] += 1  # st_mtime (the integer field); st_mtime_ns follows from the float fields
            return os.stat_result(fields, {"st_mtime_ns": st.st_mtime_ns + calls["n"]})  # type: ignore[call-overload]
        return st

    monkeypatch.setattr(ws_mod.os, "fstat", fstat)
    assert ws.read(moving) is None and skips(caplog, "changed while being read")
    monkeypatch.setattr(ws_mod.os, "fstat", real_fstat)
    assert ws.read(moving) == "v = 1\n"


def test_watched_file_events_keep_the_index_current(tmp_path: Path) -> None:
    write(tmp_path, "a.py")
    ws = built(tmp_path)
    new = write(tmp_path, "pkg/new.py")
    ws.update(new, "created")
    assert ws.files_named("new.py") == [new]
    ws.update(new, "changed")
    assert ws.files_named("new.py") == [new]  # no duplicate
    write(tmp_path, "node_modules/x/new.py")
    ws.update(tmp_path / "node_modules/x/new.py", "created")  # vendored: stays out
    ws.update(tmp_path / "../elsewhere.py", "created")  # outside: stays out
    assert ws.files_named("new.py") == [new] and ws.files_named("elsewhere.py") == []
    write(tmp_path, "pkg/other.py")
    ws.update(tmp_path / "pkg/other.py", "created")
    ws.update(tmp_path / "pkg", "deleted")  # a deleted folder drops its files
    assert ws.files_named("new.py") == [] and ws.files_named("other.py") == []
    assert [p.name for p in ws.files()] == ["a.py"]


def test_events_during_the_walk_are_applied_after_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "a.py")
    late = write(tmp_path, "late.py")
    ws = Workspace([tmp_path])
    real_walk = ws._walk

    def slow_walk(*args: object) -> bool:
        ws.update(late, "deleted")  # arrives while the walk runs
        return real_walk(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(ws, "_walk", slow_walk)
    ws.start()
    assert ws.wait(10)
    assert ws.files_named("late.py") == [] and [p.name for p in ws.files()] == ["a.py"]


def test_close_stops_and_empties(tmp_path: Path) -> None:
    write(tmp_path, "a.py")
    ws = built(tmp_path)
    ws.close()
    assert ws.files_named("a.py") == [] and ws.ready


def test_a_folder_of_many_files_indexes_in_linear_time(tmp_path: Path) -> None:
    for i in range(12_000):
        os.close(os.open(tmp_path / f"m{i}.py", os.O_CREAT | os.O_WRONLY))
    began = time.monotonic()
    ws = built(tmp_path)
    took = time.monotonic() - began
    assert ws.file_count == 12_000 and not ws.truncated
    assert took < 1.0, took  # ~0.02 s; a list per folder (quadratic) took seconds


def test_exists_answers_from_the_complete_index(tmp_path: Path) -> None:
    write(tmp_path, "a.py")
    ws = built(tmp_path)
    late = write(tmp_path, "late.py")  # created with no watched-file event yet
    assert ws.exists(tmp_path / "a.py") and not ws.exists(late)  # no disk access for a full index
    ws.update(late, "created")
    assert ws.exists(late)
    partial = built(tmp_path, max_files=1)  # a partial index falls back to the disk
    assert partial.truncated and partial.exists(tmp_path / "a.py") and partial.exists(late)

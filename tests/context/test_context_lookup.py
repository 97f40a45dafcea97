"""Import resolution's file view: open documents (unsaved text) over the workspace; no folder, no disk."""

from __future__ import annotations

from pathlib import Path

from dspark_lsp.context.lookup import MAX_OPEN_CHARS, OpenDocumentsLookup
from dspark_lsp.context.workspace import Workspace


def test_open_text_wins_and_no_folder_reads_nothing(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    disk = tmp_path / "pkg" / "util.py"
    disk.write_text("def add(a, b):\n    return a + b\n", encoding="utf-8")
    other = tmp_path / "pkg" / "other.py"
    other.write_text("X = 1\n", encoding="utf-8")
    unsaved = "def add(a, b, c):\n    return a + b + c\n"
    ws = Workspace([tmp_path])
    ws.start()
    assert ws.wait(10)
    both = OpenDocumentsLookup({disk: unsaved}, ws, [tmp_path])
    assert both.read(disk) == unsaved
    assert both.read(other) == "X = 1\n"
    assert both.relative(other) == "pkg/other.py"
    assert sorted(p.name for p in both.files_named("util.py")) == ["util.py"]
    assert sorted(p.name for p in both.files_in(tmp_path / "pkg")) == ["other.py", "util.py"]
    assert [p.name for p in both.find(["pkg/util.py", "pkg/other.py"])] == ["util.py", "other.py"]
    alone = OpenDocumentsLookup({disk: unsaved}, None, [])
    assert alone.read(disk) == unsaved
    assert alone.read(other) is None and not alone.exists(other)  # not open, no workspace: never read
    assert alone.relative(disk) == "util.py"
    ws.close()


def test_a_huge_open_document_is_not_parsed(tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    lookup = OpenDocumentsLookup({big: "x = 1\n" * (MAX_OPEN_CHARS // 6 + 10)}, None, [tmp_path])
    assert lookup.exists(big) and lookup.read(big) is None

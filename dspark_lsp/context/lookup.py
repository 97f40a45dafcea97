"""Files for import resolution: the editor's open documents first, then the workspace folders.

An open document's text is what the user sees (maybe unsaved), so it wins over the file on disk. Without
workspace folders only open documents are known: nothing is read from disk.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# An open document larger than this is not parsed for definitions (a generated or data file; parsing it
# on every completion would cost more than its outline could give).
MAX_OPEN_CHARS = 512 * 1024


class OpenDocumentsLookup:
    def __init__(self, open_docs: Mapping[Path, str], workspace: Any | None, roots: Sequence[Path] = ()) -> None:
        self._open = {self._key(p): t for p, t in open_docs.items()}
        self._workspace = workspace
        self._roots = [Path(r) for r in roots]

    @property
    def roots(self) -> list[Path]:
        """The workspace folders (where a file not saved yet would be)."""
        return list(self._roots)

    @staticmethod
    def _key(path: Path | str) -> Path:
        return Path(path).absolute()

    def exists(self, path: Path | str) -> bool:
        if self._key(path) in self._open:
            return True
        return bool(self._workspace is not None and self._workspace.exists(path))

    def read(self, path: Path | str) -> str | None:
        text = self._open.get(self._key(path))
        if text is not None:
            return text if len(text) <= MAX_OPEN_CHARS else None
        return self._workspace.read(path) if self._workspace is not None else None

    def relative(self, path: Path | str) -> str:
        if self._workspace is not None:
            return str(self._workspace.relative(path))
        p = self._key(path)
        for root in self._roots:
            if p.is_relative_to(root):
                return p.relative_to(root).as_posix()
        return p.name

    def files_named(self, name: str) -> list[Path]:
        found = [p for p in self._open if p.name == name]
        if self._workspace is not None:
            found += [p for p in self._workspace.files_named(name) if self._key(p) not in self._open]
        return found

    def files_in(self, folder: Path | str) -> list[Path]:
        key = self._key(folder)
        found = [p for p in self._open if p.parent == key]
        if self._workspace is not None:
            found += [p for p in self._workspace.files_in(folder) if self._key(p) not in self._open]
        return found

    def find(self, rel_candidates: Iterable[str]) -> list[Path]:
        """Files at these root-relative paths: open documents first, then the workspace index."""
        wanted = list(rel_candidates)
        found = [self._key(Path(root, *rel.split("/"))) for rel in wanted for root in self._roots]
        out = [p for p in found if p in self._open]
        if self._workspace is not None:
            out += [p for p in self._workspace.find(wanted) if self._key(p) not in out]
        return out

    def contains(self, path: Path | str) -> bool:
        return self._key(path) in self._open or bool(self._workspace is not None and self._workspace.contains(path))

    def files(self) -> Iterable[Path]:
        yield from self._open
        if self._workspace is not None:
            yield from (p for p in self._workspace.files() if self._key(p) not in self._open)

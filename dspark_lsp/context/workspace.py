"""Reading the client's workspace folders safely, for import resolution and definitions.

Only files under a workspace folder are read: a path is resolved (links followed) and must land under a
resolved root, so a link leading out reads nothing. The index walk never follows a linked folder (no link
loop can hang it) and skips vendored, generated and ignored folders; it is bounded in files, in folder
entries visited and in time, and runs in a background daemon thread. Reads are capped in size, skip binary
files (a NUL byte) and decode invalid UTF-8 with replacement. Nothing here raises into the caller: a file
that cannot be read is ``None`` and one log line per path says why.

Without workspace folders nothing is read at all.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

ChangeKind = Literal["created", "changed", "deleted"]

# Folders that hold someone else's code, caches or build output: their files would crowd the index and
# resolve imports to copies the user does not edit.
DEFAULT_SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", "node_modules", ".venv", "venv", "env", "__pycache__", "dist", "build", "target",
    "vendor", "third_party", "site-packages", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".idea", ".vscode", ".next", ".cache", "bazel-out", ".gradle", "out",
})
# A file whose first bytes hold a NUL is binary (what git's own heuristic looks at).
BINARY_SNIFF_BYTES = 8192
MAX_PENDING_EVENTS = 10_000  # watched-file events queued while the walk runs
MAX_LINK_LOGS = 20  # links not followed, named one by one in the log up to this many per walk


@dataclass(frozen=True)
class WorkspaceLimits:
    max_files: int = 50_000  # files indexed across all roots; the walk stops there
    max_entries: int = 200_000  # folder entries looked at (files, folders, skipped ones): bounds the walk's time
    max_file_bytes: int = 512 * 1024  # larger files are never read (generated or data files)
    index_seconds: float = 10.0  # the walk stops after this long (a slow or network disk)
    skip_dirs: frozenset[str] = DEFAULT_SKIP_DIRS
    use_gitignore: bool = True  # the root .gitignore's simple name patterns are skipped too


def _gitignore_patterns(root: Path) -> tuple[str, ...]:
    """The root .gitignore's patterns that name entries without a path (``*.log``, ``tmp/``, ``/out``):
    the cheap part of gitignore that catches most generated folders. Negations and paths are ignored."""
    try:
        raw = (root / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    out: list[str] = []
    for line in raw.splitlines()[:1000]:
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        line = line.rstrip("/").removeprefix("/")
        if line and "/" not in line and line not in ("*", "**"):
            out.append(line)
    return tuple(out)


@dataclass
class _Index:
    """The file index: absolute path strings by file name and by folder (no Path objects: memory). A
    folder's names are a dict used as an ordered set: a folder of 50,000 files stays O(1) per file."""

    by_name: dict[str, list[str]] = field(default_factory=dict)
    by_dir: dict[str, dict[str, None]] = field(default_factory=dict)
    count: int = 0

    def add(self, path: str) -> None:
        folder, _, name = path.rpartition(os.sep)
        names = self.by_dir.setdefault(folder, {})
        if name in names:
            return
        names[name] = None
        self.by_name.setdefault(name, []).append(path)
        self.count += 1

    def remove(self, path: str) -> None:
        folder, _, name = path.rpartition(os.sep)
        names = self.by_dir.get(folder)
        if names is None or name not in names:
            return
        del names[name]
        self.by_name[name].remove(path)
        self.count -= 1


class _OnceLog:
    """Each (reason, path) logged once: a file skipped on every keystroke must not flood the log."""

    def __init__(self, limit: int = 10_000) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._limit = limit
        self._lock = threading.Lock()

    def __call__(self, reason: str, path: object) -> None:
        key = (reason, str(path))
        with self._lock:
            if key in self._seen or len(self._seen) >= self._limit:
                return
            self._seen.add(key)
        log.info("context: skipped %s: %s", path, reason)


class Workspace:
    """The files under the client's workspace folders: a bounded index and safe reads.

    ``start()`` builds the index in the background; lookups made before it finishes see what is indexed
    so far. A Workspace whose ``start()`` was never called builds its index on the first lookup (a
    batch caller, such as the repository evaluation)."""

    def __init__(self, roots: Sequence[str | Path], limits: WorkspaceLimits | None = None) -> None:
        self.limits = limits or WorkspaceLimits()
        self.roots = [Path(os.path.abspath(r)) for r in roots]
        self._real_roots = [Path(os.path.realpath(r)) for r in self.roots]
        self._prefixes = [str(r) for r in self.roots]
        self._index = _Index()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending: list[tuple[Path, ChangeKind]] = []  # watched-file events while the walk runs
        self._skip = _OnceLog()
        self.truncated = False  # the walk hit a cap: the index holds only part of the tree
        self.index_seconds = 0.0
        if not self.roots:
            self._done.set()

    # -- the index -------------------------------------------------------------------------------
    def start(self) -> None:
        """Build the index in a background daemon thread (once)."""
        with self._lock:
            if self._thread is not None or self._done.is_set():
                return
            self._thread = threading.Thread(target=self._build, name="dspark-workspace-index", daemon=True)
            self._thread.start()

    @property
    def ready(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the index; True once it is built."""
        return self._done.wait(timeout)

    def close(self) -> None:
        """Stop the walk (if running) and drop the index."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        with self._lock:
            self._index = _Index()
        self._done.set()

    def _ensure_index(self) -> None:
        if self._thread is None and not self._done.is_set():
            self.start()
            self.wait(self.limits.index_seconds + 1.0)

    def _build(self) -> None:
        began = time.monotonic()
        index = _Index()
        stats = {"links": 0, "unreadable": 0, "entries": 0}
        try:
            for root in self.roots:
                if not self._walk(root, index, stats, began):
                    self.truncated = True
                    break
        except Exception:  # the index is a bonus: a bug in the walk must not kill the server
            log.exception("context: indexing the workspace failed")
        self.index_seconds = time.monotonic() - began
        with self._lock:
            if not self._stop.is_set():
                self._index = index
                for path, kind in self._pending:
                    self._apply(path, kind)
            self._pending.clear()
        self._done.set()
        log.info("context: indexed %d files under %s in %.2f s%s (links not followed: %d, unreadable folders: %d)",
                 index.count, ", ".join(map(str, self.roots)), self.index_seconds,
                 " (stopped at a limit: partial index)" if self.truncated else "",
                 stats["links"], stats["unreadable"])  # fmt: skip

    def _walk(self, root: Path, index: _Index, stats: dict[str, int], began: float) -> bool:
        """Walk one root depth-first without following linked folders; False when a limit stopped it."""
        lim = self.limits
        ignore = _gitignore_patterns(root) if lim.use_gitignore else ()
        stack = [str(root)]
        while stack:
            folder = stack.pop()
            try:
                with os.scandir(folder) as it:
                    entries = list(it)
            except OSError as exc:
                stats["unreadable"] += 1
                self._skip(f"unreadable folder ({exc.strerror or exc})", folder)
                continue
            for entry in entries:
                stats["entries"] += 1
                if (index.count >= lim.max_files or stats["entries"] >= lim.max_entries
                        or time.monotonic() - began > lim.index_seconds or self._stop.is_set()):  # fmt: skip
                    return False
                name = entry.name
                if any(fnmatch.fnmatchcase(name, p) for p in ignore):
                    continue
                try:
                    if entry.is_symlink():
                        stats["links"] += 1
                        if entry.is_file() and self.contains(entry.path):  # a link to a file inside: fine
                            index.add(entry.path)
                        elif stats["links"] <= MAX_LINK_LOGS:
                            self._skip("a link not followed (a folder, a loop, or leading out)", entry.path)
                    elif entry.is_dir(follow_symlinks=False):
                        if name not in lim.skip_dirs and not name.endswith(".egg-info"):
                            stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        index.add(entry.path)
                except OSError:
                    continue
        return True

    def update(self, path: str | Path, kind: ChangeKind) -> None:
        """workspace/didChangeWatchedFiles: a file was created, changed or deleted."""
        p = Path(os.path.abspath(path))
        with self._lock:
            if self._thread is not None and not self._done.is_set():
                if len(self._pending) < MAX_PENDING_EVENTS:
                    self._pending.append((p, kind))
                else:  # a burst (a checkout) during the walk: the walk itself sees most of it
                    self._skip("file events while indexing: too many, the rest dropped", self.roots[0])
                return
            self._apply(p, kind)

    def _apply(self, path: Path, kind: ChangeKind) -> None:
        if kind == "deleted":
            self._index.remove(str(path))
            prefix = str(path) + os.sep  # a deleted folder takes its files with it
            for folder in [f for f in self._index.by_dir if f == str(path) or f.startswith(prefix)]:
                for name in list(self._index.by_dir.get(folder, ())):
                    self._index.remove(os.path.join(folder, name))
        elif self._indexable(path):
            self._index.add(str(path))

    def _indexable(self, path: Path) -> bool:
        root = self._root_of(path)
        if root is None:
            return False
        if any(part in self.limits.skip_dirs for part in path.relative_to(root).parts[:-1]):
            return False
        return self._index.count < self.limits.max_files and os.path.isfile(path) and self.contains(path)

    # -- lookups ---------------------------------------------------------------------------------
    def _root_of(self, path: str | Path) -> Path | None:
        p = os.path.abspath(path)
        for root, prefix in zip(self.roots, self._prefixes, strict=True):
            if p == prefix or p.startswith(prefix + os.sep) or prefix == os.sep:
                return root
        return None

    def contains(self, path: str | Path) -> bool:
        """Is the file, links resolved, under a workspace folder? (A link loop resolves to itself.)"""
        if not self.roots:
            return False
        try:
            real = Path(os.path.realpath(path))
        except (OSError, ValueError):
            return False
        return any(real.is_relative_to(r) for r in self._real_roots)

    def relative(self, path: str | Path) -> str:
        """The path for the prompt: relative to its workspace folder with '/' separators, else its name."""
        p = Path(os.path.abspath(path))
        root = self._root_of(p)
        if root is None:
            real = Path(os.path.realpath(p))
            root = next((r for r in self._real_roots if real.is_relative_to(r)), None)
            p = real
        return p.relative_to(root).as_posix() if root is not None else p.name

    def exists(self, path: str | Path) -> bool:
        """A regular file under a workspace folder (asked of the disk: the index may still be building)."""
        try:
            if self._done.is_set() and not self.truncated and self._thread is not None:
                p = os.path.abspath(path)  # the whole tree is indexed: no disk access needed
                folder, _, name = p.rpartition(os.sep)
                with self._lock:
                    if name in self._index.by_dir.get(folder, ()):
                        return True
                if self._root_of(p) is not None and not os.path.islink(p):
                    return False
            if self.contains(path):
                return os.path.isfile(path)
            if self.roots and os.path.lexists(path):  # there, but a link leads it out: say so once
                self._skip("outside the workspace folders", path)
            return False
        except (OSError, ValueError):
            return False

    def files_named(self, name: str) -> list[Path]:
        self._ensure_index()
        with self._lock:
            return [Path(p) for p in self._index.by_name.get(name, ())]

    def files_in(self, folder: str | Path) -> list[Path]:
        """The indexed files directly in ``folder``."""
        self._ensure_index()
        key = os.path.abspath(folder)
        with self._lock:
            return [Path(key, n) for n in self._index.by_dir.get(key, ())]

    def files(self) -> Iterator[Path]:
        self._ensure_index()
        with self._lock:
            paths = [os.path.join(f, n) for f, names in self._index.by_dir.items() for n in names]
        return (Path(p) for p in paths)

    def find(self, rel_candidates: Iterable[str]) -> list[Path]:
        """The indexed files at these root-relative paths ('/'-separated), in candidate then root order."""
        self._ensure_index()
        out: list[Path] = []
        with self._lock:
            for rel in rel_candidates:
                for root in self.roots:
                    p = os.path.normpath(os.path.join(root, *rel.split("/")))
                    folder, _, name = p.rpartition(os.sep)
                    if name in self._index.by_dir.get(folder, ()) and Path(p) not in out:
                        out.append(Path(p))
        return out

    @property
    def file_count(self) -> int:
        return self._index.count

    # -- reading ---------------------------------------------------------------------------------
    def read(self, path: str | Path) -> str | None:
        """The file's text, or None (outside the workspace, too big, binary, unreadable, vanished)."""
        if not self.roots:
            return None
        if not self.contains(path):
            self._skip("outside the workspace folders", path)
            return None
        real = os.path.realpath(path)
        for _ in range(2):  # a file that changes while read is read once more, then given up
            try:
                data, stable = self._read_bytes(real)
            except FileNotFoundError:
                self._skip("vanished", path)
                return None
            except OSError as exc:
                self._skip(f"unreadable ({exc.strerror or exc})", path)
                return None
            if data is None:
                return None
            if stable:
                if b"\0" in data[:BINARY_SNIFF_BYTES]:
                    self._skip("binary", path)
                    return None
                return data.decode("utf-8", errors="replace")
        self._skip("changed while being read", path)
        return None

    def _read_bytes(self, real: str) -> tuple[bytes | None, bool]:
        """(bytes or None when skipped, whether the file stayed the same while read)."""
        cap = self.limits.max_file_bytes
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the read
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                self._skip("not a regular file", real)
                return None, True
            if before.st_size > cap:
                self._skip(f"larger than {cap} bytes", real)
                return None, True
            chunks: list[bytes] = []
            size = 0
            while size <= cap:
                chunk = os.read(fd, min(65536, cap + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > cap:  # grew past the cap since the stat
                self._skip(f"larger than {cap} bytes", real)
                return None, True
            after = os.fstat(fd)
        finally:
            os.close(fd)
        same = before.st_size == after.st_size == size and before.st_mtime_ns == after.st_mtime_ns
        return b"".join(chunks), same

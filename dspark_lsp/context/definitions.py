"""The definitions of the names used near the cursor that the file imports, as prompt pieces.

The names in the lines around the cursor (the one being typed right before it first: `helper(`, `mod.`),
nearest first, are matched against the file's imports (``imports.find_imports``): an imported name
(`from .util import helper`), a module alias with the attribute used on it (`m.connect`, `pkg.Func`), a
name a wildcard import brings (`#include "x.h"`, Go's dot import, `from m import *`), or, in Go and Java,
a name of the file's own package (another file of its folder). Each is resolved to files
(``imports.resolve_import``) and turned into the outline of its definition there (``outline``), or the
module's outline for a bare module alias; a JS/TS barrel file (`export * from './x'`) is followed to the
file that defines the name. One ``ContextFile`` per file, nearest-used first, within ``max_chars`` in
total.

Fast enough for every completion: only the current file's import lines are parsed (cached by them),
other files' outlines are cached by path and text, and a file is parsed only when its text spells the
name.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from dspark_lsp.context.imports import JS_FAMILY, Import, Lookup, find_imports, package_files, resolve_import
from dspark_lsp.context.outline import KINDS, Outliner
from dspark_lsp.context.types import ContextFile
from dspark_lsp.syntax.languages import load_language

log = logging.getLogger(__name__)

MAX_NAMES = 48  # distinct names looked at per completion (the nearest ones)
MAX_WILDCARD_FILES = 8  # files a wildcard import brings that are searched for a name
MAX_PACKAGE_FILES = 64  # a Go package's other files searched for a name it uses unimported
MAX_REEXPORT_DEPTH = 3  # barrel files followed (`export * from './x'`)
MAX_REEXPORT_FILES = 200  # files a barrel's `export *` chains may bring
READ_BUDGET_S = 0.05  # time one completion may spend reading other files (a slow or network disk)
CACHE_FILES = 256  # other files' parses kept (by path and text)
# A name, or a chain of them (`mod.attr`, `crate::a::B`), as the model would read it.
_CHAIN = re.compile(r"[A-Za-z_$][\w$]*(?:\s*(?:\.|::|->)\s*[A-Za-z_$][\w$]*)*")
_PACKAGE_CLAUSE = re.compile(r"^[ \t]*package[ \t]", re.MULTILINE)
_SEPARATORS = re.compile(r"\s*(?:\.|::|->)\s*")


@dataclass(frozen=True)
class _Use:
    parts: tuple[str, ...]  # the chain's names
    distance: int  # characters from the cursor (after it counts double: what is typed weighs more)


def _uses_near(text: str, offset: int, near_lines: int, skip_lines: set[int]) -> list[_Use]:
    """The name chains in the ``near_lines`` lines around ``offset``, nearest first, each chain once."""
    offset = max(0, min(offset, len(text)))
    lo = offset
    for _ in range(near_lines + 1):
        lo = text.rfind("\n", 0, lo - 1) + 1 if lo > 0 else 0
        if lo == 0:
            break
    hi = offset
    for _ in range(max(1, near_lines // 3)):  # less of what follows: it may be stale while typing
        nxt = text.find("\n", hi + 1)
        hi = len(text) if nxt < 0 else nxt
        if nxt < 0:
            break
    first_line = text.count("\n", 0, lo)
    best: dict[tuple[str, ...], int] = {}
    for m in _CHAIN.finditer(text, lo, hi):
        if skip_lines and first_line + text.count("\n", lo, m.start()) in skip_lines:
            continue
        dist = offset - m.end() if m.end() <= offset else 2 * (m.start() - offset) if m.start() >= offset else 0
        parts = tuple(_SEPARATORS.split(m.group()))
        if dist < best.get(parts, 1 << 60):
            best[parts] = dist
    return [_Use(p, d) for p, d in sorted(best.items(), key=lambda kv: (kv[1], kv[0]))]


# -- other files' outlines, cached ------------------------------------------------------------------
_outliners: OrderedDict[tuple[str, int], Outliner] = OrderedDict()
_outliners_lock = threading.Lock()


def _outliner(path: Path, text: str, language: str) -> Outliner:
    key = (str(path), hash(text))
    with _outliners_lock:
        found = _outliners.get(key)
        if found is not None:
            _outliners.move_to_end(key)
            return found
    found = Outliner(text, language)  # parsed outside the lock: another thread may be doing the same
    with _outliners_lock:
        _outliners[key] = found
        while len(_outliners) > CACHE_FILES:
            _outliners.popitem(last=False)
    return found


@functools.cache
def _language_of_suffix(suffix: str) -> str | None:
    from dspark_lsp.syntax import detect_language

    return detect_language(f"x{suffix}", None)


def _file_language(path: Path, fallback: str) -> str:
    found = _language_of_suffix("".join(path.suffixes[-2:]).lower())
    return found if found in KINDS else fallback


@dataclass
class _Resolver:
    """One completion's lookups: each file read once, each (import, member) resolved once."""

    current: Path
    language: str
    lookup: Lookup
    read_budget_s: float | None = None

    def __post_init__(self) -> None:
        self._texts: dict[Path, str | None] = {}
        self._read_seconds = 0.0
        self._over_budget = False
        self._resolved: dict[tuple[Import, str | None], list[Path]] = {}
        self._package: list[Path] | None = None
        self._reaches: dict[Path, _Reach] = {}
        self._resolved_from: dict[tuple[Import, Path], list[Path]] = {}
        loaded = load_language(self.language)
        self.keywords = loaded.keywords if loaded is not None else frozenset()

    def package(self, name: str) -> list[Path]:
        """The files of the current file's own package that may define ``name`` (Go, Java)."""
        try:
            if self.language == "java":
                return package_files(self.current, "java", self.lookup, name)
            if self._package is None:
                self._package = package_files(self.current, self.language, self.lookup)[:MAX_PACKAGE_FILES]
            return self._package
        except Exception:
            log.exception("context: listing the package of %s failed", self.current)
            return []

    def text(self, path: Path) -> str | None:
        if path not in self._texts:
            if self.read_budget_s is not None and self._read_seconds > self.read_budget_s:  # a slow disk costs this completion some pieces, no more
                if not self._over_budget:
                    self._over_budget = True
                    log.info("context: reading other files took %.0f ms; the rest skipped for this completion",
                             self._read_seconds * 1000)
                return None
            began = time.perf_counter()
            try:
                self._texts[path] = self.lookup.read(path)
            except Exception:  # a lookup is the editor's or the disk's: never let it break a completion
                log.exception("context: reading %s failed", path)
                self._texts[path] = None
            self._read_seconds += time.perf_counter() - began
        return self._texts[path]

    def files(self, imp: Import, member: str | None = None) -> list[Path]:
        key = (imp, member)
        if key not in self._resolved:
            try:
                self._resolved[key] = resolve_import(imp, self.current, self.language, self.lookup, member)
            except Exception:
                log.exception("context: resolving %r failed", imp.module)
                self._resolved[key] = []
        return self._resolved[key]

    def files_from(self, imp: Import, path: Path, language: str) -> list[Path]:
        """``imp`` of another file (a re-export), resolved from that file."""
        key = (imp, path)
        if key not in self._resolved_from:
            try:
                self._resolved_from[key] = resolve_import(imp, path, language, self.lookup)
            except Exception:
                log.exception("context: resolving %r from %s failed", imp.module, path)
                self._resolved_from[key] = []
        return self._resolved_from[key]

    def outline_in(self, paths: list[Path], name: str | None, max_chars: int) -> tuple[Path, str] | None:
        """The first of ``paths`` that defines ``name`` (None: the module outline), with its outline; a
        JS/TS file that only re-exports the name is followed to where it is defined."""
        seen: set[Path] = set()
        for path in paths:
            found = self._defined_in(path, name, max_chars, 0, seen)
            if found:
                return found
        return None

    def _defined_in(self, path: Path, name: str | None, max_chars: int, depth: int,
                    seen: set[Path]) -> tuple[Path, str] | None:  # fmt: skip
        """``name``'s outline in the file at ``path``, or (JS/TS) in a file it re-exports from."""
        if path in seen:  # a re-export cycle, or a file already looked at for this name
            return None
        seen.add(path)
        reach = self._reach(path)
        for where, outliner in reach.files if name is not None else reach.files[:1]:
            if name is None or name in outliner.words:  # no parse for a file that never spells the name
                body = outliner.of(name, max_chars)
                if body:
                    return where, body
        if name is None or depth >= MAX_REEXPORT_DEPTH:
            return None
        for where, imp in reach.named:  # `export {a as name} from './x'`
            there = next((n.name for n in imp.names if n.alias == name), None)
            for target in self.files_from(imp, where, _file_language(where, self.language)) if there else ():
                found = self._defined_in(target, there, max_chars, depth + 1, seen)
                if found:
                    return found
        return None

    def _reach(self, path: Path) -> _Reach:
        """The file and, for JS/TS, the files its `export * from` chains lead to (breadth first, bounded),
        with the named re-exports among them; once per completion."""
        if path in self._reaches:
            return self._reaches[path]
        reach = self._reaches[path] = _Reach([], [])
        queue, visited = [(path, 0)], {path}
        while queue and len(reach.files) < MAX_REEXPORT_FILES:
            where, level = queue.pop(0)
            text = self.text(where)
            if text is None:
                continue
            language = _file_language(where, self.language)
            outliner = _outliner(where, text, language)
            reach.files.append((where, outliner))
            if language not in JS_FAMILY or level >= MAX_REEXPORT_DEPTH:
                continue
            for imp in outliner.reexports(functools.partial(find_imports, text, language)):
                if not imp.wildcard:
                    reach.named.append((where, imp))
                    continue
                for target in self.files_from(imp, where, language):
                    if target not in visited:
                        visited.add(target)
                        queue.append((target, level + 1))
        return reach


@dataclass
class _Reach:
    files: list[tuple[Path, Outliner]]  # the file first, then what `export *` brings
    named: list[tuple[Path, Import]]  # named re-exports among them


def _current_path(path: str | None, lookup: Lookup) -> Path:
    """The current file's absolute path: as given when absolute, else the file under the lookup whose
    relative path it is (the prompt path), else a placeholder that only absolute imports resolve from."""
    if path and os.path.isabs(path):
        return Path(path)
    rel = (path or "").replace("\\", "/")
    if rel:
        try:
            for candidate in lookup.files_named(rel.rsplit("/", 1)[-1]):
                if lookup.relative(candidate) == rel:
                    return Path(candidate)
        except Exception:
            log.exception("context: looking up %s failed", rel)
        roots = getattr(lookup, "roots", None)  # a file not saved yet: where it would be
        if roots:
            return Path(roots[0], *rel.split("/"))
    return Path(os.sep, "nonexistent", *rel.split("/"))


class _Bindings:
    """The file's imports by the local names they bind."""

    def __init__(self, imports: list[Import]) -> None:
        self.names: dict[str, tuple[Import, str]] = {}  # local name -> (import, the name it imports)
        self.modules: dict[tuple[str, ...], Import] = {}  # module alias as parts -> import
        imports = [i for i in imports if not i.reexport]  # `export ... from` binds nothing here
        self.wildcards = [i for i in imports if i.wildcard]
        for imp in imports:
            for n in imp.names:
                self.names.setdefault(n.alias, (imp, n.name))
            if imp.alias:
                self.modules.setdefault(tuple(_SEPARATORS.split(imp.alias)), imp)

    def target(self, parts: tuple[str, ...]) -> tuple[Import, str | None, str | None] | None:
        """(import, imported name, attribute used on it) for a chain, or None if no import binds it."""
        for k in range(len(parts), 0, -1):  # the longest module alias first (`a.b.f` of `import a.b`)
            imp = self.modules.get(parts[:k])
            if imp is not None:
                return imp, None, parts[k] if k < len(parts) else None
        bound = self.names.get(parts[0])
        if bound is not None:
            return bound[0], bound[1], parts[1] if len(parts) > 1 else None
        return None


def _definition(res: _Resolver, b: _Bindings, use: _Use, budget: int) -> tuple[Path, str] | None:
    target = b.target(use.parts)
    if target is None:  # maybe a name a wildcard import brings, or one of the file's own package
        if use.parts[0] in res.keywords:
            return None
        files = [p for imp in b.wildcards for p in res.files(imp)][:MAX_WILDCARD_FILES]
        files += [p for p in res.package(use.parts[0]) if p not in files]
        return res.outline_in(files, use.parts[0], budget)
    imp, name, attr = target
    if name is None:  # a module alias: the attribute used on it, else the module's outline
        files = res.files(imp)
        return (res.outline_in(files, attr, budget) if attr else None) or res.outline_in(files, None, budget)
    found = res.outline_in(res.files(imp), name, budget)
    if found is None:  # the name is a module of its own (`from pkg import mod`, Java's class file)
        member_files = res.files(imp, name)
        found = res.outline_in(member_files, name, budget) or (
            (res.outline_in(member_files, attr, budget) if attr else None) or res.outline_in(member_files, None, budget))
    return found


def definitions_for(text: str, offset: int, path: str | None, language: str, lookup: Lookup, *,
                    max_chars: int, near_lines: int = 60,
                    read_budget_s: float | None = READ_BUDGET_S) -> list[ContextFile]:  # fmt: skip
    """Outlines of the definitions of imported names used near ``offset``, nearest-used file first, one
    piece per file, their texts within ``max_chars`` in total ([] when nothing resolves). Reading other
    files stops after ``read_budget_s`` (None: no limit, for a batch run that must not depend on the
    disk's speed)."""
    if max_chars <= 0 or language not in KINDS or lookup is None:
        return []
    imports = find_imports(text, language)
    if not imports and language not in ("go", "java"):  # those also use their package's names unimported
        return []
    bindings = _Bindings(imports)
    skip = {line for imp in imports for line in range(imp.line, imp.end_line + 1)}
    if language in ("go", "java"):  # `package x` names the package, uses nothing
        skip |= {text.count("\n", 0, m.start()) for m in _PACKAGE_CLAUSE.finditer(text, 0, 20_000)}
    res = _Resolver(_current_path(path, lookup), language, lookup, read_budget_s)
    pieces: dict[Path, list[str]] = {}
    used = 0
    for use in _uses_near(text, offset, near_lines, skip)[:MAX_NAMES]:
        left = max_chars - used - (2 if pieces else 0)
        if left <= 0:
            break
        found = _definition(res, bindings, use, left)
        if found is None or found[0] == res.current:
            continue
        where, body = found
        if any(body in t for t in pieces.get(where, ())):  # a class and its attribute: one outline
            continue
        pieces.setdefault(where, []).append(body)
        used += len(body) + 2
    return [ContextFile(_relative(lookup, p), "\n\n".join(texts), "definition") for p, texts in pieces.items()]


def _relative(lookup: Lookup, path: Path) -> str:
    try:
        return str(lookup.relative(path))
    except Exception:
        return path.name

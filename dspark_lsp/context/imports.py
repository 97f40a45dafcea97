"""A file's imports (tree-sitter queries in ``grammars/<lang>/imports.scm``) and the files they name.

``find_imports`` says what the file imports, as written: the module, the names it takes with their local
aliases, the relative level (Python's leading dots). ``resolve_import`` turns one import into the files
of the user's project that hold it, through a ``Lookup`` (a Workspace, the open documents over one, or a
dict in tests); only relative and project-internal imports resolve, never the standard library or
dependencies (their folders are not indexed). Per language:

* Python: ``from .a import b`` from the current folder up; absolute ``pkg.mod`` to a project file whose
  path ends with ``pkg/mod.py`` or ``pkg/mod/__init__.py`` (the one nearest the current file first).
* JS / TS: ``./x`` and ``../x`` with the usual extensions and ``index`` files (bare packages: none).
* Go: a package path under the module path of the nearest ``go.mod``, to that folder's ``.go`` files.
* Rust: ``crate::`` / ``self::`` / ``super::`` paths and ``mod x;`` to ``x.rs`` or ``x/mod.rs`` under
  the crate's ``src`` (next to the nearest ``Cargo.toml``).
* Java: ``a.b.C`` to a file ending with ``a/b/C.java`` (any source root).
* C / C++: ``#include "x.h"`` relative to the file, then any project file ending with that path.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tree_sitter import Node, Parser, Query, QueryCursor, QueryError, Tree

from dspark_lsp.errors import UserError
from dspark_lsp.syntax.languages import LoadedLanguage, load_language

JS_FAMILY = ("javascript", "typescript", "tsx")
C_FAMILY = ("c", "cpp")
# What a JS/TS import without an extension may name, in the order a bundler tries them.
JS_EXTENSIONS = (".ts", ".tsx", ".d.ts", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts")
MAX_CANDIDATES = 4  # an absolute import matching many files: the nearest few are enough


@dataclass(frozen=True)
class ImportedName:
    name: str  # as the other module defines it ("default": a JS default export)
    alias: str  # the name this file uses for it


@dataclass(frozen=True)
class Import:
    module: str  # as written: "pkg.mod", "./x", "crate::a::b", "a.b", "x.h", "example.com/m/sub"
    names: tuple[ImportedName, ...] = ()
    level: int = 0  # Python's leading dots
    alias: str | None = None  # the local name bound to the module itself ("m" of `import a.b as m`)
    wildcard: bool = False  # everything the module defines is visible unqualified
    line: int = 0  # 0-based lines of the import statement
    end_line: int = 0
    reexport: bool = False  # JS/TS `export ... from`: passes the names on, binds none here


class Lookup(Protocol):
    """The files import resolution may see (absolute paths). A Workspace satisfies it; files_in (the
    files directly in a folder) is optional and spares a scan of ``files()``."""

    def exists(self, path: Path) -> bool: ...

    def read(self, path: Path) -> str | None: ...

    def relative(self, path: Path) -> str: ...

    def files_named(self, name: str) -> list[Path]: ...

    def files(self) -> Iterable[Path]: ...


# -- parsing ---------------------------------------------------------------------------------------
_parsers = threading.local()
# Where an import statement starts, per language: only those lines (and their continuations) are parsed
# for imports, so a long file costs a regex scan, not a full parse, on every completion.
_STARTS = {
    "python": r"[ \t]*(?:import|from)[ \t]",
    "js": r"[ \t]*import\b|[ \t]*export\b.*\bfrom\b|[ \t]*export[ \t]*[*{]|.*\brequire[ \t]*\(",
    "go": r"[ \t]*import\b",
    "rust": r"[ \t]*(?:pub(?:\([^)]*\))?[ \t]+)?(?:use|mod)[ \t]",
    "java": r"[ \t]*import[ \t]",
    "c": r"[ \t]*#[ \t]*include\b",
}
_START_RES = {k: re.compile(f"^(?:{v})", re.MULTILINE) for k, v in _STARTS.items()}
MAX_STATEMENT_LINES = 200
IMPORTS_CACHE = 64


def _family(language: str) -> str:
    return "js" if language in JS_FAMILY else "c" if language in C_FAMILY else language


@functools.cache
def _loaded(language: str) -> LoadedLanguage | None:
    return load_language(language)


def import_text(text: str, language: str) -> str | None:
    """``text`` with only its import statements kept (dedented; every other line blank, so line numbers
    hold), or None for a language without a start pattern."""
    start = _START_RES.get(_family(language))
    if start is None:
        return None
    lines = text.split("\n")
    kept = [""] * len(lines)
    row, pos, last = 0, 0, -1
    for m in start.finditer(text):
        row += text.count("\n", pos, m.start())
        pos = m.start()
        if row <= last:
            continue
        depth, j = 0, row
        while j < len(lines) and j - row < MAX_STATEMENT_LINES:
            line = lines[j]
            kept[j] = line.strip()
            depth += sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")
            if depth <= 0 and not line.rstrip().endswith("\\"):
                break
            j += 1
        last = j
    return "\n".join(kept)


def parse(text: str, language: str) -> Tree | None:
    """The tree of ``text`` (one parser per language and thread), or None for an unknown language."""
    loaded = _loaded(language)
    if loaded is None:
        return None
    cache: dict[str, Parser] = getattr(_parsers, "by_language", None) or {}
    _parsers.by_language = cache
    parser = cache.get(language)
    if parser is None:
        parser = cache[language] = Parser(loaded.language)
    return parser.parse(text.encode("utf-8", "surrogatepass"))


@functools.cache
def _imports_query(language: str) -> tuple[LoadedLanguage, Query] | None:
    loaded = _loaded(language)
    if loaded is None:
        return None
    path = loaded.spec.directory / "imports.scm"
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None  # a language without the query: no imports followed
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read query file: {exc}") from exc
    try:
        return loaded, Query(loaded.language, source)
    except QueryError as exc:
        raise UserError(f"{path}: bad query: {exc}") from exc


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


# -- finding imports -------------------------------------------------------------------------------
_imports_cache: dict[tuple[str, str], list[Import]] = {}  # by the import lines' text
_imports_lock = threading.Lock()


def find_imports(text: str, language: str, tree: Tree | None = None) -> list[Import]:
    """The imports of ``text`` in file order ([] for a language without an imports query). Without a
    ``tree`` only the import statements' lines are parsed, and the answer is cached by them: typing
    elsewhere in the file costs a regex scan."""
    found = _imports_query(language)
    if found is None:
        return []
    if tree is None:
        reduced = import_text(text, language)
        key = (language, reduced if reduced is not None else text)
        with _imports_lock:
            cached = _imports_cache.get(key)
        if cached is None:
            cached = _find(found[1], parse(key[1], language), language)
            with _imports_lock:
                if len(_imports_cache) >= IMPORTS_CACHE:
                    _imports_cache.pop(next(iter(_imports_cache)))
                _imports_cache[key] = cached
        return list(cached)
    return _find(found[1], tree, language)


def _find(query: Query, tree: Tree | None, language: str) -> list[Import]:
    if tree is None:
        return []
    matches = QueryCursor(query).matches(tree.root_node)
    if language == "rust":
        return _rust_imports(matches)
    if language == "java":
        return _java_imports(matches)
    return _generic_imports(matches, language)


@dataclass
class _Group:
    module: str
    line: int
    end_line: int
    names: dict[int, ImportedName]
    alias: str | None = None
    wildcard: bool = False
    reexport: bool = False


def _generic_imports(matches: list[tuple[int, dict[str, list[Node]]]], language: str) -> list[Import]:
    """Python, JS/TS, Go, C/C++: one match per imported thing, grouped by statement and module."""
    groups: dict[tuple[int, int], _Group] = {}
    for _, caps in matches:
        stmt, mod_node = caps.get("import"), caps.get("module")
        if not stmt or not mod_node:
            continue
        key = (stmt[0].start_byte, mod_node[0].start_byte)
        g = groups.setdefault(key, _Group(_text(mod_node[0]), stmt[0].start_point.row, stmt[0].end_point.row, {}))
        if caps.get("name"):
            node = caps["name"][0]
            local = caps.get("alias")
            g.names[node.start_byte] = ImportedName(_text(node), _text(local[0]) if local else _text(node))
        if caps.get("default"):
            node = caps["default"][0]
            g.names[node.start_byte] = ImportedName("default", _text(node))
        if caps.get("module.alias"):
            g.alias = _text(caps["module.alias"][0])
        g.wildcard = g.wildcard or bool(caps.get("wildcard"))
        g.reexport = g.reexport or bool(caps.get("reexport"))
    out = []
    for _, g in sorted(groups.items()):
        module, level, alias = g.module, 0, g.alias
        if language == "python":
            level = len(module) - len(module.lstrip("."))
            module = module[level:]
            if alias is None and not g.names and not g.wildcard:
                alias = module  # `import a.b` binds the dotted name as written
        elif language == "go" and alias is None and not g.wildcard:
            alias = go_package_name(module)
        names = tuple(v for _, v in sorted(g.names.items()))
        out.append(Import(module, names, level, alias, g.wildcard, g.line, g.end_line, g.reexport))
    return out


def go_package_name(path: str) -> str:
    """The name a Go import binds by default: the path's last part, skipping a major version (/v2)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]):
        parts.pop()
    name = parts[-1] if parts else path
    return re.sub(r"[.-].*$", "", name.removeprefix("go-")) or name


def _java_imports(matches: list[tuple[int, dict[str, list[Node]]]]) -> list[Import]:
    out = []
    for _, caps in matches:
        if not caps.get("path") or not caps.get("import"):
            continue
        path = _text(caps["path"][0]).replace(" ", "")
        line, end = caps["import"][0].start_point.row, caps["import"][0].end_point.row
        if caps.get("wildcard"):
            out.append(Import(path, wildcard=True, line=line, end_line=end))
        elif "." in path:
            module, _, name = path.rpartition(".")
            out.append(Import(module, (ImportedName(name, name),), line=line, end_line=end))
    return out


def _rust_imports(matches: list[tuple[int, dict[str, list[Node]]]]) -> list[Import]:
    out: list[Import] = []
    for _, caps in matches:
        if not caps.get("import"):
            continue
        line, end = caps["import"][0].start_point.row, caps["import"][0].end_point.row
        if caps.get("mod"):
            name = _text(caps["mod"][0])
            out.append(Import(f"self::{name}", alias=name, line=line, end_line=end))
            continue
        for segments, alias, wildcard in _rust_leaves(caps["use"][0], []) if caps.get("use") else ():
            out.append(_rust_import(segments, alias, wildcard, line, end))
    return out


def _rust_import(segments: list[str], alias: str | None, wildcard: bool, line: int, end: int) -> Import:
    if wildcard:
        return Import("::".join(segments), wildcard=True, line=line, end_line=end)
    if segments[-1] == "self" and len(segments) > 1:  # `use a::b::{self}` binds the module b
        segments = segments[:-1]
        return Import("::".join(segments), alias=alias or segments[-1], line=line, end_line=end)
    if len(segments) == 1:
        return Import(segments[0], alias=alias or segments[0], line=line, end_line=end)
    name = segments[-1]
    return Import("::".join(segments[:-1]), (ImportedName(name, alias or name),), line=line, end_line=end)


def _rust_leaves(node: Node, prefix: list[str]) -> Iterable[tuple[list[str], str | None, bool]]:
    """A use tree's leaves: (path segments, alias, wildcard)."""
    kind = node.type
    if kind in ("scoped_use_list", "use_list"):
        head = node.child_by_field_name("path")
        inner = prefix + (_rust_path(head) if head is not None else [])
        items = node.child_by_field_name("list") if kind == "scoped_use_list" else node
        for child in items.named_children if items is not None else ():
            yield from _rust_leaves(child, inner)
    elif kind == "use_as_clause":
        path, alias = node.child_by_field_name("path"), node.child_by_field_name("alias")
        if path is not None:
            yield prefix + _rust_path(path), _text(alias) if alias is not None else None, False
    elif kind == "use_wildcard":
        target = node.named_children[0] if node.named_children else None
        yield prefix + (_rust_path(target) if target is not None else []), None, True
    elif kind in ("scoped_identifier", "identifier", "crate", "self", "super"):
        yield prefix + _rust_path(node), None, False


def _rust_path(node: Node) -> list[str]:
    return [s for s in _text(node).replace(" ", "").split("::") if s]


# -- resolving imports -----------------------------------------------------------------------------
def resolve_import(imp: Import, current_path: str | Path, language: str, lookup: Lookup,
                   member: str | None = None) -> list[Path]:  # fmt: skip
    """The project files that hold ``imp``'s module (or, with ``member``, the submodule / class of that
    name under it: `from pkg import mod`, Java's `import a.b.C`), nearest first; [] when it is not the
    project's own."""
    current = Path(os.path.abspath(current_path))
    resolver = _RESOLVERS.get(_family(language))
    if resolver is None:
        return []
    return resolver(imp, current, lookup, member)[:MAX_CANDIDATES]


def _existing(lookup: Lookup, candidates: Iterable[Path], first: bool = False) -> list[Path]:
    """The candidates that exist, in order (``first``: only the first of them)."""
    out: list[Path] = []
    for p in candidates:
        p = Path(os.path.normpath(p))
        if p not in out and lookup.exists(p):
            out.append(p)
            if first:
                break
    return out


def _ending_with(lookup: Lookup, tail: list[str], current: Path) -> list[Path]:
    """Project files whose path ends with ``tail``, the one sharing most folders with ``current`` first."""
    n = len(tail)
    found = [p for p in lookup.files_named(tail[-1]) if list(Path(p).parts[-n:]) == tail]

    def nearness(p: Path) -> tuple[int, int, str]:
        shared = 0
        for a, b in zip(Path(p).parts, current.parts, strict=False):
            if a != b:
                break
            shared += 1
        return (-shared, len(Path(p).parts), str(p))

    return sorted({Path(p) for p in found}, key=nearness)


def _files_in(lookup: Lookup, folder: Path) -> list[Path]:
    files_in = getattr(lookup, "files_in", None)
    if callable(files_in):
        return sorted(Path(p) for p in files_in(folder))
    return sorted(Path(p) for p in lookup.files() if Path(p).parent == folder)


def _python(imp: Import, current: Path, lookup: Lookup, member: str | None) -> list[Path]:
    parts = [p for p in imp.module.split(".") if p] + ([member] if member else [])
    if imp.level:
        base = current.parent
        for _ in range(imp.level - 1):
            base = base.parent
        if not parts:
            return _existing(lookup, [base / "__init__.py", base / "__init__.pyi"])
        folder = base.joinpath(*parts[:-1])
        last = parts[-1]
        return _existing(lookup, [folder / f"{last}.py", folder / f"{last}.pyi",
                                  folder / last / "__init__.py", folder / last / "__init__.pyi"])  # fmt: skip
    if not parts:
        return []
    found: list[Path] = []
    for tail in ([*parts[:-1], f"{parts[-1]}.py"], [*parts, "__init__.py"], [*parts[:-1], f"{parts[-1]}.pyi"]):
        found += [p for p in _ending_with(lookup, tail, current) if p not in found]
    return found


def _js(imp: Import, current: Path, lookup: Lookup, member: str | None) -> list[Path]:
    if not imp.module.startswith("."):
        return []  # a package: node_modules is not indexed
    base = os.path.normpath(os.path.join(current.parent, imp.module))
    stem, suffix = os.path.splitext(base)
    for candidate in _js_candidates(base, stem, suffix):  # lazily: the first hit is usually the first try
        if lookup.exists(Path(candidate)):
            return [Path(candidate)]
    return []


def _js_candidates(base: str, stem: str, suffix: str) -> Iterable[str]:
    if suffix:
        yield base
    if suffix in (".js", ".jsx", ".mjs", ".cjs"):  # TS sources import their compiled names
        yield from (stem + ext for ext in (".ts", ".tsx", ".mts", ".cts"))
    yield from (base + ext for ext in JS_EXTENSIONS)
    yield from (os.path.join(base, "index" + ext) for ext in JS_EXTENSIONS)


def _go_module(current: Path, lookup: Lookup) -> tuple[Path, str] | None:
    """The folder of the nearest go.mod above ``current`` and its module path."""
    for folder in current.parents:
        gomod = folder / "go.mod"
        if lookup.exists(gomod):
            text = lookup.read(gomod) or ""
            m = re.search(r"^\s*module\s+\"?([^\s\"]+)\"?", text, re.MULTILINE)
            return (folder, m.group(1)) if m else None
    return None


def _go(imp: Import, current: Path, lookup: Lookup, member: str | None) -> list[Path]:
    found = _go_module(current, lookup)
    if found is None:
        return []
    root, module = found
    if imp.module == module:
        folder = root
    elif imp.module.startswith(module + "/"):
        folder = root.joinpath(*imp.module[len(module) + 1 :].split("/"))
    else:
        return []  # the standard library or another module
    return [p for p in _files_in(lookup, folder) if p.suffix == ".go" and not p.name.endswith("_test.go")]


def _rust_src(current: Path, lookup: Lookup) -> Path:
    """The crate's source folder: ``src`` next to the nearest Cargo.toml, else the nearest ``src``."""
    for folder in current.parents:
        if lookup.exists(folder / "Cargo.toml"):
            return folder / "src"
    return next((f for f in current.parents if f.name == "src"), current.parent)


def _rust_module_of(current: Path, src: Path) -> list[str]:
    """The module path of the file: src/a/b.rs and src/a/b/mod.rs are a::b; lib.rs / main.rs the root."""
    try:
        parts = list(current.relative_to(src).parts)
    except ValueError:
        return []
    if current.name in ("lib.rs", "main.rs", "mod.rs"):
        return parts[:-1]
    return [*parts[:-1], current.stem]


def _rust(imp: Import, current: Path, lookup: Lookup, member: str | None) -> list[Path]:
    segments = [s for s in imp.module.split("::") if s] + ([member] if member else [])
    src = _rust_src(current, lookup)
    if not segments:
        return []
    if segments[0] == "crate":
        target = segments[1:]
    elif segments[0] in ("self", "super"):
        target = _rust_module_of(current, src)
        while segments and segments[0] in ("self", "super"):
            if segments.pop(0) == "super" and target:
                target = target[:-1]
        target += segments
    else:
        target = segments  # 2015-style paths from the crate root (an external crate finds nothing)
    if not target:
        return _existing(lookup, [src / "lib.rs", src / "main.rs"])
    folder = src.joinpath(*target[:-1])
    return _existing(lookup, [folder / f"{target[-1]}.rs", folder / target[-1] / "mod.rs"])


def _java(imp: Import, current: Path, lookup: Lookup, member: str | None) -> list[Path]:
    parts = [p for p in imp.module.split(".") if p] + ([member] if member else [])
    if not parts:
        return []
    return _ending_with(lookup, [*parts[:-1], f"{parts[-1]}.java"], current)


def _include(imp: Import, current: Path, lookup: Lookup, member: str | None) -> list[Path]:
    beside = _existing(lookup, [current.parent / imp.module])
    if beside:
        return beside
    tail = [p for p in imp.module.split("/") if p and p != "."]
    return _ending_with(lookup, tail, current) if tail and ".." not in tail else []


def package_files(current_path: str | Path, language: str, lookup: Lookup, name: str | None = None) -> list[Path]:
    """Files of the current file's own package, whose names it uses without importing them: Go's other
    files in its folder (tests only from a test), Java's class ``name`` beside it."""
    current = Path(os.path.abspath(current_path))
    if language == "go":
        test = current.name.endswith("_test.go")
        return [p for p in _files_in(lookup, current.parent)
                if p.suffix == ".go" and p != current and (test or not p.name.endswith("_test.go"))]  # fmt: skip
    if language == "java" and name:
        return _existing(lookup, [current.parent / f"{name}.java"])
    return []


_RESOLVERS: dict[str, Callable[[Import, Path, Lookup, str | None], list[Path]]] = {
    "python": _python, "js": _js, "go": _go, "rust": _rust, "java": _java, "c": _include,
}

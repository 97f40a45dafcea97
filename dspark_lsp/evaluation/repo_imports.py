"""Names a file takes from other files of its own package, found with plain per-language patterns.

One job: for a file of a package, which local names come from which other files of the package:

* Python: ``from .m import a, b as c``, ``from pkg.m import a``, ``from . import m``, ``import pkg.m as m``
  (relative and the package's own absolute imports; other packages are not "another file of the package").
* TypeScript/JavaScript: ``import d, { a, b as c } from "./m"`` and ``import * as ns from "../m"``;
  a name imported from a barrel file (``export * from "./x"``, ``export { a } from "./x"``) is followed
  to the file that declares it, as an editor's go-to-definition would. ``import type`` is skipped
  (types are rarely followed by ``(`` or ``.``).
* Go: packages of the same module (``import alias "module/sub"``: uses are ``sub.``) and the names the
  other files of the same folder declare at top level (same package, no import needed).

Hand-written on purpose (not the project's tree-sitter import queries): the set must not be built by the
system it measures. Paths are POSIX, relative to the package's workspace root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from dspark_lsp.evaluation.repo_lex import code_mask


@dataclass(frozen=True)
class Binding:
    name: str  # the local name the file uses
    files: tuple[str, ...]  # the package's files it comes from (root-relative)
    module: bool = False  # a module / package object: its uses are ``name.``; else ``name(`` or ``name.``


@dataclass
class PackageTree:
    """A package on disk: its workspace root, and (Go) the module path and per-folder declarations."""

    root: Path
    language: str
    module: str = ""
    _decls: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def read(self, rel: str) -> str:
        return (self.root / rel).read_text(encoding="utf-8", errors="replace")


def find_bindings(rel: str, text: str, tree: PackageTree) -> list[Binding]:
    """The names ``text`` (the file ``rel`` of ``tree``) takes from the package's other files."""
    if tree.language == "python":
        found = _python_bindings(rel, text, tree)
    elif tree.language == "typescript":
        found = _ts_bindings(rel, text, tree)
    else:
        found = _go_bindings(rel, text, tree)
    return [b for b in found if b.files and rel not in b.files]


# ---------------------------------------------------------------------------------------------- Python
_PY_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|(?:[^\n\\]|\\\n)+)", re.M)
_PY_IMPORT_AS = re.compile(r"^[ \t]*import[ \t]+([\w.]+)[ \t]+as[ \t]+(\w+)", re.M)


def _py_module_file(tree: PackageTree, base: PurePosixPath, dotted: str) -> str | None:
    path = base.joinpath(*dotted.split(".")) if dotted else base
    for cand in (f"{path}.py", f"{path}/__init__.py"):
        cand = cand.removeprefix("./")
        if tree.exists(cand):
            return cand
    return None


def _py_base(rel: str, dots: str, dotted: str) -> tuple[PurePosixPath, str] | None:
    """The folder the module path starts from, and the rest of the path (None: another package)."""
    here = PurePosixPath(rel).parent
    if dots:
        for _ in range(len(dots) - 1):
            here = here.parent
        return here, dotted
    top = dotted.split(".")[0]
    # An absolute import is the package's own when its first part is a top folder of the workspace.
    if not top or PurePosixPath(rel).parts[0] != top:
        return None
    return PurePosixPath("."), dotted


def _python_bindings(rel: str, text: str, tree: PackageTree) -> list[Binding]:
    out: list[Binding] = []
    for m in _PY_FROM.finditer(text):
        start = _py_base(rel, m.group(1), m.group(2))
        if start is None:
            continue
        base, dotted = start
        module_file = _py_module_file(tree, base, dotted)
        names = m.group(3).strip().strip("()").replace("\\\n", " ")
        for part in names.split(","):
            words = part.split("#")[0].split()
            if not words or words[0] == "*":
                continue
            imported, local = words[0], words[-1]
            sub = _py_module_file(tree, base, f"{dotted}.{imported}" if dotted else imported)
            if sub is not None:
                out.append(Binding(local, (sub,), module=True))
            elif module_file is not None:
                out.append(Binding(local, (module_file,)))
    for m in _PY_IMPORT_AS.finditer(text):
        start = _py_base(rel, "", m.group(1))
        if start is not None:
            target = _py_module_file(tree, start[0], start[1])
            if target is not None:
                out.append(Binding(m.group(2), (target,), module=True))
    return out


# ------------------------------------------------------------------------------------- TypeScript/JS
_TS_IMPORT = re.compile(r"^[ \t]*import[ \t]+(type[ \t]+)?([^;'\"]*?)\s*from\s*[\"'](\.[^\"']*)[\"']", re.M)
_TS_REEXPORT_NAMED = re.compile(r"export\s*(?:type\s*)?\{([^}]*)\}\s*from\s*[\"'](\.[^\"']*)[\"']")
_TS_REEXPORT_ALL = re.compile(r"export\s*\*\s*from\s*[\"'](\.[^\"']*)[\"']")
_TS_EXTS = (".ts", ".tsx", ".js", ".mjs", ".jsx")
_TS_DECL = (
    r"export\s+(?:declare\s+)?(?:default\s+)?(?:abstract\s+)?(?:async\s+)?"
    r"(?:function\s*\*?|class|const|let|var|enum|interface|type|namespace)\s+{name}\b"
)


def _ts_resolve(tree: PackageTree, rel: str, spec: str) -> str | None:
    joined = PurePosixPath(rel).parent / spec
    parts: list[str] = []
    for p in joined.parts:
        if p == "..":
            if not parts:
                return None
            parts.pop()
        elif p != ".":
            parts.append(p)
    path = "/".join(parts)
    stem = path[: -len(PurePosixPath(path).suffix)] if PurePosixPath(path).suffix in _TS_EXTS else path
    cands = [path] + [stem + e for e in _TS_EXTS] + [f"{path}/index{e}" for e in _TS_EXTS]
    return next((c for c in cands if c and tree.exists(c)), None)


def _ts_declaring(tree: PackageTree, file: str, name: str, depth: int = 4) -> str:
    """The file that declares ``name``, following ``file``'s re-exports; ``file`` when none is found."""
    text = tree.read(file)
    if depth == 0 or re.search(_TS_DECL.format(name=re.escape(name)), text):
        return file
    for m in _TS_REEXPORT_NAMED.finditer(text):
        for part in m.group(1).split(","):
            words = part.split()
            if words and words[-1] == name:
                nxt = _ts_resolve(tree, file, m.group(2))
                if nxt is not None:
                    return _ts_declaring(tree, nxt, words[0] if words[0] != "type" else words[1], depth - 1)
    for m in _TS_REEXPORT_ALL.finditer(text):
        nxt = _ts_resolve(tree, file, m.group(1))
        if nxt is not None:
            found = _ts_declaring(tree, nxt, name, depth - 1)
            if found != nxt or re.search(_TS_DECL.format(name=re.escape(name)), tree.read(nxt)):
                return found
    return file


def _ts_clause(clause: str) -> list[tuple[str, str, bool]]:
    """(imported, local, is_namespace) for each name an import clause binds (``type`` ones dropped)."""
    out = []
    braces = re.search(r"\{([^}]*)\}", clause)
    rest = clause[: braces.start()] + clause[braces.end() :] if braces else clause
    for part in rest.split(","):
        words = part.split()
        if len(words) == 3 and words[0] == "*" and words[1] == "as":
            out.append(("*", words[2], True))
        elif len(words) == 1 and re.fullmatch(r"[\w$]+", words[0]):
            out.append(("default", words[0], False))
    for part in (braces.group(1).split(",") if braces else []):
        words = part.split()
        if not words or words[0] == "type":
            continue
        out.append((words[0], words[-1], False))
    return out


def _ts_bindings(rel: str, text: str, tree: PackageTree) -> list[Binding]:
    out = []
    for m in _TS_IMPORT.finditer(text):
        if m.group(1):
            continue
        target = _ts_resolve(tree, rel, m.group(3))
        if target is None:
            continue
        for imported, local, namespace in _ts_clause(m.group(2)):
            if namespace or imported == "default":
                out.append(Binding(local, (target,), module=namespace))
            else:
                out.append(Binding(local, (_ts_declaring(tree, target, imported),)))
    return out


# ------------------------------------------------------------------------------------------------- Go
_GO_IMPORT_ONE = re.compile(r"^import[ \t]+(\w+[ \t]+)?\"([^\"]+)\"", re.M)
_GO_IMPORT_BLOCK = re.compile(r"^import[ \t]*\(([^)]*)\)", re.M)
_GO_SPEC = re.compile(r"^[ \t]*(\w+[ \t]+)?\"([^\"]+)\"", re.M)
_GO_DECL = re.compile(r"^(?:func[ \t]+(\w+)[ \t]*[(\[]|(?:type|var|const)[ \t]+(\w+))", re.M)
_GO_GROUP = re.compile(r"^(?:type|var|const)[ \t]*\(\n(.*?)^\)", re.M | re.S)
_GO_GROUP_NAME = re.compile(r"^\t(\w+)", re.M)
_GO_PACKAGE = re.compile(r"^package[ \t]+(\w+)", re.M)


def go_sources(tree: PackageTree, folder: str) -> list[str]:
    """The folder's Go files that are compiled into its package (test files left out)."""
    base = tree.root / folder
    if not base.is_dir():
        return []
    return sorted(
        str(PurePosixPath(folder) / p.name).removeprefix("./")
        for p in base.iterdir()
        if p.suffix == ".go" and not p.name.endswith("_test.go") and p.is_file()
    )


def go_declarations(text: str) -> set[str]:
    """Top-level names a Go file declares (functions, not methods; types, vars, consts; grouped too)."""
    mask = code_mask(text, "go")
    names = {m.group(1) or m.group(2) for m in _GO_DECL.finditer(text) if mask[m.start()]}
    for g in _GO_GROUP.finditer(text):
        if mask[g.start()]:
            names.update(_GO_GROUP_NAME.findall(g.group(1)))
    return names - {"_", "init", "main"}


def _go_folder_decls(tree: PackageTree, folder: str) -> dict[str, list[str]]:
    if folder not in tree._decls:
        table: dict[str, list[str]] = {}
        for f in go_sources(tree, folder):
            for name in go_declarations(tree.read(f)):
                table.setdefault(name, []).append(f)
        tree._decls[folder] = table
    return tree._decls[folder]


def _go_bindings(rel: str, text: str, tree: PackageTree) -> list[Binding]:
    folder = str(PurePosixPath(rel).parent)
    own = go_declarations(text)
    out = [
        Binding(name, tuple(f for f in files if f != rel))
        for name, files in sorted(_go_folder_decls(tree, folder).items())
        if name not in own
    ]
    specs = [(m.group(1), m.group(2)) for m in _GO_IMPORT_ONE.finditer(text)]
    for block in _GO_IMPORT_BLOCK.finditer(text):
        specs += [(m.group(1), m.group(2)) for m in _GO_SPEC.finditer(block.group(1))]
    for alias, path in specs:
        if not path.startswith(tree.module + "/"):
            continue
        files = go_sources(tree, path[len(tree.module) + 1 :])
        if not files:
            continue
        clause = _GO_PACKAGE.search(tree.read(files[0]))
        name = alias.strip() if alias else (clause.group(1) if clause else path.rsplit("/", 1)[-1])
        if name not in ("_", "."):
            out.append(Binding(name, tuple(files), module=True))
    return out

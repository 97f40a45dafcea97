"""The repository-level hole set: lines that use a name from another file of the same package.

A hole is a line of a package's source file where a name the file imports from a sibling file (see
``repo_imports``) is used, cut right after that name's ``(`` or ``.``, as while typing; its target is the
rest of the line. What the editor has open beside it: the files this file takes names from, those it
uses most first, up to ``MAX_OPEN``.

Selection is deterministic: every candidate of every package is found, then a seeded shuffle per
package and a round-robin over the packages (at most ``per_file`` holes from one file) picks ``n`` a
language. The result is saved (``bench/repo/holes-<language>.json``) so the set stays fixed even if
these rules change; loading checks each hole against the package's text.

Test files are left out: a test reaches the package through its public entry point (``from httpx
import Client``), not the sibling file that defines the name, and its lines are mostly asserts about
the name rather than uses of it, so they would measure something else.

``python -m dspark_lsp.evaluation.repo_set fetch|build`` fetches the manifest's packages / rebuilds the
hole files.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from dspark_lsp.errors import UserError
from dspark_lsp.evaluation.repo_fetch import (
    LANGUAGES,
    Manifest,
    Package,
    default_cache,
    fetch_all,
    load_manifest,
    package_root,
)
from dspark_lsp.evaluation.repo_imports import Binding, PackageTree, find_bindings
from dspark_lsp.evaluation.repo_lex import code_mask, has_comment

MAX_OPEN = 8
MAX_TARGET_CHARS = 120
MAX_FILE_BYTES = 200_000  # larger files are generated tables, not code someone types
EXTENSIONS = {"python": (".py",), "typescript": (".ts", ".tsx", ".js", ".mjs"), "go": (".go",)}
# A target with none of these is only closing brackets or punctuation: nothing to predict.
_SUBSTANCE = re.compile(r"[\w'\"`]")
_DEFINES = re.compile(r"(?:\bdef|\bclass|\bfunction|\bfunc)\s+$")
_IMPORT_LINE = re.compile(r"^\s*(?:import|from|export\s*\{|export\s*\*)\b")


@dataclass(frozen=True)
class Hole:
    id: str  # "<repo>/<file>:<line>"
    package: str  # the manifest's name
    file: str  # relative to the package's workspace root
    line: int  # 1-based
    column: int  # the cursor: code points into the line, right after the name's "(" or "."
    name: str  # the imported name
    target: str  # the rest of the line
    opens: tuple[str, ...]  # files open in the editor beside it


def is_test_file(rel: str, language: str) -> bool:
    p = PurePosixPath(rel)
    if language == "python":
        return p.name.startswith("test_") or p.name.endswith("_test.py") or p.name == "conftest.py" or any(
            d in ("tests", "test") for d in p.parts[:-1]
        )
    if language == "typescript":
        return ".test." in p.name or ".spec." in p.name or p.name.endswith(".d.ts") or "__tests__" in p.parts
    return p.name.endswith("_test.go") or any("test" in d for d in p.parts[:-1])


def source_files(pkg: Package, root: Path) -> list[str]:
    """The package's non-test source files of its language under its ``sources`` folders, sorted."""
    out: set[str] = set()
    for folder in pkg.sources:
        base = (root / folder).resolve()
        for path in base.rglob("*"):
            rel = path.relative_to(root.resolve()).as_posix()
            if (
                path.suffix in EXTENSIONS[pkg.language]
                and path.is_file()
                and not path.is_symlink()
                and path.stat().st_size <= MAX_FILE_BYTES
                and not is_test_file(rel, pkg.language)
            ):
                out.add(rel)
    return sorted(out)


def _opens(bindings: list[Binding], uses: Counter[str]) -> tuple[str, ...]:
    """The files whose names the file uses most (ties by path), at most MAX_OPEN."""
    weight: Counter[str] = Counter()
    for b in bindings:
        for f in b.files:
            weight[f] += uses[b.name]
    ranked = sorted((f for f, w in weight.items() if w > 0), key=lambda f: (-weight[f], f))
    return tuple(ranked[:MAX_OPEN])


def file_holes(pkg: Package, rel: str, text: str, tree: PackageTree) -> list[Hole]:
    """Every candidate hole of one file (the first use of an imported name on each line)."""
    bindings = {b.name: b for b in find_bindings(rel, text, tree)}
    if not bindings:
        return []
    names = "|".join(re.escape(n) for n in sorted(bindings, key=len, reverse=True))
    use = re.compile(rf"(?<![\w.$])({names})([(.])")
    mask = code_mask(text, pkg.language)
    uses: Counter[str] = Counter()
    found: list[tuple[int, int, str, str]] = []
    pos = 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        body = line.rstrip("\r\n")
        taken = False
        for m in use.finditer(body):
            b = bindings[m.group(1)]
            if not mask[pos + m.start()] or (b.module and m.group(2) != ".") or _DEFINES.search(body[: m.start()]):
                continue
            uses[b.name] += 1
            target = body[m.end() :].rstrip()
            ok = (
                _SUBSTANCE.search(target)
                and len(target) <= MAX_TARGET_CHARS
                and not _IMPORT_LINE.match(body)
                and not has_comment(target, pkg.language)  # nobody predicts a comment's words
            )
            if ok and not taken:
                found.append((number, m.end(), b.name, target))
                taken = True
        pos += len(line)
    opens = _opens(list(bindings.values()), uses)
    return [Hole(f"{pkg.repo}/{rel}:{n}", pkg.name, rel, n, col, name, tgt, opens) for n, col, name, tgt in found]


def package_candidates(pkg: Package, cache: Path) -> list[Hole]:
    root = package_root(pkg, cache)
    tree = PackageTree(root, pkg.language, pkg.module)
    out: list[Hole] = []
    for rel in source_files(pkg, root):
        out.extend(file_holes(pkg, rel, tree.read(rel), tree))
    return out


def select(by_package: dict[str, list[Hole]], n: int, seed: int, per_file: int = 3) -> list[Hole]:
    """``n`` holes, round-robin over the packages (sorted), each package's candidates in a seeded
    order, at most ``per_file`` from one file. Deterministic in (candidates, n, seed, per_file)."""
    queues: dict[str, list[Hole]] = {}
    for name in sorted(by_package):
        cands = sorted(by_package[name], key=lambda h: (h.file, h.line))
        random.Random(f"{seed}:{name}").shuffle(cands)
        queues[name] = cands
    taken: Counter[str] = Counter()
    picked: list[Hole] = []
    while len(picked) < n and any(queues.values()):
        for queue in queues.values():
            while queue:
                hole = queue.pop(0)
                if taken[hole.file] < per_file:
                    taken[hole.file] += 1
                    picked.append(hole)
                    break
            if len(picked) >= n:
                break
    return picked


def holes_path(set_dir: Path, language: str) -> Path:
    return set_dir / f"holes-{language}.json"


def build_holes(manifest: Manifest, cache: Path, language: str, n: int, seed: int) -> tuple[list[Hole], str]:
    """A language's holes and the hole file's JSON text (with how many candidates each package had)."""
    pkgs = manifest.for_language(language)
    by_package = {p.name: package_candidates(p, cache) for p in pkgs}
    holes = select(by_package, n, seed)
    data = {
        "language": language,
        "seed": seed,
        "candidates": {name: len(c) for name, c in by_package.items()},
        "packages": {p.name: p.version for p in pkgs},
        "holes": [asdict(h) for h in holes],
    }
    return holes, json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def load_holes(set_dir: Path, language: str) -> list[Hole]:
    path = holes_path(set_dir, language)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [Hole(**{**h, "opens": tuple(h["opens"])}) for h in data["holes"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a hole file ({exc})") from exc


def hole_document(hole: Hole, root: Path) -> tuple[str, int]:
    """The document as while typing the hole: the file with the rest of the hole's line deleted, and
    the cursor (a code-point offset) at the cut. UserError when the file does not hold the hole."""
    path = root / hole.file
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{hole.id}: cannot read {path} ({exc})") from exc
    lines = text.splitlines(keepends=True)
    if not 1 <= hole.line <= len(lines):
        raise UserError(f"{hole.id}: {hole.file} has {len(lines)} lines")
    line = lines[hole.line - 1]
    body = line.rstrip("\r\n")
    before = body[: hole.column]
    if body[hole.column :].rstrip() != hole.target or not before[:-1].endswith(hole.name):
        raise UserError(f"{hole.id}: the line no longer holds the hole (package text changed?)")
    start = sum(len(x) for x in lines[: hole.line - 1])
    doc = text[:start] + before + line[len(body) :] + text[start + len(line) :]
    return doc, start + hole.column


# ------------------------------------------------------------------------------------------------ CLI
def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dspark_lsp.evaluation.repo_set")
    ap.add_argument("command", choices=["fetch", "build"])
    ap.add_argument("--set", default="bench/repo", help="folder of manifest.json and the hole files")
    ap.add_argument("--cache", default=None, help="where packages are fetched (default: the user cache)")
    ap.add_argument("--langs", default=",".join(LANGUAGES))
    ap.add_argument("--n", type=int, default=100, help="holes a language")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        set_dir = Path(args.set)
        manifest = load_manifest(set_dir / "manifest.json")
        cache = Path(args.cache) if args.cache else default_cache()
        fetch_all(manifest, cache, lambda m: print(m, file=sys.stderr))
        if args.command == "build":
            for lang in [x for x in args.langs.split(",") if x]:
                if lang not in LANGUAGES:
                    raise UserError(f"--langs: {lang!r} is not one of {', '.join(LANGUAGES)}")
                holes, text = build_holes(manifest, cache, lang, args.n, args.seed)
                out = holes_path(set_dir, lang)
                out.write_text(text, encoding="utf-8")
                print(f"{lang}: {len(holes)} holes -> {out}", file=sys.stderr)
    except UserError as exc:
        print(f"repo_set: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main())

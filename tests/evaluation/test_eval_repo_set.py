"""The repository-level hole set: import detection, the cut and target, selection, fetch checks.

Each language gets a tiny fixture package written here; the expected holes are spelled out by hand.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from dspark_lsp.errors import UserError
from dspark_lsp.evaluation.repo_fetch import (
    DONE_MARK,
    Package,
    fetch_archive,
    load_manifest,
    unpack,
    unpack_dir,
)
from dspark_lsp.evaluation.repo_imports import PackageTree, find_bindings, go_declarations
from dspark_lsp.evaluation.repo_lex import code_mask, has_comment
from dspark_lsp.evaluation.repo_set import (
    Hole,
    file_holes,
    hole_document,
    is_test_file,
    select,
    source_files,
)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def _pkg(language: str, **kw: object) -> Package:
    base = dict(name="p", version="1", registry="pypi", language=language, archive="p.tar.gz",
                sha256="0" * 64, root=".", repo="p")  # fmt: skip
    base.update(kw)
    return Package(**base)  # type: ignore[arg-type]


def _holes(root: Path, pkg: Package, rel: str) -> list[Hole]:
    tree = PackageTree(root, pkg.language, pkg.module)
    return file_holes(pkg, rel, tree.read(rel), tree)


PY_FILES = {
    "mypkg/__init__.py": "",
    "mypkg/util.py": "def helper(x):\n    return x\n\nclass Box:\n    pass\n",
    "mypkg/sub/__init__.py": "",
    "mypkg/sub/deep.py": "VALUE = 1\n",
    "mypkg/core.py": (
        "import os\n"
        "from .util import helper, Box as B\n"
        "from mypkg.sub import deep\n"
        "from ..outside import nothing\n"
        "from os.path import join\n"
        "\n"
        "def run(v):\n"
        '    """helper(v) in a docstring is no use"""\n'
        "    # helper(v) in a comment neither\n"
        "    y = helper(v + 1)\n"
        "    b = B()\n"
        "    z = deep.VALUE + helper(2)\n"
        "    s = 'helper(x)'\n"
        "    return join(y, b.helper(3))\n"
    ),
    "mypkg/tests/test_core.py": "from ..util import helper\nhelper(1)\n",
}


def test_python_bindings_resolve_relative_absolute_and_submodules(tmp_path: Path) -> None:
    _write(tmp_path, PY_FILES)
    tree = PackageTree(tmp_path, "python")
    found = {b.name: (b.files, b.module) for b in find_bindings("mypkg/core.py", PY_FILES["mypkg/core.py"], tree)}
    assert found == {
        "helper": (("mypkg/util.py",), False),
        "B": (("mypkg/util.py",), False),
        "deep": (("mypkg/sub/deep.py",), True),
    }  # os, os.path and the unresolvable ..outside are other packages


def test_python_holes_cut_after_the_bracket_or_dot(tmp_path: Path) -> None:
    _write(tmp_path, PY_FILES)
    holes = _holes(tmp_path, _pkg("python"), "mypkg/core.py")
    got = [(h.line, h.name, h.target) for h in holes]
    # B() has only ")" after the cut: nothing to predict. Docstring, comment, string and b.helper are
    # not uses of the imported name; the line with deep.VALUE gives one hole (its first use).
    assert got == [(10, "helper", "v + 1)"), (12, "deep", "VALUE + helper(2)")]
    line = PY_FILES["mypkg/core.py"].splitlines()[9]
    assert line[: holes[0].column] == "    y = helper("
    assert holes[0].opens == ("mypkg/util.py", "mypkg/sub/deep.py")  # helper/B used 4 times, deep once
    assert holes[0].id == "p/mypkg/core.py:10"


def test_test_files_are_left_out(tmp_path: Path) -> None:
    _write(tmp_path, PY_FILES)
    files = source_files(_pkg("python", sources=("mypkg",)), tmp_path)
    assert "mypkg/tests/test_core.py" not in files and "mypkg/core.py" in files
    assert is_test_file("src/__tests__/a.ts", "typescript") and is_test_file("a.spec.ts", "typescript")
    assert is_test_file("x_test.go", "go") and is_test_file("internal/testsuite/a.go", "go")
    assert not is_test_file("mypkg/testing.py", "python")


TS_FILES = {
    "src/internal.ts": 'export * from "./core/derive"\nexport { die as fail } from "./errors"\n',
    "src/core/derive.ts": "export function track(x: number) { return x }\nexport const LIMIT = 3\n",
    "src/errors.ts": "export function die(code: number): never { throw new Error(String(code)) }\n",
    "src/ns.ts": "export const a = 1\n",
    "src/api/use.ts": (
        'import { track, LIMIT, fail } from "../internal"\n'
        'import type { Thing } from "../internal"\n'
        'import * as ns from "../ns.js"\n'
        'import { other } from "lodash"\n'
        "\n"
        "export function go(v: number) {\n"
        "  // track(v) here is a comment\n"
        "  const t = `track(${v})`\n"
        "  if (track(v + LIMIT) > 2) fail(7)\n"
        "  return ns.a + other(v)\n"
        "}\n"
    ),
}


def test_typescript_bindings_follow_barrels_to_the_declaring_file(tmp_path: Path) -> None:
    _write(tmp_path, TS_FILES)
    tree = PackageTree(tmp_path, "typescript")
    found = {b.name: (b.files, b.module) for b in find_bindings("src/api/use.ts", TS_FILES["src/api/use.ts"], tree)}
    assert found == {
        "track": (("src/core/derive.ts",), False),
        "LIMIT": (("src/core/derive.ts",), False),
        "fail": (("src/errors.ts",), False),  # `export { die as fail }`: followed under its own name
        "ns": (("src/ns.ts",), True),  # "../ns.js" is the TypeScript file ns.ts
    }


def test_typescript_holes(tmp_path: Path) -> None:
    _write(tmp_path, TS_FILES)
    holes = _holes(tmp_path, _pkg("typescript"), "src/api/use.ts")
    assert [(h.line, h.name, h.target) for h in holes] == [
        (9, "track", "v + LIMIT) > 2) fail(7)"),
        (10, "ns", "a + other(v)"),
    ]  # the comment and the template string are skipped


GO_FILES = {
    "go.mod": "module example.com/m\n",
    "a.go": (
        "package m\n\n"
        'import (\n\t"fmt"\n\tin "example.com/m/internal/tool"\n)\n\n'
        "func Run(x int) int {\n"
        "\tfmt.Println(`helper(x) in a raw string`)\n"
        "\treturn helper(x) + in.Twice(x)\n"
        "}\n"
    ),
    "b.go": (
        "package m\n\nconst (\n\tLimit = 3\n\tother = 4\n)\n\n"
        "func helper(v int) int { return v }\n\nfunc (t *T) method() {}\n\ntype T struct{}\n"
    ),
    "b_test.go": "package m\n\nfunc fromTest() {}\n",
    "internal/tool/tool.go": "package tool\n\nfunc Twice(x int) int { return 2 * x }\n",
}


def test_go_declarations_and_bindings(tmp_path: Path) -> None:
    _write(tmp_path, GO_FILES)
    assert go_declarations(GO_FILES["b.go"]) == {"Limit", "other", "helper", "T"}  # not the method
    tree = PackageTree(tmp_path, "go", "example.com/m")
    found = {b.name: (b.files, b.module) for b in find_bindings("a.go", GO_FILES["a.go"], tree)}
    assert found == {
        "Limit": (("b.go",), False),
        "other": (("b.go",), False),
        "helper": (("b.go",), False),
        "T": (("b.go",), False),
        "in": (("internal/tool/tool.go",), True),  # fmt is another module; b_test.go is not compiled in
    }
    holes = _holes(tmp_path, _pkg("go", module="example.com/m"), "a.go")
    assert [(h.line, h.name, h.target) for h in holes] == [(10, "helper", "x) + in.Twice(x)")]
    assert holes[0].opens == ("b.go", "internal/tool/tool.go")


def test_lexer_masks_comments_and_strings() -> None:
    text = 'a = "x#y"  # c\nb = 1'
    mask = code_mask(text, "python")
    assert [text[i] for i in range(len(text)) if mask[i]] == list('a =   \nb = 1')
    assert has_comment("x) // why", "typescript") and not has_comment('"//")', "typescript")
    assert has_comment("x)  # note", "python") and not has_comment("'#')", "python")


def test_selection_is_seeded_balanced_and_capped_per_file() -> None:
    def holes(pkg: str, files: int, each: int) -> list[Hole]:
        return [Hole(f"{pkg}/{f}:{i}", pkg, f"{pkg}{f}.py", i, 0, "n", "t", ()) for f in range(files)
                for i in range(each)]  # fmt: skip

    by_pkg = {"a": holes("a", 5, 10), "b": holes("b", 1, 10)}
    picked = select(by_pkg, 8, seed=1, per_file=2)
    assert len(picked) == 8
    assert sum(h.package == "b" for h in picked) == 2  # b's one file gives at most 2
    per_file: dict[str, int] = {}
    for h in picked:
        per_file[h.file] = per_file.get(h.file, 0) + 1
    assert max(per_file.values()) <= 2
    assert select(by_pkg, 8, seed=1, per_file=2) == picked
    assert select(by_pkg, 8, seed=2, per_file=2) != picked


def test_hole_document_deletes_the_rest_of_the_line(tmp_path: Path) -> None:
    _write(tmp_path, PY_FILES)
    hole = _holes(tmp_path, _pkg("python"), "mypkg/core.py")[0]
    doc, offset = hole_document(hole, tmp_path)
    original = PY_FILES["mypkg/core.py"]
    assert doc == original.replace("    y = helper(v + 1)\n", "    y = helper(\n")
    assert doc[:offset].endswith("y = helper(") and doc[offset] == "\n"
    (tmp_path / "mypkg/core.py").write_text(original.replace("v + 1", "v + 2"), encoding="utf-8")
    with pytest.raises(UserError, match="no longer holds"):
        hole_document(hole, tmp_path)


# ------------------------------------------------------------------------------------------- fetching
def _targz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _ar(members: dict[str, bytes]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members.items():
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        out += header + data + (b"\n" if len(data) % 2 else b"")
    return out


def test_fetch_checks_sha256_and_unpacks_tar_and_deb(tmp_path: Path) -> None:
    sdist = _targz({"p-1/p/mod.py": b"x = 1\n"})
    deb = _ar({"debian-binary": b"2.0\n", "control.tar.gz": _targz({}), "data.tar.gz": _targz({"usr/x.go": b"package x\n"})})
    calls: list[list[str]] = []

    def fake_client(blob: bytes, archive: str) -> object:
        def run(cmd: list[str], cwd: Path) -> None:
            calls.append(cmd)
            (cwd / archive).write_bytes(blob)

        return run

    pkg = _pkg("python", archive="p-1.tar.gz", sha256=hashlib.sha256(sdist).hexdigest(), root="p-1")
    path = fetch_archive(pkg, tmp_path, fake_client(sdist, "p-1.tar.gz"))  # type: ignore[arg-type]
    assert "p==1" in calls[0][-1]
    assert (unpack(pkg, path, tmp_path) / "p-1/p/mod.py").read_text() == "x = 1\n"
    assert (unpack_dir(pkg, tmp_path) / DONE_MARK).is_file()
    fetch_archive(pkg, tmp_path, fake_client(b"", "unused"))  # type: ignore[arg-type]
    assert len(calls) == 1  # present and checked: not downloaded again

    gopkg = _pkg("go", registry="debian", archive="g_1_all.deb", sha256=hashlib.sha256(deb).hexdigest(),
                 module="x", name="g")  # fmt: skip
    path = fetch_archive(gopkg, tmp_path, fake_client(deb, "g_1_all.deb"))  # type: ignore[arg-type]
    assert (unpack(gopkg, path, tmp_path) / "usr/x.go").read_text() == "package x\n"

    bad = _pkg("python", name="q", archive="q-1.tar.gz", sha256="1" * 64)
    with pytest.raises(UserError, match="sha256"):
        fetch_archive(bad, tmp_path, fake_client(sdist, "q-1.tar.gz"))  # type: ignore[arg-type]


def test_unpack_refuses_members_outside_the_cache(tmp_path: Path) -> None:
    blob = _targz({"../evil.py": b"x\n"})
    (tmp_path / "archives").mkdir()
    archive = tmp_path / "archives" / "e-1.tar.gz"
    archive.write_bytes(blob)
    with pytest.raises(UserError, match="outside"):
        unpack(_pkg("python", archive="e-1.tar.gz"), archive, tmp_path)
    assert not (tmp_path / "src" / "evil.py").exists()


def test_manifest_errors_are_one_line(tmp_path: Path) -> None:
    bad = {"packages": [{"name": "x", "version": "1", "registry": "cran", "language": "python",
                         "archive": "x", "sha256": "z", "root": "../up", "repo": "x"}]}  # fmt: skip
    (tmp_path / "m.json").write_text(json.dumps(bad))
    with pytest.raises(UserError) as err:
        load_manifest(tmp_path / "m.json")
    msg = str(err.value)
    assert "registry 'cran'" in msg and "sha256" in msg and "inside the archive" in msg
    (tmp_path / "m.json").write_text("{")
    with pytest.raises(UserError, match="not a repository-set manifest"):
        load_manifest(tmp_path / "m.json")


def test_shipped_manifest_and_hole_files_are_consistent() -> None:
    bench = Path(__file__).resolve().parents[2] / "bench" / "repo"
    manifest = load_manifest(bench / "manifest.json")
    langs = {p.language for p in manifest.packages}
    assert len(langs) >= 3
    for lang in langs:
        data = json.loads((bench / f"holes-{lang}.json").read_text())
        assert len(data["holes"]) >= 100
        names = {p.name for p in manifest.for_language(lang)}
        assert {h["package"] for h in data["holes"]} == names  # every package contributes
        assert len({h["id"] for h in data["holes"]}) == len(data["holes"])

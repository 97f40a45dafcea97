"""A file's imports per language (grammars/<lang>/imports.scm) and their resolution to the project's files,
through a Workspace over the fixture projects and through a dict standing in for one."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from dspark_lsp.context.imports import Import, ImportedName, find_imports, go_package_name, resolve_import
from dspark_lsp.context.workspace import Workspace

FIXTURES = Path(__file__).parent / "context_fixtures"


def names(*pairs: str) -> tuple[ImportedName, ...]:
    """'a' or 'a:b' (name a bound as b)."""
    return tuple(ImportedName(*(p.split(":") if ":" in p else (p, p))) for p in pairs)


def brief(imports: list[Import]) -> list[tuple[str, tuple[ImportedName, ...], int, str | None, bool]]:
    return [(i.module, i.names, i.level, i.alias, i.wildcard) for i in imports]


def test_python_imports() -> None:
    src = ("import os.path as p, sys\nfrom . import x\nfrom ..mod import a as b, c\nfrom .m import *\n"
           "from pkg.sub import (d,\n    e as f)\nimport pkg.mod\ndef g():\n    import inner\n")  # fmt: skip
    found = find_imports(src, "python")
    assert brief(found) == [
        ("os.path", (), 0, "p", False),
        ("sys", (), 0, "sys", False),
        ("", names("x"), 1, None, False),
        ("mod", names("a:b", "c"), 2, None, False),
        ("m", (), 1, None, True),
        ("pkg.sub", names("d", "e:f"), 0, None, False),
        ("pkg.mod", (), 0, "pkg.mod", False),
        ("inner", (), 0, "inner", False),
    ]
    assert (found[5].line, found[5].end_line) == (4, 5)


@pytest.mark.parametrize("language", ["typescript", "tsx", "javascript"])
def test_js_family_imports(language: str) -> None:
    src = ("import {a, b as c} from './x';\nimport d from './y';\nimport * as ns from '../z';\n"
           "import e, {f} from './w';\nconst g = require('./r');\nimport './side';\n"
           "const {h, i: j} = require('./r2');\nconst k = notRequire('./no');\n")  # fmt: skip
    assert brief(find_imports(src, language)) == [
        ("./x", names("a", "b:c"), 0, None, False),
        ("./y", names("default:d"), 0, None, False),
        ("../z", (), 0, "ns", False),
        ("./w", names("default:e", "f"), 0, None, False),
        ("./r", (), 0, "g", False),
        ("./r2", names("h", "i:j"), 0, None, False),
    ]


def test_typescript_import_require() -> None:
    assert brief(find_imports("import m = require('./m');\n", "typescript")) == [("./m", (), 0, "m", False)]


def test_go_imports() -> None:
    src = ('package main\nimport "fmt"\nimport (\n  m "example.com/mod/sub"\n  "example.com/mod/other/v2"\n'
           '  . "example.com/m/dot"\n  _ "example.com/m/blank"\n)\n')  # fmt: skip
    assert brief(find_imports(src, "go")) == [
        ("fmt", (), 0, "fmt", False),
        ("example.com/mod/sub", (), 0, "m", False),
        ("example.com/mod/other/v2", (), 0, "other", False),
        ("example.com/m/dot", (), 0, None, True),
    ]
    assert go_package_name("gopkg.in/yaml.v3") == "yaml" and go_package_name("github.com/x/go-redis") == "redis"


def test_rust_imports() -> None:
    src = ("use crate::a::{b::{C, D}, e as f};\nuse super::super::g::H;\npub mod h;\nmod inline { fn x() {} }\n"
           "use self::z::*;\nuse crate::w::{self};\nuse std::io;\n")  # fmt: skip
    assert brief(find_imports(src, "rust")) == [
        ("crate::a::b", names("C"), 0, None, False),
        ("crate::a::b", names("D"), 0, None, False),
        ("crate::a", names("e:f"), 0, None, False),
        ("super::super::g", names("H"), 0, None, False),
        ("self::h", (), 0, "h", False),
        ("self::z", (), 0, None, True),
        ("crate::w", (), 0, "w", False),
        ("std", names("io"), 0, None, False),
    ]


def test_java_and_c_imports() -> None:
    java = "package a.b;\nimport a.b.C;\nimport static a.b.D.e;\nimport a.b.*;\n"
    assert brief(find_imports(java, "java")) == [
        ("a.b", names("C"), 0, None, False), ("a.b.D", names("e"), 0, None, False), ("a.b", (), 0, None, True),
    ]  # fmt: skip
    c = '#include "x.h"\n#include <vector>\n#include "sub/y.hpp"\n'
    for lang in ("c", "cpp"):
        assert brief(find_imports(c, lang)) == [("x.h", (), 0, None, True), ("sub/y.hpp", (), 0, None, True)]


def test_unknown_language_or_no_query_finds_nothing() -> None:
    assert find_imports("import x", "cobol") == []
    assert find_imports("", "python") == []


# -- resolution over the fixture projects ------------------------------------------------------------
@pytest.fixture(scope="module")
def ws() -> Workspace:
    w = Workspace([FIXTURES])
    w.start()
    assert w.wait(10)
    return w


def rel(ws: Workspace, paths: Iterable[Path]) -> list[str]:
    return [ws.relative(p) for p in paths]


def first(imports: list[Import], module: str) -> Import:
    return next(i for i in imports if i.module == module)


def test_python_resolution(ws: Workspace) -> None:
    main = FIXTURES / "py/app/main.py"
    imps = find_imports(main.read_text(), "python")
    assert rel(ws, resolve_import(first(imps, "pkg.sub.mod"), main, "python", ws)) == ["py/pkg/sub/mod.py"]
    assert rel(ws, resolve_import(first(imps, "pkg.util"), main, "python", ws)) == ["py/pkg/util.py"]
    pkg = first(imps, "pkg")
    assert rel(ws, resolve_import(pkg, main, "python", ws)) == ["py/pkg/__init__.py"]
    assert rel(ws, resolve_import(pkg, main, "python", ws, member="sub")) == ["py/pkg/sub/__init__.py"]
    assert resolve_import(first(imps, "outside"), main, "python", ws) == []  # above the project: nothing
    init = FIXTURES / "py/pkg/__init__.py"
    rel_imp = find_imports(init.read_text(), "python")[0]
    assert rel(ws, resolve_import(rel_imp, init, "python", ws)) == ["py/pkg/util.py"]
    dot = Import("", names("util"), level=1)  # from . import util
    assert rel(ws, resolve_import(dot, init, "python", ws)) == ["py/pkg/__init__.py"]
    assert rel(ws, resolve_import(dot, init, "python", ws, member="util")) == ["py/pkg/util.py"]
    assert resolve_import(Import("os.path", alias="os.path"), main, "python", ws) == []


def test_js_family_resolution(ws: Workspace) -> None:
    app = FIXTURES / "ts/src/app.ts"
    imps = find_imports(app.read_text(), "typescript")
    assert rel(ws, resolve_import(first(imps, "./lib/math"), app, "typescript", ws)) == ["ts/src/lib/math.ts"]
    assert rel(ws, resolve_import(first(imps, "./lib"), app, "typescript", ws)) == ["ts/src/lib/index.ts"]
    assert resolve_import(first(imps, "fs"), app, "typescript", ws) == []  # a package
    old = FIXTURES / "ts/src/old.js"
    for imp in find_imports(old.read_text(), "javascript"):  # './util.js' and './util'
        assert rel(ws, resolve_import(imp, old, "javascript", ws)) == ["ts/src/util.js"]


def test_go_resolution(ws: Workspace) -> None:
    main = FIXTURES / "go/main.go"
    imps = find_imports(main.read_text(), "go")
    cart = first(imps, "example.com/shop/cart")
    assert cart.alias == "c"
    assert rel(ws, resolve_import(cart, main, "go", ws)) == ["go/cart/cart.go", "go/cart/sum.go", "go/cart/tax.go"]  # no tests
    assert resolve_import(first(imps, "fmt"), main, "go", ws) == []


def test_rust_resolution(ws: Workspace) -> None:
    lib, shapes = FIXTURES / "rust/src/lib.rs", FIXTURES / "rust/src/shapes.rs"
    mods = find_imports(lib.read_text(), "rust")
    assert rel(ws, resolve_import(first(mods, "self::shapes"), lib, "rust", ws)) == ["rust/src/shapes.rs"]
    assert rel(ws, resolve_import(first(mods, "self::util"), lib, "rust", ws)) == ["rust/src/util/mod.rs"]
    imps = find_imports(shapes.read_text(), "rust")
    assert rel(ws, resolve_import(first(imps, "self::circle"), shapes, "rust", ws)) == ["rust/src/shapes/circle.rs"]
    assert rel(ws, resolve_import(first(imps, "crate::util"), shapes, "rust", ws)) == ["rust/src/util/mod.rs"]
    assert rel(ws, resolve_import(first(imps, "super"), shapes, "rust", ws)) == ["rust/src/lib.rs"]
    circle = FIXTURES / "rust/src/shapes/circle.rs"
    up = find_imports(circle.read_text(), "rust")[0]
    assert rel(ws, resolve_import(up, circle, "rust", ws)) == ["rust/src/shapes.rs"]
    assert resolve_import(Import("std", names("io")), shapes, "rust", ws) == []


def test_java_and_c_resolution(ws: Workspace) -> None:
    app = FIXTURES / "java/src/main/java/com/acme/App.java"
    imps = find_imports(app.read_text(), "java")
    want = ["java/src/main/java/com/acme/util/Strings.java"]
    assert rel(ws, resolve_import(imps[0], app, "java", ws, member="Strings")) == want  # import a.b.C
    assert rel(ws, resolve_import(imps[1], app, "java", ws)) == want  # import static a.b.C.m
    assert resolve_import(imps[2], app, "java", ws, member="List") == []
    main = FIXTURES / "c/src/main.c"
    inc = find_imports(main.read_text(), "c")
    assert [i.module for i in inc] == ["local.h", "include/vec.h"]
    assert rel(ws, resolve_import(inc[0], main, "c", ws)) == ["c/src/local.h"]  # beside the file
    assert rel(ws, resolve_import(inc[1], main, "cpp", ws)) == ["c/include/vec.h"]  # from a root


class DictLookup:
    """What a Workspace offers import resolution, over a dict of files."""

    def __init__(self, root: Path, files: dict[str, str]) -> None:
        self.root = root
        self.texts = {root / k: v for k, v in files.items()}

    def exists(self, path: Path) -> bool:
        return Path(path) in self.texts

    def read(self, path: Path) -> str | None:
        return self.texts.get(Path(path))

    def relative(self, path: Path) -> str:
        return Path(path).relative_to(self.root).as_posix()

    def files_named(self, name: str) -> list[Path]:
        return [p for p in self.texts if p.name == name]

    def files(self) -> Iterable[Path]:
        return iter(self.texts)


def test_resolution_through_a_dict_lookup() -> None:
    root = Path("/proj")
    lookup = DictLookup(root, {
        "go.mod": "module github.com/me/proj\n", "api/server.go": "package api\n", "api/x_test.go": "",
        "a/pkg/mod.py": "", "b/pkg/mod.py": "", "b/pkg/__init__.py": "", "web/lib/x.tsx": "",
    })  # fmt: skip
    go = Import("github.com/me/proj/api", alias="api")
    assert resolve_import(go, root / "main.go", "go", lookup) == [root / "api/server.go"]  # via files()
    near_b = resolve_import(Import("pkg.mod", alias="pkg.mod"), root / "b/run.py", "python", lookup)
    assert near_b == [root / "b/pkg/mod.py", root / "a/pkg/mod.py"]  # the one beside the file first
    assert resolve_import(Import("./lib/x"), root / "web/app.ts", "tsx", lookup) == [root / "web/lib/x.tsx"]
    assert resolve_import(Import("./x"), root / "a.kt", "kotlin", lookup) == []


def test_multi_line_statements_keep_their_lines() -> None:
    ts = "const a = 1;\nimport {\n  x,\n  y as z,\n} from './m';\nfoo(a);\nimport w from './w';\n"
    found = find_imports(ts, "typescript")
    assert brief(found) == [("./m", names("x", "y:z"), 0, None, False), ("./w", names("default:w"), 0, None, False)]
    assert [(i.line, i.end_line) for i in found] == [(1, 4), (6, 6)]
    rust = "fn f() {}\nuse crate::a::{\n    B,\n    c::D,\n};\n"
    assert brief(find_imports(rust, "rust")) == [("crate::a", names("B"), 0, None, False),
                                                 ("crate::a::c", names("D"), 0, None, False)]  # fmt: skip
    py = "x = 1\nif TYPE_CHECKING:\n    from a import (\n        B,\n    )\ntry:\n    import c \\\n        as d\nexcept ImportError:\n    pass\n"
    assert brief(find_imports(py, "python")) == [("a", names("B"), 0, None, False), ("c", (), 0, "d", False)]


def test_typing_outside_the_imports_parses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from dspark_lsp.context import imports

    calls: list[str] = []
    real = imports.parse
    monkeypatch.setattr(imports, "parse", lambda text, lang: calls.append(text) or real(text, lang))
    head = "import os\nfrom .unique_module_for_this_test import thing\n\n"
    first = find_imports(head + "x = thi", "python")
    again = find_imports(head + "x = thing(", "python")
    assert first == again and len(first) == 2
    assert len(calls) == 1 and "x = " not in calls[0]  # only the import lines were parsed, once
    find_imports(head + "import sys\n", "python")
    assert len(calls) == 2


def test_reexports_are_found_but_bind_nothing() -> None:
    src = "export * from './a'\nexport { b, c as d } from './b'\nexport const x = 1\nconst s = 'import y from z'\n"
    found = find_imports(src, "typescript")
    assert brief(found) == [("./a", (), 0, None, True), ("./b", names("b", "c:d"), 0, None, False)]
    assert all(i.reexport for i in found)
    assert not find_imports("import {a} from './a'\n", "typescript")[0].reexport


def test_import_words_mid_line_start_no_statement() -> None:
    src = "x = 'from a import b'\ny = 1  # import os\nimport real\n"
    assert [i.module for i in find_imports(src, "python")] == ["real"]


def test_package_files(ws: Workspace) -> None:
    from dspark_lsp.context.imports import package_files

    cart = FIXTURES / "go/cart/cart.go"
    assert rel(ws, package_files(cart, "go", ws)) == ["go/cart/sum.go", "go/cart/tax.go"]  # no tests, not itself
    test = FIXTURES / "go/cart/cart_test.go"
    assert "go/cart/cart.go" in rel(ws, package_files(test, "go", ws))
    joiner = FIXTURES / "java/src/main/java/com/acme/util/Joiner.java"
    assert rel(ws, package_files(joiner, "java", ws, "Strings")) == ["java/src/main/java/com/acme/util/Strings.java"]
    assert package_files(joiner, "java", ws, "Nope") == [] and package_files(cart, "python", ws) == []

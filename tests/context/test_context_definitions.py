"""Definitions of the imported names used near the cursor: outlines per language, resolution through the
fixture projects to the right file and definition, nearest first, within the budget, fast; and files that
cannot be read safely (outside the workspace, a link loop, binary, huge, unreadable) skipped with a log line."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from dspark_lsp.context import workspace as ws_mod
from dspark_lsp.context.definitions import definitions_for
from dspark_lsp.context.outline import outline
from dspark_lsp.context.types import ContextFile
from dspark_lsp.context.workspace import Workspace

FIXTURES = Path(__file__).parent / "context_fixtures"
WS_LOG = "dspark_lsp.context.workspace"


# -- outlines --------------------------------------------------------------------------------------
PY = '''"""Mod doc."""
MAX = 10


@dataclass
class Point(Base):
    """A point.

    More text."""

    x: int = 0

    def move(self, dx: int,
             dy: int) -> "Point":
        """Move it."""
        return self

    @property
    def norm(self):
        return 1


def helper(config, *, retries=3):
    """Connect to the host.

    Uses config['host'].
    """
    return 1
'''


def test_python_outlines() -> None:
    assert outline(PY, "python", "helper") == (
        "def helper(config, *, retries=3):\n"
        '    """Connect to the host.\n\n    Uses config[\'host\'].\n    """\n    ...'
    )
    cls = outline(PY, "python", "Point")
    assert cls == (
        '@dataclass\nclass Point(Base):\n    """A point."""\n    x: int = 0\n'
        '    def move(self, dx: int,\n             dy: int) -> "Point":\n        """Move it."""\n'
        "    @property\n    def norm(self): ..."
    )
    assert "return self" not in cls and "More text" not in cls
    assert outline(PY, "python", "MAX") == "MAX = 10"
    assert outline(PY, "python", "missing") is None and outline(PY, "cobol", "x") is None
    module = outline(PY, "python")
    assert module is not None and module.startswith('"""Mod doc."""\n\nMAX = 10\n\n@dataclass\nclass Point(Base):')
    assert module.endswith('def helper(config, *, retries=3):\n    """Connect to the host."""')


def test_outline_within_max_chars() -> None:
    big = "class Big:\n" + "".join(f"    def method_{i}(self, a, b):\n        return a\n" for i in range(200))
    for limit in (20, 100, 1000):
        for name in ("Big", None):
            got = outline(big, "python", name, max_chars=limit)
            assert got is not None and len(got) <= limit
    assert outline(big, "python", "Big", max_chars=5) is None  # not even the header fits
    full = outline(big, "python", "Big", max_chars=100_000)
    assert full is not None and full.count("def method_") == 200


def test_js_family_outlines() -> None:
    ts = ('/** Adds. */\nexport function add(a: number, b: number): number { return a + b; }\n'
          'export default class Vector<T> extends Base {\n  x = 0;\n  constructor(x: T) { this.x = 1; }\n'
          '  length(): number { return 1; }\n}\nexport const twice = (n: number) => n * 2;\n'
          'export interface Shape {\n  area(): number;\n}\nexport type Id = string | number;\n')  # fmt: skip
    assert outline(ts, "typescript", "add") == "/** Adds. */\nexport function add(a: number, b: number): number { ... }"
    vector = outline(ts, "typescript", "default")
    assert vector == outline(ts, "typescript", "Vector") == (
        "export default class Vector<T> extends Base {\n  x = 0\n  constructor(x: T) { ... }\n"
        "  length(): number { ... }\n}"
    )
    assert outline(ts, "typescript", "twice") == "export const twice = (n: number) => ..."
    assert outline(ts, "typescript", "Shape") == "export interface Shape {\n  area(): number;\n}"
    assert outline(ts, "tsx", "Id") == "export type Id = string | number;"
    js = "function greet(name) {\n  return 'hi ' + name;\n}\nmodule.exports = { greet };\n"
    assert outline(js, "javascript", "greet") == "function greet(name) { ... }"


def test_go_rust_java_c_outlines() -> None:
    go = (FIXTURES / "go/cart/cart.go").read_text()
    assert outline(go, "go", "Total") == "// Total sums the prices.\nfunc Total(items []Item) int { ... }"
    item = outline(go, "go", "Item")
    assert item is not None and item.startswith("// Item is one line of a cart.\ntype Item struct {\n\tSKU   string")
    assert item.endswith("func (i *Item) Discount(pct int) int { ... }")  # the type's methods come along
    rust = (FIXTURES / "rust/src/shapes.rs").read_text()
    assert outline(rust, "rust", "Square") == (
        "/// A square.\npub struct Square { pub side: f64 }\n\nimpl Square {\n    pub fn area(&self) -> f64 { ... }\n}"
    )
    trait = "pub trait Tr { fn f(&self); fn g(&self) -> i32 { 1 } }\npub const MAX: u32 = 5;\n"
    assert outline(trait, "rust", "Tr") == "pub trait Tr {\n    fn f(&self);\n    fn g(&self) -> i32 { ... }\n}"
    assert outline(trait, "rust", "MAX") == "pub const MAX: u32 = 5;"
    java = (FIXTURES / "java/src/main/java/com/acme/util/Strings.java").read_text()
    assert outline(java, "java", "Strings") == (
        "/** String helpers. */\npublic final class Strings {\n  public static final int LIMIT = 80;\n"
        "  public static String padLeft(String s, int width) { ... }\n}"
    )
    assert outline(java, "java", "padLeft") == "  /** Pads on the left. */\n  public static String padLeft(String s, int width) { ... }"
    header = (FIXTURES / "c/include/vec.h").read_text()  # inside an include guard
    assert outline(header, "c", "vec_add") == "vec2 vec_add(vec2 a, vec2 b);"
    assert outline(header, "c", "vec2") == "/* A 2-D vector. */\ntypedef struct { double x, y; } vec2;"
    cpp = ("namespace geo {\nclass Shape : public Base {\npublic:\n  Shape(int n);\n  int sides() const { return n_; }\n"
           "private:\n  int n_;\n};\ntemplate <typename T> T maxof(T a, T b) { return a; }\n}\n")  # fmt: skip
    assert outline(cpp, "cpp", "Shape") == (
        "class Shape : public Base {\npublic:\n  Shape(int n);\n  int sides() const { ... }\nprivate:\n  int n_;\n}"
    )
    assert outline(cpp, "cpp", "maxof") == "template <typename T> T maxof(T a, T b) { ... }"


# -- definitions over the fixture projects -----------------------------------------------------------
@pytest.fixture(scope="module")
def ws() -> Workspace:
    w = Workspace([FIXTURES])
    w.start()
    assert w.wait(10)
    return w


def at(rel: str, marker: str, cut: bool = False) -> tuple[str, int]:
    """The fixture's text and the offset right after ``marker`` (``cut``: the text ends there, as while
    typing at the end of a line)."""
    text = (FIXTURES / rel).read_text()
    offset = text.index(marker) + len(marker)
    return (text[:offset], offset) if cut else (text, offset)


def defs(ws: Workspace, rel: str, marker: str, language: str, *, cut: bool = False,
         max_chars: int = 4000) -> list[ContextFile]:  # fmt: skip
    text, offset = at(rel, marker, cut)
    return definitions_for(text, offset, rel, language, ws, max_chars=max_chars)


def test_python_names_near_the_cursor(ws: Workspace) -> None:
    got = defs(ws, "py/app/main.py", "return helper(", "python", cut=True)
    assert [d.path for d in got] == ["py/pkg/util.py", "py/pkg/sub/mod.py"]  # helper nearest, then m.deep
    assert all(d.source == "definition" for d in got)
    util = got[0].text
    assert util.startswith("def helper(config, *, retries=MAX_RETRIES):\n    \"\"\"Connect to config['host']")
    assert "class Client:" in util and "def get(self, path: str) -> bytes:" in util  # `C` (an alias) too
    assert util.count("class Client:") == 1 and "_private" not in util and "return config" not in util
    assert got[1].text == 'def deep(a, b):\n    """Deep."""\n    ...'
    near_m = defs(ws, "py/app/main.py", "value = m.deep(", "python", cut=True)
    assert [d.path for d in near_m][0] == "py/pkg/sub/mod.py"  # now m.deep is the nearest


def test_a_module_alias_being_typed_gives_the_module_outline(ws: Workspace) -> None:
    text, offset = at("py/app/main.py", "value = m")
    text = text[:offset] + "." + text[offset:]
    got = definitions_for(text, offset + 1, "py/app/main.py", "python", ws, max_chars=4000)
    assert got[0].path == "py/pkg/sub/mod.py" and "RATE = 0.5" in got[0].text and "def deep(a, b):" in got[0].text


def test_the_current_path_may_be_absolute_relative_or_unknown(ws: Workspace) -> None:
    text, offset = at("py/app/main.py", "return helper(")
    expect = definitions_for(text, offset, "py/app/main.py", "python", ws, max_chars=4000)
    assert definitions_for(text, offset, str(FIXTURES / "py/app/main.py"), "python", ws, max_chars=4000) == expect
    # Unknown: absolute imports still resolve (from the project's files), relative ones cannot.
    assert definitions_for(text, offset, None, "python", ws, max_chars=4000) == expect


def test_js_family_definitions(ws: Workspace) -> None:
    got = defs(ws, "ts/src/app.ts", "new Vector(plus(", "typescript", cut=True)
    assert [d.path for d in got] == ["ts/src/lib/math.ts"]
    assert got[0].text.startswith("/** Adds two numbers. */\nexport function add(a: number, b: number): number")
    assert "export default class Vector {" in got[0].text  # the default import
    ns = defs(ws, "ts/src/app.ts", "let s: lib.Shape", "typescript")
    assert ns[0] == ContextFile("ts/src/lib/index.ts", "export interface Shape {\n  area(): number;\n  name: string;\n}", "definition")
    text = "const { greet, shout: loud } = require('./util');\nloud("
    req = definitions_for(text, len(text), "ts/src/new.js", "javascript", ws, max_chars=4000)
    assert req == [ContextFile("ts/src/util.js", "function shout(name) { ... }", "definition")]


def test_go_rust_java_c_definitions(ws: Workspace) -> None:
    go = defs(ws, "go/main.go", "c.Total(", "go")
    assert go == [ContextFile("go/cart/cart.go", "// Total sums the prices.\nfunc Total(items []Item) int { ... }", "definition")]
    text = 'package main\n\nimport c "example.com/shop/cart"\n\nvar r = c.Rate + c.Item'
    go2 = definitions_for(text, len(text), "go/other.go", "go", ws, max_chars=4000)
    assert [d.path for d in go2] == ["go/cart/cart.go", "go/cart/tax.go"]  # Item nearest, then Rate
    assert "func (i *Item) Discount" in go2[0].text and go2[1].text == "const Rate = 20"
    text = (FIXTURES / "rust/src/shapes.rs").read_text() + "\nfn f() { let r = R { lo: 0.0, hi: 1.0 }; clamp("
    rust = definitions_for(text, len(text), "rust/src/shapes.rs", "rust", ws, max_chars=4000)
    assert [d.path for d in rust] == ["rust/src/util/mod.rs"]
    assert rust[0].text == "/// Clamps a value.\npub fn clamp(x: f64, lo: f64, hi: f64) -> f64 { ... }\n\npub struct Range { pub lo: f64, pub hi: f64 }"
    java = defs(ws, "java/src/main/java/com/acme/App.java", "Strings.padLeft(", "java")
    assert [d.path for d in java] == ["java/src/main/java/com/acme/util/Strings.java"]
    assert java[0].text.startswith("/** String helpers. */\npublic final class Strings {")
    c = defs(ws, "c/src/main.c", "vec_add(", "c")
    assert c[0] == ContextFile("c/include/vec.h", "vec2 vec_add(vec2 a, vec2 b);\n\n/* A 2-D vector. */\ntypedef struct { double x, y; } vec2;", "definition")
    assert c[1] == ContextFile("c/src/local.h", "#define LOCAL_MAX 4", "definition")


def test_budget_is_never_exceeded(ws: Workspace) -> None:
    text, offset = at("py/app/main.py", "return helper(")
    sizes = []
    for limit in range(0, 1200, 23):
        got = definitions_for(text, offset, "py/app/main.py", "python", ws, max_chars=limit)
        total = sum(len(d.text) for d in got)
        assert total <= limit
        assert limit < 50 or got[0].path == "py/pkg/util.py"  # the nearest first once its signature fits
        sizes.append(total)
    assert sizes[0] == 0 and max(sizes) == sizes[-1] > 400  # a big enough budget holds everything


def test_nothing_without_imports_language_or_workspace(ws: Workspace, tmp_path: Path) -> None:
    assert definitions_for("x = 1\nprint(x)", 5, "a.py", "python", ws, max_chars=1000) == []
    assert definitions_for("from pkg import util", 5, "a.kt", "kotlin", ws, max_chars=1000) == []
    (tmp_path / "util.py").write_text("def f(): pass\n")
    empty = Workspace([])  # the client named no folder: nothing is read
    text = "from util import f\nf("
    assert definitions_for(text, len(text), str(tmp_path / "a.py"), "python", empty, max_chars=1000) == []
    inside = Workspace([tmp_path])
    assert [d.path for d in definitions_for(text, len(text), str(tmp_path / "a.py"), "python", inside, max_chars=1000)] == ["util.py"]


class BrokenLookup:
    def exists(self, path: Path) -> bool:
        raise OSError("disk gone")

    def read(self, path: Path) -> str | None:
        raise OSError("disk gone")

    def relative(self, path: Path) -> str:
        raise OSError("disk gone")

    def files_named(self, name: str) -> list[Path]:
        raise OSError("disk gone")

    def files(self) -> list[Path]:
        raise OSError("disk gone")


def test_a_failing_lookup_costs_the_definitions_not_the_completion(caplog: pytest.LogCaptureFixture) -> None:
    text = "from .util import f\nimport pkg.mod as m\nf(m."
    assert definitions_for(text, len(text), "a/b.py", "python", BrokenLookup(), max_chars=1000) == []
    assert any("failed" in r.getMessage() for r in caplog.records)


# -- unsafe files ----------------------------------------------------------------------------------
def skipped(caplog: pytest.LogCaptureFixture, reason: str) -> bool:
    return any(r.name == WS_LOG and f": {reason}" in r.getMessage() for r in caplog.records)


def project(tmp_path: Path) -> tuple[Path, str]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.py").write_text("def token(): ...\n")
    (root / "secret.py").symlink_to(outside / "secret.py")
    (root / "loop.py").symlink_to(root / "loop.py")
    (root / "blob.py").write_bytes(b"def b():\n    pass\n\0\0\0")
    with open(root / "huge.py", "wb") as f:
        f.write(b"def h(): pass\n")
        f.truncate(50 * 1024 * 1024)
    (root / "locked").mkdir()
    (root / "locked" / "mod.py").write_text("def f(): pass\n")
    (root / "bad.py").write_bytes(b"def name():\n    return '\xff\xfe'\n")
    (root / "good.py").write_text("def ok(a): pass\n")
    text = ("from .secret import token\nfrom loop import x\nfrom blob import b\nfrom huge import h\n"
            "from locked.mod import f\nfrom bad import name\nfrom good import ok\n\n"
            "ok(token(), x, b, h, f, name(")  # fmt: skip
    return root, text


def test_unsafe_files_are_skipped_with_a_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    root, text = project(tmp_path)
    real_open = os.open
    locked = str(root / "locked")

    def os_open(path: str, flags: int, *a: object) -> int:
        if str(path).startswith(locked):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *a)

    monkeypatch.setattr(ws_mod.os, "open", os_open)
    caplog.set_level(logging.INFO, WS_LOG)
    ws = Workspace([root])
    ws.start()
    assert ws.wait(10)
    began = time.monotonic()
    got = definitions_for(text, len(text), str(root / "app.py"), "python", ws, max_chars=4000)
    took = time.monotonic() - began
    assert [d.path for d in got] == ["bad.py", "good.py"]
    assert got[0].text == "def name(): ..."  # invalid UTF-8 decoded with replacement, still outlined
    assert took < 0.5  # the 50 MB file is refused from its size, never read
    assert skipped(caplog, "outside the workspace folders")  # the link to outside/secret.py
    assert skipped(caplog, "a link not followed (a folder, a loop, or leading out)")  # the walk: the loop
    assert skipped(caplog, "binary")
    assert skipped(caplog, f"larger than {ws.limits.max_file_bytes} bytes")
    assert skipped(caplog, "unreadable (Permission denied)")
    assert not ws.exists(root / "loop.py")  # the link loop resolves nowhere: never read, never hangs
    lines = len(caplog.records)
    definitions_for(text, len(text), str(root / "app.py"), "python", ws, max_chars=4000)
    assert len([r for r in caplog.records[lines:] if r.name == WS_LOG]) == 0  # logged once, not per keystroke


def test_fast_on_a_two_thousand_line_file(ws: Workspace) -> None:
    head = "import pkg.sub.mod as m\nfrom pkg.util import Client as C, helper\n\n"
    body = "".join(f"def f{i}(config):\n    client = C(config['url'])\n    value = m.deep({i}, 2)\n"
                   f"    return helper(config, retries=value)\n\n" for i in range(400))  # fmt: skip
    text = head + body
    assert text.count("\n") >= 2000
    offset = len(text) // 2
    first = definitions_for(text, offset, "py/app/big.py", "python", ws, max_chars=3000)
    assert [d.path for d in first] == ["py/pkg/sub/mod.py", "py/pkg/util.py"]
    times = []
    for k in range(5):  # each keystroke a new text: the imports' lines and other files' outlines are cached
        typed = text[:offset] + "x" * (k + 1) + text[offset:]
        began = time.perf_counter()
        got = definitions_for(typed, offset + k + 1, "py/app/big.py", "python", ws, max_chars=3000)
        times.append(time.perf_counter() - began)
        assert got == first
    assert min(times) < 0.020, times


def test_barrel_reexports_are_followed(ws: Workspace) -> None:
    got = defs(ws, "ts/src/use_barrel.ts", "isPlain(new Widget(", "typescript")
    assert got == [
        ContextFile("ts/src/barrel/utils/thing.ts", "export class Thing {\n  size = 1\n}", "definition"),
        ContextFile("ts/src/barrel/utils/common.ts",
                    "/** Is it a plain object? */\nexport function isPlain(x: unknown): boolean { ... }", "definition"),
    ]  # fmt: skip  (Widget is `Thing as Widget`; index.ts <-> loop.ts re-export each other: no hang)
    text = "import { nothing } from './barrel'\nnothing("
    assert definitions_for(text, len(text), "ts/src/x.ts", "typescript", ws, max_chars=4000) == []


def test_names_of_the_own_package(ws: Workspace) -> None:
    go = defs(ws, "go/cart/sum.go", "return Total(", "go")  # Total lives in cart.go, no import needed
    assert go[0].path == "go/cart/cart.go"
    assert go[0].text.startswith("// Total sums the prices.\nfunc Total(items []Item) int { ... }\n\n")
    assert "type Item struct {" in go[0].text  # `[]Item` in the signature above: the same file, one piece
    java = defs(ws, "java/src/main/java/com/acme/util/Joiner.java", "Strings.padLeft(", "java")
    assert [d.path for d in java] == ["java/src/main/java/com/acme/util/Strings.java"]
    assert "public static String padLeft(String s, int width)" in java[0].text


class SlowLookup:
    """A workspace on a slow disk: every read takes 30 ms."""

    def __init__(self, inner: Workspace) -> None:
        self.inner = inner
        self.roots = inner.roots
        self.reads = 0

    def exists(self, path: Path) -> bool:
        return self.inner.exists(path)

    def read(self, path: Path) -> str | None:
        self.reads += 1
        time.sleep(0.03)
        return self.inner.read(path)

    def relative(self, path: Path) -> str:
        return self.inner.relative(path)

    def files_named(self, name: str) -> list[Path]:
        return self.inner.files_named(name)

    def files(self) -> list[Path]:
        return list(self.inner.files())


def test_a_slow_disk_costs_pieces_not_time(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "dspark_lsp.context.definitions")
    for i in range(6):
        (tmp_path / f"f{i}.go").write_text(f"package p\n\nfunc F{i}() int {{ return {i} }}\n")
    inner = Workspace([tmp_path])
    slow = SlowLookup(inner)
    text = "package p\n\nvar x = F0() + F1() + F2() + F3() + F4() + F5()\n"
    began = time.monotonic()
    got = definitions_for(text, len(text), "main.go", "go", slow, max_chars=4000)
    took = time.monotonic() - began
    assert slow.reads == 2 and took < 0.5  # 60 ms spent > the 50 ms budget: no third file is read
    assert 1 <= len(got) <= 2
    assert sum("the rest skipped" in r.getMessage() for r in caplog.records) == 1
    fast = definitions_for(text, len(text), "main.go", "go", inner, max_chars=4000)
    assert len(fast) == 6  # the same request without the slow disk gets every piece
    unbounded = definitions_for(text, len(text), "main.go", "go", SlowLookup(inner), max_chars=4000,
                                read_budget_s=None)  # fmt: skip
    assert unbounded == fast  # a batch run: no limit, the same answer however slow the disk

"""Labelled stop indices: document with a cursor marker, generated text, where it must be cut."""

from __future__ import annotations

import pytest

from dspark_lsp.syntax import Scope, SyntaxDocument
from dspark_lsp.syntax.stops import brackets_balanced

CURSOR = "<|>"

# (language, document with cursor, generated text, expected kept text or None = keep going)
CASES: list[tuple[str | None, str, str, str | None]] = [
    # single line: end of the line; the rest of the cursor line is not typed twice
    ("python", "x = foo(<|>)\n", "a, b)\nprint(x)", "a, b"),
    ("python", "x = foo(<|>)\n", "bar(1)", None),  # "bar(" + ")" would unbalance: keep going
    ("python", "x = foo(<|>)\n", "bar(1))", "bar(1)"),
    ("python", "total = <|>\n", "a + b\nmore", "a + b"),
    ("python", "total = <|>\n", "a + b", None),
    ("javascript", "call(<|>);\n", "x, y);\n", "x, y"),
    ("go", "fmt.Println(<|>)\n", '"hi")', '"hi"'),
    # python multi-line: dedent, blank line + top-level, suffix start, repeats
    ("python", "def f(x):<|>\n", "\n    return x\n\ndef g():\n    pass\n", "\n    return x"),
    ("python", "def f(x):<|>\n", "\n    y = x\n    return y\nprint(f(1))", "\n    y = x\n    return y"),
    ("python", "def f(x):\n    <|>\n    return y\n", "y = x * 2\n    return y\n", "y = x * 2"),
    ("python", "def f(x):\n    <|>\n", "if x:\n        return 1\n    return 2\n", None),
    ("python", "def f(x):\n    <|>\n", 'doc = """\nnot a dedent\n"""\n    return doc\n', None),
    ("python", "for a in b:\n    print(a)\n    <|>\n", "print(a)\n    print(a)\n", ""),
    ("python", "for a in b:\n    pass\n    <|>\n", "pass\n    x = 1\n", None),  # short lines may repeat
    ("python", "print(a_long_thing)\n<|>\n", "print(a_long_thing)\n", ""),
    ("python", "<|>\n", "x_value = 1\nx_value = 1\nx_value = 1\nx_value = 1\n", "x_value = 1\nx_value = 1"),
    ("python", "def f():<|>\n", "\nreturn 1\n", ""),
    # braces: the brace that closes the enclosing block
    ("javascript", "function f() {<|>\n}\n", "\n  return 1;\n}\n", "\n  return 1;"),
    ("javascript", "function f() {<|>\n", "\n  return 1;\n}\nfunction g() {}", "\n  return 1;\n}"),
    (
        "javascript",
        "function f() {<|>}\n",
        "\n  if (a) { b(); }\n  return 1;\n}",
        "\n  if (a) { b(); }\n  return 1;",
    ),
    ("javascript", "function f() {<|>\n}\n", '\n  s = "}";\n  t = 1;\n', None),  # a brace in a string
    (
        "c",
        "int main(void) {\n  <|>\n}\n",
        "int x = 0;\n  // }\n  return x;\n}\n",
        "int x = 0;\n  // }\n  return x;",
    ),
    ("go", "func main() {\n\t<|>\n}\n", "x := 1\n\tfmt.Println(x)\n}\n", "x := 1\n\tfmt.Println(x)"),
    (
        "rust",
        "fn main() {\n    <|>\n}\n",
        'let v = 1;\n    println!("{}", v);\n}',
        'let v = 1;\n    println!("{}", v);',
    ),
    ("java", "class A {\n  void f() {\n    <|>\n  }\n}\n", "int x = 1;\n  }\n", "int x = 1;"),
    ("cpp", "<|>\n", "int g() {\n  return 1;\n}\n\nint h() {\n", "int g() {\n  return 1;\n}"),
    (
        "typescript",
        "class C {\n  m() {\n    <|>\n  }\n  n() {}\n}\n",
        "return 1;\n  }\n  n() {}\n",
        "return 1;",
    ),
    # element lists (a blank line in a literal / argument list): the elements up to the bracket's closer
    ("python", "x = [\n    1,\n    <|>\n]\n", "2,\n    3,\n]\nprint(x)\n", "2,\n    3,"),
    ("python", "f(\n    a,\n    <|>\n)\n", "b,\n    c)\nprint(f)\n", "b,\n    c"),  # the closer is there
    ("python", "f(\n    a,\n    <|>\n", "b,\n    c)\nprint(f)\n", "b,\n    c)"),  # not there: kept
    ("python", "x = [\n    1,\n    <|>\n]\n", "(2, 3),\n    [4],\n]\n", "(2, 3),\n    [4],"),
    ("javascript", "const a = [\n  1,\n  <|>\n];\n", "2,\n  3,\n];\nconsole.log(a);\n", "2,\n  3,"),
    ("javascript", "const o = {\n  a: 1,\n  <|>\n};\n", "b: 2,\n  c: [3],\n};\n", "b: 2,\n  c: [3],"),
    ("c", "int a[] = {\n  1,\n  <|>\n};\n", "2,\n  3\n};\nint b;\n", "2,\n  3"),
    # plain text: indentation rules
    (None, "items:<|>\n", "\n  - one\n  - two\nnext:", "\n  - one\n  - two"),
]


def run_case(language: str | None, doc_text: str, generated: str, step: int) -> int | None:
    offset = doc_text.index(CURSOR)
    doc = SyntaxDocument(doc_text.replace(CURSOR, "", 1), language)
    tracker = doc.generation(offset, doc.completion_scope(offset))
    cut = None
    for end in range(step, len(generated) + step, step):
        piece = generated[:end]
        tracker.is_key_next(piece)
        cut = tracker.stop_index(piece)
        if cut is not None:
            return cut
    return cut


@pytest.mark.parametrize(("language", "doc_text", "generated", "want"), CASES)
@pytest.mark.parametrize("step", [1, 4, 1000])
def test_stop_case(language: str | None, doc_text: str, generated: str, want: str | None, step: int) -> None:
    cut = run_case(language, doc_text, generated, step)
    got = None if cut is None else generated[:cut]
    assert got == want


def test_final_flag_judges_the_last_line() -> None:
    doc = SyntaxDocument("def f(x):\n    \n    return y\n", "python")
    tracker = doc.generation(14, Scope.MULTI_LINE)
    assert tracker.stop_index("y = x\n    return y") is None  # the line may still grow
    assert tracker.stop_index("y = x\n    return y", final=True) == len("y = x")


def test_rollback_replays() -> None:
    doc = SyntaxDocument("x = foo(<|>)\n".replace(CURSOR, ""), "python")
    tracker = doc.generation(8, Scope.SINGLE_LINE)
    assert tracker.stop_index("a\nb") == 1
    assert tracker.stop_index("bc") is None  # a different text: the old stop no longer applies
    assert tracker.stop_index("bc\n") == 2


def test_brackets_balanced() -> None:
    assert brackets_balanced("f(a[1], {b})")
    assert not brackets_balanced("f(")
    assert not brackets_balanced("f)(")


@pytest.mark.parametrize(
    ("doc_text", "generated", "capped", "want"),
    [
        # The budget ran out mid-line: the complete lines are the completion (eval, HumanEval/1/L4_L12).
        (
            "def f(s):\n    <|>\n",
            "r = []\n    for c in s:\n        r.append(c)\n    return ''.join(r[",
            True,
            "r = []\n    for c in s:\n        r.append(c)",
        ),
        # A header left without its body by that cut goes with it.
        ("def f(s):\n    <|>\n", "r = []\n    for c in s:\n        r.app", True, "r = []"),
        # Stopped by EOS instead: the last line is the model's own end and stays.
        ("def f(s):\n    <|>\n", "r = []\n    return r", False, None),
        # A single line cut by the budget is all there is: kept.
        ("def f(s):\n    <|>\n", "return sorted(s, key=len", True, None),
    ],
)
def test_a_line_the_budget_cut_short_is_dropped(
    doc_text: str, generated: str, capped: bool, want: str | None
) -> None:
    offset = doc_text.index(CURSOR)
    doc = SyntaxDocument(doc_text.replace(CURSOR, "", 1), "python")
    tracker = doc.generation(offset, doc.completion_scope(offset))
    cut = tracker.stop_index(generated, final=True, capped=capped)
    assert (None if cut is None else generated[:cut]) == want

"""Labelled completion-scope set: per language, snippets with a cursor marker and the expected scope.

``pytest -q tests/syntax/test_syntax_scope.py -rA`` lists each case; the last test prints per-language accuracy.
"""

from __future__ import annotations

import pytest

from dspark_lsp.syntax import Scope, SyntaxDocument

CURSOR = "<|>"
N, S, M = Scope.NONE, Scope.SINGLE_LINE, Scope.MULTI_LINE

CASES: dict[str | None, list[tuple[str, Scope]]] = {
    "python": [
        ("x = fo<|>o\n", N),
        ("x = foo(<|>)\n", S),
        ("def f():<|>\n", M),
        ("def f():\n    <|>\n", M),
        ("def f():\n    x = 1\n    <|>\n    return x\n", M),
        ("x = [\n    1,\n    <|>\n]\n", M),  # the elements after: eval, multi-line set
        ("# a comm<|>\n", S),
        ('s = "hel<|>lo"\n', N),
        ('s = "hello <|>world"\n', N),
        ('s = "hello, <|>"\n', S),
        ("if x > 1:\n    pass\nelse:<|>\n", M),
        ("total = <|>\n", S),
        ("class A:\n    def m(self):\n        <|>\n", M),
    ],
    "javascript": [
        ("const x = fo<|>o;\n", N),
        ("function f() {<|>\n", M),
        ("function f() {<|>}\n", M),
        ("function f() {\n  <|>\n}\n", M),
        ("const o = {\n  a: 1,\n  <|>\n};\n", M),
        ("call(<|>);\n", S),
        ("// todo: <|>\n", S),
        ("const s = `a ${<|>}`;\n", S),
        ("let y = <|>\n", S),
    ],
    "typescript": [
        ("let n: numb<|>er = 1;\n", N),
        ("interface A {\n  <|>\n}\n", M),
        ("function f(a: string): void {<|>\n", M),
        ("const v = g(<|>);\n", S),
        ("/* block <|> */\n", S),
        ("class C {\n  m() {\n    <|>\n  }\n}\n", M),
    ],
    "tsx": [
        ("const App = () => {\n  <|>\n};\n", M),
        ("const a = use<|>State(0);\n", N),
        ("function F() {<|>\n", M),
        ("const s = 'ab<|>';\n", S),
        ("f(1, <|>);\n", S),
        ("if (ok) {<|>}\n", M),
    ],
    "go": [
        ("func main() {\n\t<|>\n}\n", M),
        ("func main() {<|>\n", M),
        ("x := fo<|>o()\n", N),
        ("fmt.Println(<|>)\n", S),
        ("// comment <|>\n", S),
        ("r := '<|>a'\n", N),
        ("type T struct {\n\t<|>\n}\n", M),
    ],
    "rust": [
        ("fn main() {\n    <|>\n}\n", M),
        ("fn main() {<|>\n", M),
        ("let v = ve<|>c![1];\n", N),
        ("let v = foo(<|>);\n", S),
        ("// note <|>\n", S),
        ('let s = "a<|>b";\n', N),
        ("impl A {\n    <|>\n}\n", M),
        ("let x = <|>\n", S),
    ],
    "java": [
        ("class A {\n  void f() {\n    <|>\n  }\n}\n", M),
        ("class A {<|>\n", M),
        ("class A {\n  int x = fo<|>o;\n}\n", N),
        ("class A {\n  void f() { g(<|>); }\n}\n", S),
        ("// hello <|>\n", S),
        ("class A {\n  <|>\n}\n", M),
    ],
    "c": [
        ("int main(void) {\n  <|>\n}\n", M),
        ("int main(void) {<|>\n", M),
        ("int x = fo<|>o;\n", N),
        ('printf("%d\\n", <|>);\n', S),
        ("/* note <|> */\n", S),
        ("int a[] = {\n  1,\n  <|>\n};\n", M),
        ("char c = '<|>x';\n", N),
    ],
    "cpp": [
        ("int main() {\n  <|>\n}\n", M),
        ("namespace ns {<|>\n", M),
        ("std::vector<int> v = fo<|>o();\n", N),
        ("std::cout << f(<|>);\n", S),
        ("// c++ <|>\n", S),
        ("class K {\n public:\n  <|>\n};\n", M),
    ],
    None: [  # plain text fallback
        ("hel<|>lo\n", N),
        ("hello <|>\n", S),
        ("block:<|>\n", M),
        ("\n<|>\n", M),
        ("a (<|>) b\n", S),
        ("x {<|>\n", M),
    ],
}

FLAT = [(lang, snippet, want) for lang, cases in CASES.items() for snippet, want in cases]


def scope_of(language: str | None, snippet: str) -> Scope:
    offset = snippet.index(CURSOR)
    doc = SyntaxDocument(snippet.replace(CURSOR, "", 1), language)
    return doc.completion_scope(offset)


@pytest.mark.parametrize(
    ("language", "snippet", "want"), FLAT, ids=[f"{c[0]}-{i}" for i, c in enumerate(FLAT)]
)
def test_scope_case(language: str | None, snippet: str, want: Scope) -> None:
    assert scope_of(language, snippet) is want


def test_every_language_has_at_least_six_cases() -> None:
    for language, cases in CASES.items():
        assert len(cases) >= 6, language
        assert {want for _, want in cases} >= {S, M}, language


def test_report_accuracy(capsys: pytest.CaptureFixture[str]) -> None:
    lines = []
    total = right = 0
    for language, cases in CASES.items():
        ok = sum(scope_of(language, snippet) is want for snippet, want in cases)
        total, right = total + len(cases), right + ok
        lines.append(f"{language or 'plain'}: {ok}/{len(cases)}")
    with capsys.disabled():
        print("\nscope accuracy: " + ", ".join(lines) + f"; all {right}/{total}")
    assert right == total


def test_open_bracket_before_reads_at_most_its_look_back() -> None:
    """A long line with no break above the look-back floor: the scan starts at the floor, not at the
    document's start (the bound on per-keystroke work held only when a line break was there)."""
    from dspark_lsp.syntax.lexer import Lexicon
    from dspark_lsp.syntax.scope import BRACKET_LOOKBACK_CHARS, open_bracket_before

    real = Lexicon.for_spec(None)
    scanned: list[int] = []

    class Recording:
        line_comment = real.line_comment
        quotes = real.quotes

        def run(self, state, text, on_code=None):  # type: ignore[no-untyped-def]
            scanned.append(len(text))
            return real.run(state, text, on_code)

    text = "  " + "a, " * BRACKET_LOOKBACK_CHARS + "\n  b,\n"
    assert not open_bracket_before(text, len(text), Recording())  # type: ignore[arg-type]
    assert scanned and scanned[0] <= BRACKET_LOOKBACK_CHARS
    text = "m = {\n    'a': 1,\n"
    assert open_bracket_before(text, len(text), real)
    assert not open_bracket_before("m = {'a': 1}\n", len("m = {'a': 1}\n"), real)

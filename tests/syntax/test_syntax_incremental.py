"""Incremental parsing equals a fresh parse; unicode (emoji, CJK) and CRLF documents."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tree_sitter import Parser

from dspark_lsp.syntax import Scope, SyntaxDocument
from dspark_lsp.syntax.languages import load_language

SEED_TEXT = {
    "python": 'def f(x):\n    s = "héllo 🙂"\n    return x + 1  # 注释\n\nclass A:\n    pass\n',
    "javascript": "function f(x) {\n  const s = '日本語 🚀';\n  return x + 1; // ok\n}\n",
    "rust": 'fn main() {\n    let s = "ünï 😀";\n    println!("{}", s);\n}\n',
}
ALPHABET = st.sampled_from(list("abc xyz()[]{}:;=+.,\"'#\n\r\t") + ["é", "🙂", "中", "    "])


def fresh_sexp(language: str, text: str) -> str:
    loaded = load_language(language)
    assert loaded is not None
    return str(Parser(loaded.language).parse(text.encode("utf-8")).root_node)


@st.composite
def edits(draw: st.DrawFn) -> list[tuple[float, float, str]]:
    n = draw(st.integers(min_value=1, max_value=8))
    return [
        (draw(st.floats(0, 1)), draw(st.floats(0, 1)), "".join(draw(st.lists(ALPHABET, max_size=6))))
        for _ in range(n)
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(language=st.sampled_from(sorted(SEED_TEXT)), script=edits())
def test_document_edits_match_fresh_parse(language: str, script: list[tuple[float, float, str]]) -> None:
    doc = SyntaxDocument(SEED_TEXT[language], language)
    model = SEED_TEXT[language]
    for a, b, new in script:
        n = len(doc.text)
        start, end = sorted((int(a * n), int(b * n)))
        doc.apply_edit(start, end, new)
        model = model[:start] + new + model[end:]  # the plain-string model of the same edits
    assert doc.text == model
    assert doc.tree is not None
    assert str(doc.tree.root_node) == fresh_sexp(language, doc.text)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    language=st.sampled_from(sorted(SEED_TEXT)),
    cut=st.floats(0, 1),
    pieces=st.lists(st.lists(ALPHABET, max_size=4).map("".join), min_size=1, max_size=12),
    rollback=st.integers(min_value=0, max_value=3),
)
def test_tracker_appends_match_fresh_parse(
    language: str, cut: float, pieces: list[str], rollback: int
) -> None:
    text = SEED_TEXT[language]
    offset = int(cut * len(text))
    doc = SyntaxDocument(text, language)
    tracker = doc.generation(offset, Scope.MULTI_LINE)
    generated = ""
    for piece in pieces:
        generated += piece
        tracker.is_key_next(generated)
        tracker.stop_index(generated)
    if rollback:  # the decoder may hand back a shorter / different text
        generated = generated[: max(0, len(generated) - rollback)] + "z"
        tracker.is_key_next(generated)
    assert tracker.tree_sexp == fresh_sexp(language, text[:offset] + generated)


def test_document_edit_offsets_are_code_points() -> None:
    doc = SyntaxDocument('s = "🙂🙂"\nx = 1\n', "python")
    doc.apply_edit(6, 7, "中文")  # replace the second emoji (one code point, four UTF-8 bytes)
    assert doc.text == 's = "🙂中文"\nx = 1\n'
    assert str(doc.tree.root_node) == fresh_sexp("python", doc.text)  # type: ignore[union-attr]


def test_unicode_scope_and_keys() -> None:
    text = 'def 函数(x):\n    s = "🙂 emoji"\n    \n'
    doc = SyntaxDocument(text, "python")
    cursor = text.index("    \n") + 4
    assert doc.completion_scope(cursor) is Scope.MULTI_LINE
    assert doc.completion_scope(text.index("emoji")) is Scope.NONE  # mid-word, after an emoji
    tracker = doc.generation(cursor, Scope.MULTI_LINE)
    assert tracker.is_key_next("return 函") is True  # may continue to the known name 函数
    assert tracker.is_key_next('return "🙂 ') is False  # inside a string
    assert tracker.stop_index("return 函数\ndef g():") == len("return 函数")


def test_crlf_documents() -> None:
    text = "def f(x):\r\n    y = 1\r\n    \r\n    return y\r\n"
    doc = SyntaxDocument(text, "python")
    cursor = text.index("    \r\n") + 4
    assert doc.completion_scope(cursor) is Scope.MULTI_LINE
    assert doc.completion_scope(text.index("y = 1") + 5) is Scope.SINGLE_LINE  # end of "y = 1"
    tracker = doc.generation(cursor, Scope.MULTI_LINE)
    gen = "z = y\r\n    return y\r\n"
    assert tracker.stop_index(gen) == len("z = y")  # the suffix's line: cut before its CRLF
    single = doc.generation(text.index("y = 1") + 5, Scope.SINGLE_LINE)
    assert single.stop_index(" + 2\r\n") == len(" + 2")
    assert single.is_key_next(" + ") is True


def test_crlf_braces() -> None:
    text = "int main(void) {\r\n  \r\n}\r\n"
    doc = SyntaxDocument(text, "c")
    cursor = text.index("  \r\n") + 2
    assert doc.completion_scope(cursor) is Scope.MULTI_LINE
    tracker = doc.generation(cursor, Scope.MULTI_LINE)
    assert tracker.stop_index("return 0;\r\n}\r\n") == len("return 0;")

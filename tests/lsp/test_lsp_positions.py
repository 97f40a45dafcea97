"""UTF-16 / UTF-8 / UTF-32 positions, line endings, clamping, and the document store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dspark_lsp.lsp.documents import DocumentStore
from dspark_lsp.lsp.positions import (
    PositionError,
    code_units,
    dominant_line_ending,
    line_starts,
    offset_to_position,
    position_to_offset,
)


def test_emoji_counts_two_utf16_units() -> None:
    text = "a😀b"
    assert position_to_offset(text, 0, 1) == 1  # before the emoji
    assert position_to_offset(text, 0, 3) == 2  # after the emoji (1 + 2 units) -> code point 2
    assert position_to_offset(text, 0, 2) == 1  # inside the surrogate pair: rounds down
    assert offset_to_position(text, 2) == (0, 3)
    assert offset_to_position(text, 3) == (0, 4)


def test_cjk_is_one_utf16_unit_three_utf8_bytes() -> None:
    text = "x = '漢字'"
    assert position_to_offset(text, 0, 7) == 7
    assert position_to_offset(text, 0, 8, encoding="utf-8") == 6  # 漢 is bytes 5..7
    assert position_to_offset(text, 0, 11, encoding="utf-8") == 7
    assert offset_to_position(text, 7, encoding="utf-8") == (0, 11)
    assert offset_to_position("😀x", 1, encoding="utf-32") == (0, 1)


def test_crlf_cr_lf_line_ends() -> None:
    text = "ab\r\ncd\ref\ngh"
    assert line_starts(text) == [0, 4, 7, 10]
    assert position_to_offset(text, 1, 1) == 5
    assert position_to_offset(text, 2, 0) == 7
    assert position_to_offset(text, 3, 2) == 12
    # A character past the line end clamps to the line end, before the line break.
    assert position_to_offset(text, 0, 99) == 2
    assert offset_to_position(text, 3) == (0, 2)  # between \r and \n -> end of line 0


def test_only_lsp_line_breaks_split_lines() -> None:
    # \x0c and \u2028 end lines for str.splitlines() but not for LSP.
    text = "a\x0cb\u2028c\nd"
    assert line_starts(text) == [0, 6]
    assert position_to_offset(text, 1, 1) == 7


def test_line_past_end_strict_and_clamped() -> None:
    text = "one\ntwo"
    with pytest.raises(PositionError):
        position_to_offset(text, 5, 0, strict=True)
    assert position_to_offset(text, 5, 0) == len(text)
    with pytest.raises(PositionError):
        position_to_offset(text, -1, 0)
    # A trailing newline opens a real, empty last line.
    assert position_to_offset("x\n", 1, 0, strict=True) == 2


def test_dominant_line_ending() -> None:
    assert dominant_line_ending("a\r\nb\r\nc\n") == "\r\n"
    assert dominant_line_ending("a\nb") == "\n"
    assert dominant_line_ending("abc") == "\n"


_texts = st.text(alphabet=st.sampled_from(list("ab \t漢😀\r\n\x0c")), max_size=40)


@given(_texts, st.integers(min_value=0, max_value=45))
def test_offset_position_round_trip(text: str, offset: int) -> None:
    offset = min(offset, len(text))
    if 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n":
        offset -= 1  # the middle of a CRLF is not a position
    for encoding in ("utf-16", "utf-8", "utf-32"):
        line, character = offset_to_position(text, offset, encoding=encoding)  # type: ignore[arg-type]
        assert position_to_offset(text, line, character, encoding=encoding, strict=True) == offset  # type: ignore[arg-type]


@given(_texts)
def test_code_units_matches_encoders(text: str) -> None:
    assert code_units(text, "utf-16") == len(text.encode("utf-16-le")) // 2
    assert code_units(text, "utf-8") == len(text.encode("utf-8"))


def test_incremental_changes_apply_in_order() -> None:
    store = DocumentStore()
    store.open("file:///a.py", "def f():\r\n    return 😀1\r\n", 1, "python")
    changes: list[tuple[tuple[int, int, int, int] | None, str]] = [
        ((1, 13, 1, 14), "2"),  # after the emoji (utf-16 col 13) replace "1" with "2"
        ((0, 4, 0, 5), "g"),
        ((2, 0, 2, 0), "x = 1"),
    ]
    doc = store.change("file:///a.py", 2, changes, "utf-16")
    assert doc is not None
    assert doc.text == "def g():\r\n    return 😀2\r\nx = 1"
    assert doc.version == 2
    # Full replacement, then an out-of-range edit clamps to the end.
    store.change("file:///a.py", 3, [(None, "ab"), ((9, 0, 9, 0), "!")], "utf-16")
    assert store.get("file:///a.py").text == "ab!"  # type: ignore[union-attr]
    assert store.change("file:///missing.py", 1, [(None, "x")], "utf-16") is None


def test_lone_surrogates_become_replacement_characters_at_the_same_positions() -> None:
    # A client can send "\ud800" (one half of a pair) in JSON; no UTF-8 encoder takes it, and the syntax
    # layer and the tokenizer both raised, so the whole document got no completions. The store keeps a
    # U+FFFD instead: one UTF-16 unit like the half it replaces, so later edits land where the client
    # means them.
    from dspark_lsp.lsp.documents import scrub
    from dspark_lsp.syntax.document import SyntaxDocument

    store = DocumentStore()
    doc = store.open("file:///s.py", 'x = "\ud800"\ny = 1\n', 1, "python")
    assert doc.text == 'x = "\ufffd"\ny = 1\n'
    store.change("file:///s.py", 2, [((0, 6, 0, 6), "\udc00!"), ((1, 4, 1, 5), "2")], "utf-16")
    assert doc.text == 'x = "\ufffd\ufffd!"\ny = 2\n'
    store.change("file:///s.py", 3, [(None, "a\udfff😀")], "utf-16")
    assert doc.text == "a\ufffd😀"  # a valid pair (one character here) is kept
    SyntaxDocument('x = "\ud800"\n'.replace("\ud800", scrub("\ud800")), "python")  # encodes now
    with pytest.raises(UnicodeEncodeError):  # what the store's text went into before
        SyntaxDocument('x = "\ud800"\n', "python")

"""LSP positions (line, UTF-16 column) -> code-point offsets, and reading source files safely."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_lsp.errors import UserError
from dspark_lsp.textpos import offset_of_utf16, read_text_file


def test_ascii_positions() -> None:
    text = "ab\ncde\n"
    assert offset_of_utf16(text, 0, 0) == 0
    assert offset_of_utf16(text, 0, 2) == 2  # end of line 0
    assert offset_of_utf16(text, 1, 1) == 4
    assert offset_of_utf16(text, 1, 3) == 6
    assert offset_of_utf16(text, 2, 0) == 7  # the empty last line after a final newline


def test_astral_characters_take_two_utf16_units() -> None:
    text = "a😀b\n"  # 😀 is one code point, two UTF-16 units
    assert offset_of_utf16(text, 0, 1) == 1
    assert offset_of_utf16(text, 0, 3) == 2  # after the emoji
    assert offset_of_utf16(text, 0, 4) == 3
    with pytest.raises(UserError, match="surrogate"):
        offset_of_utf16(text, 0, 2)


def test_cjk_and_accents_take_one_unit() -> None:
    text = "x = '中文é'\ny"
    assert offset_of_utf16(text, 0, 6) == 6
    assert text[offset_of_utf16(text, 0, 5)] == "中"
    assert offset_of_utf16(text, 1, 1) == len(text)


@pytest.mark.parametrize("eol", ["\r\n", "\r", "\n"])
def test_every_line_ending(eol: str) -> None:
    text = f"first{eol}😀 second{eol}{eol}last"
    assert offset_of_utf16(text, 1, 0) == text.index("😀")
    assert text[offset_of_utf16(text, 1, 3)] == "s"
    assert offset_of_utf16(text, 1, 9) == text.index(eol, text.index("second"))  # end of line 1, before eol
    assert offset_of_utf16(text, 2, 0) == text.index("last") - len(eol)
    assert offset_of_utf16(text, 3, 4) == len(text)
    with pytest.raises(UserError, match="past the end"):
        offset_of_utf16(text, 1, 10)  # the line ending is not part of the line
    with pytest.raises(UserError, match="outside"):
        offset_of_utf16(text, 4, 0)


def test_mixed_line_endings_and_lone_cr() -> None:
    text = "a\r\nb\rc\nd"
    assert [offset_of_utf16(text, line, 0) for line in range(4)] == [0, 3, 5, 7]


@pytest.mark.parametrize(
    ("line", "col", "match"),
    [
        (-1, 0, "negative"),
        (0, -1, "negative"),
        (2, 0, "outside"),
        (0, 4, "past the end"),
        (1, 1, "past the end"),
    ],
)
def test_out_of_range_positions(line: int, col: int, match: str) -> None:
    with pytest.raises(UserError, match=match):
        offset_of_utf16("abc\n", line, col)


def test_empty_document() -> None:
    assert offset_of_utf16("", 0, 0) == 0
    with pytest.raises(UserError):
        offset_of_utf16("", 0, 1)
    with pytest.raises(UserError):
        offset_of_utf16("", 1, 0)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=8),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.data(),
)
def test_round_trip_against_utf16_encoding(lines: list[str], eol: str, data: st.DataObject) -> None:
    """Every code-point boundary of every line is reachable, and its column is its UTF-16 length."""
    text = eol.join(lines)
    line = data.draw(st.integers(0, len(lines) - 1))
    i = data.draw(st.integers(0, len(lines[line])))
    col = len(lines[line][:i].encode("utf-16-le")) // 2
    start = sum(len(x) + len(eol) for x in lines[:line])
    assert offset_of_utf16(text, line, col) == start + i


# ---------------------------------------------------------------------------------------- reading files
def test_read_text_file_returns_the_text(tmp_path: Path) -> None:
    p = tmp_path / "a.py"
    p.write_bytes("x = '中😀'\r\n".encode())
    assert read_text_file(p) == "x = '中😀'\r\n"


def test_read_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        read_text_file(tmp_path / "nope.py")


def test_read_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="directory"):
        read_text_file(tmp_path)


def test_read_binary_file(tmp_path: Path) -> None:
    p = tmp_path / "blob.bin"
    p.write_bytes(b"\x7fELF\x00\x01\x02" * 10)
    with pytest.raises(UserError, match="binary"):
        read_text_file(p)


def test_read_invalid_utf8(tmp_path: Path) -> None:
    p = tmp_path / "latin1.py"
    p.write_bytes("x = 'café'\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"not valid UTF-8 \(byte 8\)"):
        read_text_file(p)


def test_read_too_large_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dspark_lsp.textpos as textpos

    monkeypatch.setattr(textpos, "MAX_FILE_BYTES", 10)
    p = tmp_path / "big.py"
    p.write_text("x = 1\n" * 3)
    with pytest.raises(UserError, match="larger than"):
        read_text_file(p)


def test_errors_are_one_line(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.py", tmp_path):
        with pytest.raises(UserError) as info:
            read_text_file(path)
        assert "\n" not in str(info.value)

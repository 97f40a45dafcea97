"""Text positions and source files: LSP (line, character) <-> code-point offsets, read files safely.

The one implementation of positions: the language server (dspark_lsp.lsp.positions re-exports it) and
the command line (`complete --line --col`) both use it, and it imports neither torch nor the LSP package.

LSP positions are (line, character) pairs where `character` counts code units of the negotiated
position encoding: UTF-16 by default (an emoji outside the BMP is 2 units), UTF-8 or UTF-32 when the
client offers them. Python strings index code points, so every position that crosses the wire goes
through this module. Only "\\r\\n", "\\r" and "\\n" end a line in LSP; str.splitlines() would also split
on \\x0b, \\x0c, \\u2028 … and shift every later line, which is why the line table is built here by hand.

Out-of-range policy (decided once, here):
* a character past the end of its line clamps to the line end (the LSP spec asks for exactly this);
* a character inside a surrogate pair / UTF-8 sequence rounds down to the code point's start;
* a line past the last line is a `PositionError` when `strict=True` (completion requests: the client's
  view of the document is out of sync, completing at a guessed spot would insert text in the wrong
  place) and clamps to the end of the document otherwise (edits: keep the document usable).

The command line's `offset_of_utf16` is stricter: a position it cannot place exactly (past the end of
its line, inside a surrogate pair) is a UserError, since a person typed it and a guessed spot misleads.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from dspark_lsp.errors import UserError

# Longest file we will read for a completion; larger inputs are almost certainly not source code.
MAX_FILE_BYTES = 16 * 1024 * 1024


def read_text_file(path: Path) -> str:
    """The file's text (UTF-8); a one-line UserError for missing, unreadable or binary files."""
    try:
        if path.is_dir():
            raise UserError(f"{path} is a directory, not a file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise UserError(f"{path} is {size} bytes; larger than the {MAX_FILE_BYTES} byte limit")
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if b"\x00" in data[:8192]:
        raise UserError(f"{path} looks like a binary file (it contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not valid UTF-8 (byte {exc.start})") from None


Encoding = Literal["utf-8", "utf-16", "utf-32"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class PositionError(ValueError):
    """A position that cannot be mapped onto the document (line past the end, negative numbers)."""


def normalize_encoding(name: str | None) -> Encoding:
    """Map the negotiated `PositionEncodingKind` value to one of ours (UTF-16 when unknown/absent)."""
    value = (name or "utf-16").lower()
    if value in ("utf-8", "utf-16", "utf-32"):
        return value  # type: ignore[return-value]
    return "utf-16"


def line_starts(text: str) -> list[int]:
    """Code-point offsets where each line starts; a trailing line break opens one more (empty) line."""
    starts = [0]
    starts.extend(m.end() for m in _LINE_BREAK.finditer(text))
    return starts


def _units(ch: str, encoding: Encoding) -> int:
    cp = ord(ch)
    if encoding == "utf-16":
        return 2 if cp > 0xFFFF else 1
    if encoding == "utf-8":
        return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4
    return 1


def code_units(text: str, encoding: Encoding = "utf-16") -> int:
    """Length of `text` in code units of `encoding`."""
    if encoding == "utf-32":
        return len(text)
    if encoding == "utf-16":
        # Fast path: count astral code points, each costs one extra unit.
        return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)
    return len(text.encode("utf-8", errors="surrogatepass"))


def column_to_index(line_text: str, column: int, encoding: Encoding = "utf-16") -> int:
    """Code-point index inside `line_text` of an LSP `character`; clamps to the line end and rounds
    down inside a multi-unit character."""
    if column < 0:
        raise PositionError(f"negative character {column}")
    if encoding == "utf-32":
        return min(column, len(line_text))
    if encoding == "utf-16" and line_text.isascii():
        return min(column, len(line_text))
    used = 0
    for index, ch in enumerate(line_text):
        used += _units(ch, encoding)
        if used > column:
            return index
    return len(line_text)


def index_to_column(line_text: str, index: int, encoding: Encoding = "utf-16") -> int:
    """LSP `character` of the code-point `index` inside `line_text` (clamped to the line)."""
    index = max(0, min(index, len(line_text)))
    return code_units(line_text[:index], encoding)


def _line_text(text: str, starts: Sequence[int], line: int) -> str:
    """Text of `line` without its line break."""
    begin = starts[line]
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    segment = text[begin:end]
    if segment.endswith("\r\n"):
        return segment[:-2]
    if segment.endswith(("\n", "\r")):
        return segment[:-1]
    return segment


def position_to_offset(
    text: str,
    line: int,
    character: int,
    *,
    encoding: Encoding = "utf-16",
    starts: Sequence[int] | None = None,
    strict: bool = False,
) -> int:
    """Code-point offset of an LSP position in `text` (see the module doc for out-of-range rules)."""
    if line < 0 or character < 0:
        raise PositionError(f"negative position ({line}, {character})")
    starts = line_starts(text) if starts is None else starts
    if line >= len(starts):
        if strict:
            raise PositionError(f"line {line} is past the end of the document ({len(starts)} lines)")
        return len(text)
    return starts[line] + column_to_index(_line_text(text, starts, line), character, encoding)


def offset_to_position(
    text: str,
    offset: int,
    *,
    encoding: Encoding = "utf-16",
    starts: Sequence[int] | None = None,
) -> tuple[int, int]:
    """LSP (line, character) of a code-point offset (clamped to the document)."""
    offset = max(0, min(offset, len(text)))
    starts = line_starts(text) if starts is None else starts
    line = bisect_right(starts, offset) - 1
    # An offset between "\r" and "\n" of a CRLF is not a real position: it maps to the line end.
    line_text = _line_text(text, starts, line)
    return line, index_to_column(line_text, offset - starts[line], encoding)


def dominant_line_ending(text: str) -> str:
    """The line ending the document mostly uses ("\\n" when there is none), so inserted multi-line
    completions match the file instead of mixing endings."""
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    cr = text.count("\r") - crlf
    if crlf > lf and crlf >= cr:
        return "\r\n"
    if cr > lf and cr > crlf:
        return "\r"
    return "\n"


def offset_of_utf16(text: str, line: int, col: int) -> int:
    """Code-point offset of LSP position (line, UTF-16 column), strictly: a UserError when the position is
    negative, outside the document, past the end of its line or inside a surrogate pair."""
    if line < 0 or col < 0:
        raise UserError(f"position {line}:{col} is negative")
    starts = line_starts(text)
    if line >= len(starts):
        raise UserError(f"line {line} is outside the document ({len(starts)} lines)")
    body = _line_text(text, starts, line)
    index = column_to_index(body, col)
    if index_to_column(body, index) == col:
        return starts[line] + index
    units = code_units(body)
    if col > units:
        raise UserError(f"column {col} is past the end of line {line} ({units} UTF-16 units)")
    raise UserError(f"column {col} splits a surrogate pair on line {line}")

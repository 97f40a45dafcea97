"""Plain-text helpers: code point <-> UTF-8 byte offsets, tree-sitter points, lines, indentation.

tree-sitter counts in UTF-8 bytes and rows split on ``\\n`` only (a ``\\r`` is ordinary whitespace to it),
while the public API of this package counts Python ``str`` code points.  Everything that crosses that
boundary goes through these functions.
"""

from __future__ import annotations

Point = tuple[int, int]

TAB_WIDTH = 4
# Each closing bracket and the opener it closes (the stop rules' and the scope's bracket checks).
CLOSER_OPENER = {")": "(", "]": "[", "}": "{"}


def utf8_len(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes (ASCII fast path: most source code is ASCII)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def byte_offset(text: str, offset: int) -> int:
    """UTF-8 byte offset of code point ``offset`` in ``text``."""
    return utf8_len(text[:offset])


def point_at(text: str, offset: int) -> Point:
    """tree-sitter point (row, byte column) of code point ``offset`` in ``text``."""
    row = text.count("\n", 0, offset)
    line_start = text.rfind("\n", 0, offset) + 1
    return row, utf8_len(text[line_start:offset])


def advance_point(point: Point, data: bytes) -> Point:
    """The point reached after appending ``data`` (UTF-8) at ``point``."""
    newlines = data.count(b"\n")
    if newlines == 0:
        return point[0], point[1] + len(data)
    return point[0] + newlines, len(data) - data.rfind(b"\n") - 1


def is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def indent_step(text: str, limit: int = 400) -> int | None:
    """The document's indentation step: the most common positive increase from one non-blank line to
    the next, over its first ``limit`` lines (None when nothing is indented)."""
    counts: dict[int, int] = {}
    previous: int | None = None
    for n, line in enumerate(text.split("\n")):
        if n >= limit:
            break
        if not line.strip():
            continue
        width = indent_width(line)
        if previous is not None and width > previous:
            counts[width - previous] = counts.get(width - previous, 0) + 1
        previous = width
    if not counts:
        return None
    return max(counts, key=lambda step: (counts[step], -step))


def indent_width(line: str) -> int:
    """Visual width of the leading whitespace of ``line`` (tabs count TAB_WIDTH columns)."""
    width = 0
    for ch in line:
        if ch == " ":
            width += 1
        elif ch == "\t":
            width += TAB_WIDTH
        else:
            break
    return width


def strip_cr(line: str) -> str:
    return line[:-1] if line.endswith("\r") else line


def current_line(text: str) -> str:
    """The (possibly partial) last line of ``text``."""
    return text[text.rfind("\n") + 1 :]

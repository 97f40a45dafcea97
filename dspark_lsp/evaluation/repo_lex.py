"""Which characters of a source file are code, not a comment or a string literal (a small lexer).

The hole set looks for names with regular expressions; a name inside a docstring, a comment or one of
cobra's shell scripts held in a Go raw string is not a use of it. This is deliberately independent of
the project's tree-sitter layer: the set must not depend on the system it measures.

Good enough for selecting holes, not a full lexer: JS regular-expression literals and the ``${}`` parts
of template strings count as string text (a use there is missed, never invented).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Syntax:
    line_comment: str
    block_comment: tuple[str, str] | None
    quotes: str  # quote characters of one-line strings
    multiline_quotes: tuple[str, ...]  # openers that run until the same text again, across lines
    raw: tuple[str, ...] = ()  # of those, the ones without backslash escapes


SYNTAX = {
    "python": Syntax("#", None, "'\"", ('"""', "'''")),
    "typescript": Syntax("//", ("/*", "*/"), "'\"", ("`",)),
    "go": Syntax("//", ("/*", "*/"), "'\"", ("`",), raw=("`",)),
}


def _skipped(text: str, language: str) -> Iterator[tuple[int, int, bool]]:
    """(start, end, is_comment) of each comment and string literal of ``text``, in order."""
    syn = SYNTAX[language]
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith(syn.line_comment, i):
            end = text.find("\n", i)
            yield i, (n if end < 0 else end), True
            i = n if end < 0 else end
            continue
        if syn.block_comment and text.startswith(syn.block_comment[0], i):
            end = text.find(syn.block_comment[1], i + 2)
            end = n if end < 0 else end + len(syn.block_comment[1])
            yield i, end, True
            i = end
            continue
        opener = next((q for q in syn.multiline_quotes if text.startswith(q, i)), None)
        if opener is not None:
            end = _skip_until(text, i + len(opener), opener, escapes=opener not in syn.raw)
        elif c in syn.quotes:
            end = _skip_line_string(text, i + 1, c)
        else:
            i += 1
            continue
        yield i, end, False
        i = end


def code_mask(text: str, language: str) -> bytearray:
    """One byte per character of ``text``: 1 where it is code, 0 inside a comment or a string."""
    mask = bytearray(b"\x01") * len(text)
    for start, end, _comment in _skipped(text, language):
        mask[start:end] = bytes(end - start)
    return mask


def has_comment(text: str, language: str) -> bool:
    """Whether ``text`` (one line's rest) holds a comment outside its strings."""
    return any(comment for _s, _e, comment in _skipped(text, language))


def _skip_until(text: str, i: int, closer: str, *, escapes: bool) -> int:
    n = len(text)
    while i < n:
        if escapes and text[i] == "\\":
            i += 2
            continue
        if text.startswith(closer, i):
            return i + len(closer)
        i += 1
    return n


def _skip_line_string(text: str, i: int, quote: str) -> int:
    """Past a one-line string's closing quote, or to its line's end when it is not closed there."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == quote:
            return i + 1
        if c == "\n":
            return i
        i += 1
    return n

"""Is the next token a key position (it starts or continues an identifier or keyword)?

Decided from the end of ``prefix + generated``, cheapest evidence first:
1. Inside a string or comment (lexical state) -> not key: prose, drafted in parallel.
2. Ending in a word: a number -> not key.  A @key.after keyword (``def``, ``return``) -> key (a name
   follows).  A word that is a proper prefix of a known word (the document's identifiers + the grammar's
   keywords) may continue -> key.  A complete known word is most likely followed by punctuation -> not key.
   An unknown word is a new name being spelled in sub-word tokens -> key.
3. Ending at the start of a line (after its indentation) -> key: statements start with a word.  A line
   whose indentation is still short of the previous line's is probably mid-indentation -> not key.
4. Otherwise (possibly after spaces) the last token decides: a @key.after token (``.``, ``(``, ``=``,
   ``,``, operators...) -> key; anything else (closers, literals, ``;``) -> not key.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

from tree_sitter import Node

from dspark_lsp.syntax.textutil import indent_width
from dspark_lsp.syntax.treequery import TreeQuestions

WORD_RE = re.compile(r"[^\W\d]\w*")
_TRAILING_WORD = re.compile(r"\w+\Z")


class WordIndex:
    """Known words, sorted, for "is this a proper prefix of a known word?" in O(log n)."""

    def __init__(self, words: Iterable[str] = ()) -> None:
        self._known = set(words)
        self._sorted = sorted(self._known)

    @classmethod
    def from_text(cls, text: str, extra: Iterable[str] = ()) -> WordIndex:
        return cls([*WORD_RE.findall(text), *extra])

    def add(self, word: str) -> None:
        if word not in self._known:
            self._known.add(word)
            bisect.insort(self._sorted, word)

    def copy(self) -> WordIndex:
        other = WordIndex()
        other._known = set(self._known)
        other._sorted = list(self._sorted)
        return other

    def __contains__(self, word: str) -> bool:
        return word in self._known

    def extends(self, word: str) -> bool:
        """Is ``word`` a proper prefix of some known word?"""
        i = bisect.bisect_right(self._sorted, word)
        return i < len(self._sorted) and self._sorted[i].startswith(word)


def trailing_word(text: str) -> str:
    m = _TRAILING_WORD.search(text)
    return m.group() if m else ""


def word_may_continue(word: str, words: WordIndex) -> bool:
    if word[0].isdigit():
        return False
    if words.extends(word):
        return True
    return word not in words


def line_start_is_key(line: str, expected_indent: int) -> bool:
    """At a line's start (only indentation so far): key once the indentation reaches the expected
    width; before that the next token is more whitespace (tokenizers merge runs of spaces)."""
    return indent_width(line) >= expected_indent


def is_key_at_end(
    tail: str,
    in_code: bool,
    words: WordIndex,
    questions: TreeQuestions | None,
    root: Node | None,
    end_byte: int,
    expected_indent: int,
) -> bool:
    """``tail``: the last characters of prefix + generated; ``end_byte``: their end in the tree."""
    if not in_code:
        return False
    if not tail:
        return True  # start of a file: a keyword or a name comes first
    word = trailing_word(tail)
    if word:
        if questions is not None and root is not None and questions.is_key_after(root, end_byte):
            return True
        return word_may_continue(word, words)
    stripped = tail.rstrip(" \t")
    line = tail[tail.rfind("\n") + 1 :]
    if not line.strip():
        return line_start_is_key(line.rstrip("\r"), expected_indent)
    if questions is not None and root is not None:
        spaces = len(tail) - len(stripped)
        # Trailing spaces are ASCII: one byte each.
        return questions.is_key_after(root, end_byte - spaces)
    # Plain text: after an opening bracket, a separator or an operator a word usually follows.
    return stripped[-1] in ".([,=:+-*/<>!&|?"

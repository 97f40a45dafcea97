"""What to complete at a cursor: nothing, the rest of one line, or several lines.

Rules (llm-ls decides from the node at the cursor; these add the text around it):
* NONE when a word character follows the cursor inside a word, at the line's start, or in prose
  (anything inserted would be glued to that word), or inside an escape sequence / char literal
  (@scope.none). In code after a space or a bracket it is SINGLE_LINE (an insertion before the word).
* SINGLE_LINE inside a comment or string (@scope.text): completing prose is useful, but only up to the
  end of its line; when code follows the cursor on the line; when the cursor is mid-statement.
* MULTI_LINE at the end of a line that opens a block (``:`` / ``{`` from language.toml), on a blank
  line right after such an opener (an empty body), or on a blank line directly inside a statement
  container (@scope.block: module, block, class body...), or on a blank line inside a literal or an
  argument list right after an element or the opening bracket (the elements that follow: eval, multi-line
  set, ``value_map = {'zero': 0, ...`` holes; their stop is the bracket's closer, see ``stops``).
"""

from __future__ import annotations

import enum

from tree_sitter import Node

from dspark_lsp.syntax.languages import LanguageSpec
from dspark_lsp.syntax.lexer import CODE, Lexicon, strip_comment
from dspark_lsp.syntax.textutil import CLOSER_OPENER, byte_offset, is_word_char, strip_cr
from dspark_lsp.syntax.treequery import TreeQuestions

DEFAULT_OPENERS = (":", "{")
# How a line before a blank one in a bracket ends when an element list goes on (``1,`` / ``foo(``).
ELEMENT_ENDS = (",", "(", "[", "{")


class Scope(enum.Enum):
    NONE = "none"
    SINGLE_LINE = "single_line"
    MULTI_LINE = "multi_line"


def previous_code_line(text: str, line_start: int, lexicon: Lexicon) -> str:
    """The last non-blank line before ``line_start``, without its trailing comment."""
    end = line_start - 1
    while end >= 0:
        start = text.rfind("\n", 0, end) + 1
        line = strip_comment(strip_cr(text[start:end]), lexicon).rstrip()
        if line.strip():
            return line
        if start == 0:
            break
        end = start - 1
    return ""


def after_element(text: str, line_start: int, lexicon: Lexicon) -> bool:
    """A blank line not directly in a statement container follows an element (``1,``) or an opening
    bracket: the cursor is in an element list, whose remaining elements the completion may give."""
    return previous_code_line(text, line_start, lexicon).endswith(ELEMENT_ENDS)


# How far back open_bracket_before looks for the construct's first line (a bound on per-keystroke work).
BRACKET_LOOKBACK_CHARS = 20_000


def open_bracket_before(text: str, line_start: int, lexicon: Lexicon) -> bool:
    """Does a bracket opened before ``line_start`` stay open there, counting from the last line that
    starts at column 0 with code (the enclosing top-level construct)? A lexical answer for where the
    tree has none: an unclosed literal (``value_map = {`` and its elements, the hole ending at ``}``)
    parses as an ERROR region, which tree questions read as a statement container (eval, HumanEval/19
    L6, /105 L3)."""
    floor = max(0, line_start - BRACKET_LOOKBACK_CHARS)
    start = line_start
    while start > floor:
        # No line break left above the floor: start at the floor (mid-line), keeping the bound.
        start = max(floor, text.rfind("\n", floor, start - 1) + 1)
        first = text[start : start + 1]
        comment = lexicon.line_comment is not None and text.startswith(lexicon.line_comment, start)
        if first and not first.isspace() and first not in CLOSER_OPENER and first not in lexicon.quotes and not comment:
            break
    stack: list[str] = []

    def on_code(_: int, ch: str) -> None:
        if ch in "([{":
            stack.append(ch)
        elif ch in CLOSER_OPENER and stack and stack[-1] == CLOSER_OPENER[ch]:
            stack.pop()

    lexicon.run(CODE, text[start:line_start], on_code)
    return bool(stack)


def completion_scope(
    text: str,
    offset: int,
    spec: LanguageSpec | None,
    root: Node | None,
    questions: TreeQuestions | None,
) -> Scope:
    lexicon = Lexicon.for_spec(spec)
    openers = spec.block_openers if spec is not None else DEFAULT_OPENERS
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    before = text[line_start:offset]
    after = strip_cr(text[offset : len(text) if line_end < 0 else line_end])

    # Before a word: nothing inside the word or at the line's start, but in code after a space or a
    # bracket the insertion may wrap or extend what follows (``return |set(l)`` + ``sorted(list(``; eval,
    # random-span set); the clean-up drops an insertion that would end glued to the word.
    word_after = bool(after) and is_word_char(after[0])
    if word_after and (not before.strip() or is_word_char(before[-1])):
        return Scope.NONE
    if root is not None and questions is not None:
        ctx = questions.context(root, byte_offset(text, offset))
        if ctx.kind == "none":
            return Scope.NONE
        if ctx.kind == "text":
            return Scope.NONE if word_after else Scope.SINGLE_LINE
    if not lexicon.run(CODE, before).is_code:
        # An unterminated string or a line comment the tree did not see.
        return Scope.NONE if word_after else Scope.SINGLE_LINE
    if after.strip():
        # ``{|}`` with an auto-inserted closer: still an empty body being opened.
        closers_only = all(ch in ")]};, \t" for ch in after)
        if closers_only and strip_comment(before, lexicon).rstrip().endswith(openers):
            return Scope.MULTI_LINE
        return Scope.SINGLE_LINE
    if not before.strip():
        if previous_code_line(text, line_start, lexicon).endswith(openers):
            return Scope.MULTI_LINE  # a blank line opening an (empty) body
        if root is None or questions is None:
            return Scope.MULTI_LINE
        if questions.in_block(root, byte_offset(text, offset)):
            return Scope.MULTI_LINE
        return Scope.MULTI_LINE if after_element(text, line_start, lexicon) else Scope.SINGLE_LINE
    if strip_comment(before, lexicon).rstrip().endswith(openers):
        return Scope.MULTI_LINE
    return Scope.SINGLE_LINE

"""What to complete at a cursor: nothing, the rest of one line, or several lines.

Rules (llm-ls decides from the node at the cursor; these add the text around it):
* NONE when a word character follows the cursor (anything inserted would be glued to that word), or
  inside an escape sequence / char literal (@scope.none).
* SINGLE_LINE inside a comment or string (@scope.text): completing prose is useful, but only up to the
  end of its line; when code follows the cursor on the line; when the cursor is mid-statement.
* MULTI_LINE at the end of a line that opens a block (``:`` / ``{`` from language.toml), on a blank
  line right after such an opener (an empty body), or on a blank line directly inside a statement
  container (@scope.block: module, block, class body...).  A blank line inside an argument list or a
  literal stays SINGLE_LINE: one element per line.
"""

from __future__ import annotations

import enum

from tree_sitter import Node

from dspark_lsp.syntax.languages import LanguageSpec
from dspark_lsp.syntax.lexer import CODE, Lexicon, strip_comment
from dspark_lsp.syntax.textutil import byte_offset, is_word_char, strip_cr
from dspark_lsp.syntax.treequery import TreeQuestions

DEFAULT_OPENERS = (":", "{")


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

    if after and is_word_char(after[0]):
        return Scope.NONE
    if root is not None and questions is not None:
        ctx = questions.context(root, byte_offset(text, offset))
        if ctx.kind == "none":
            return Scope.NONE
        if ctx.kind == "text":
            return Scope.SINGLE_LINE
    if not lexicon.run(CODE, before).is_code:
        return Scope.SINGLE_LINE  # an unterminated string or a line comment the tree did not see
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
        in_block = questions.in_block(root, byte_offset(text, offset))
        return Scope.MULTI_LINE if in_block else Scope.SINGLE_LINE
    if strip_comment(before, lexicon).rstrip().endswith(openers):
        return Scope.MULTI_LINE
    return Scope.SINGLE_LINE

"""A tiny lexical state machine: is a character code, or inside a string / comment?

tree-sitter answers this for a finished document, but a generation prefix usually ends mid-construct and
an unterminated string becomes an ERROR node, so the tree would call the rest of the string "code".  The
decode-time rules (braces, indentation, key positions) therefore track strings and comments lexically,
starting from the state the document's tree reports at the cursor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dspark_lsp.syntax.languages import LanguageSpec


@dataclass(frozen=True)
class LexState:
    mode: str = "code"  # "code" | "string" | "line_comment" | "block_comment"
    closer: str = ""

    @property
    def is_code(self) -> bool:
        return self.mode == "code"


CODE = LexState()

# Quotes whose strings may span lines; any other quote closes (error recovery) at the end of the line.
_MULTILINE_QUOTES = ("`",)


@dataclass(frozen=True)
class Lexicon:
    line_comment: str | None = None
    block_comment: tuple[str, str] | None = None
    quotes: tuple[str, ...] = ('"', "'")

    @classmethod
    def for_spec(cls, spec: LanguageSpec | None) -> Lexicon:
        if spec is None:
            return cls(line_comment=None, block_comment=None, quotes=('"', "'"))
        return cls(spec.line_comment, spec.block_comment, spec.string_quotes)

    def run(
        self,
        state: LexState,
        text: str,
        on_code: Callable[[int, str], None] | None = None,
        on_comment: Callable[[int], None] | None = None,
    ) -> LexState:
        """Lex ``text`` from ``state``; call ``on_code(index, char)`` for each code character and
        ``on_comment(index)`` where a comment opens."""
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            mode = state.mode
            if mode == "code":
                if self.line_comment and text.startswith(self.line_comment, i):
                    state = LexState("line_comment", "\n")
                    if on_comment is not None:
                        on_comment(i)
                    i += len(self.line_comment)
                    continue
                if self.block_comment and text.startswith(self.block_comment[0], i):
                    state = LexState("block_comment", self.block_comment[1])
                    if on_comment is not None:
                        on_comment(i)
                    i += len(self.block_comment[0])
                    continue
                if ch in self.quotes:
                    quote = ch * 3 if text.startswith(ch * 3, i) else ch
                    state = LexState("string", quote)
                    i += len(quote)
                    continue
                if on_code is not None:
                    on_code(i, ch)
                i += 1
            elif mode == "line_comment":
                if ch == "\n":
                    state = CODE
                    if on_code is not None:
                        on_code(i, ch)
                i += 1
            elif mode == "block_comment":
                if text.startswith(state.closer, i):
                    i += len(state.closer)
                    state = CODE
                    continue
                i += 1
            else:  # string
                if ch == "\\":
                    i += 2
                    continue
                if text.startswith(state.closer, i):
                    i += len(state.closer)
                    state = CODE
                    continue
                if ch == "\n" and len(state.closer) == 1 and state.closer not in _MULTILINE_QUOTES:
                    state = CODE  # an unterminated one-line string: recover like the compilers do
                    if on_code is not None:
                        on_code(i, ch)
                i += 1
        return state


def strip_comment(line: str, lexicon: Lexicon) -> str:
    """``line`` without a trailing comment (comment markers inside strings are not comments)."""
    starts: list[int] = []
    lexicon.run(CODE, line, on_comment=starts.append)
    return line[: starts[0]] if starts else line


def state_for_text_node(node_text: str, node_type: str, lexicon: Lexicon) -> LexState:
    """The lexical state just inside a comment/string node, from its opening characters."""
    if "comment" in node_type:
        if lexicon.line_comment and node_text.startswith(lexicon.line_comment):
            return LexState("line_comment", "\n")
        closer = lexicon.block_comment[1] if lexicon.block_comment else "\n"
        return LexState("block_comment", closer)
    for i, ch in enumerate(node_text):  # skip prefixes such as f", r#", b', u8"
        if ch in lexicon.quotes:
            return LexState("string", ch * 3 if node_text.startswith(ch * 3, i) else ch)
    return LexState("string", '"')

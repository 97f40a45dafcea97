"""SyntaxDocument: one open file, parsed incrementally, answering scope questions at a cursor."""

from __future__ import annotations

from dataclasses import replace

from tree_sitter import Parser, Tree

from dspark_lsp.errors import UserError
from dspark_lsp.syntax.generation import GenerationTracker
from dspark_lsp.syntax.incremental import IncrementalTree
from dspark_lsp.syntax.keys import WordIndex
from dspark_lsp.syntax.languages import LanguageSpec, LoadedLanguage, load_language
from dspark_lsp.syntax.lexer import CODE, Lexicon, LexState, state_for_text_node
from dspark_lsp.syntax.scope import (
    Scope,
    after_element,
    completion_scope,
    open_bracket_before,
    previous_code_line,
)
from dspark_lsp.syntax.stops import CursorFacts
from dspark_lsp.syntax.textutil import byte_offset, indent_step, indent_width, point_at, strip_cr
from dspark_lsp.syntax.treequery import TreeQuestions

RECENT_LINES = 3
SUFFIX_LINES = 4  # the suffix lines the stop rules compare generated lines with


class SyntaxDocument:
    """Text + tree.  ``language`` None or unknown (or its grammar wheel missing) -> plain-text rules."""

    def __init__(self, text: str, language: str | None) -> None:
        if not isinstance(text, str):
            raise UserError(f"document text must be a string, not {type(text).__name__}")
        self._loaded: LoadedLanguage | None = load_language(language)
        self.language: str | None = self._loaded.spec.name if self._loaded else None
        self._text = text
        parser = Parser(self._loaded.language) if self._loaded else None
        self._itree = IncrementalTree(parser, text.encode("utf-8"))
        self._questions = TreeQuestions(self._loaded) if self._loaded else None
        self._lexicon = Lexicon.for_spec(self.spec)
        self._words: WordIndex | None = None

    @property
    def spec(self) -> LanguageSpec | None:
        return self._loaded.spec if self._loaded else None

    @property
    def text(self) -> str:
        return self._text

    @property
    def tree(self) -> Tree | None:
        return self._itree.tree

    def _check_offset(self, offset: int, what: str = "offset") -> None:
        if not isinstance(offset, int) or not 0 <= offset <= len(self._text):
            raise UserError(f"{what} {offset!r} is outside the document (0..{len(self._text)})")

    def apply_edit(self, start: int, end: int, new_text: str) -> None:
        """Replace code points ``[start, end)`` of the current text with ``new_text``."""
        self._check_offset(start, "edit start")
        self._check_offset(end, "edit end")
        if end < start:
            raise UserError(f"edit end {end} is before its start {start}")
        if not isinstance(new_text, str):
            raise UserError("edit text must be a string")
        text = self._text
        start_b = byte_offset(text, start)
        end_b = start_b + len(text[start:end].encode("utf-8"))
        self._itree.replace(start_b, end_b, new_text.encode("utf-8"), point_at(text, start))
        self._text = text[:start] + new_text + text[end:]
        self._words = None

    def words(self) -> WordIndex:
        """The document's identifiers and the grammar's keywords (cached until the next edit)."""
        if self._words is None:
            keywords = self._loaded.keywords if self._loaded else frozenset()
            self._words = WordIndex.from_text(self._text, keywords)
        return self._words

    def completion_scope(self, offset: int) -> Scope:
        self._check_offset(offset)
        root = self.tree.root_node if self.tree is not None else None
        return completion_scope(self._text, offset, self.spec, root, self._questions)

    def lex_state_at(self, offset: int) -> LexState:
        """Inside a string/comment at ``offset``? The tree first, the cursor line's lexing otherwise."""
        self._check_offset(offset)
        text = self._text
        if self.tree is not None and self._questions is not None:
            ctx = self._questions.context(self.tree.root_node, byte_offset(text, offset))
            if ctx.kind == "text" and ctx.node is not None:
                node_text = (ctx.node.text or b"").decode("utf-8", "replace")
                return state_for_text_node(node_text, ctx.node.type, self._lexicon)
        line_start = text.rfind("\n", 0, offset) + 1
        if self.tree is not None and self._questions is not None:
            # A string that ends at the cursor but began on an earlier line (a docstring's closing quotes):
            # lexed from the line's start its closer reads as an opener (eval, HumanEval span /13: after
            # ``    """`` the completion stayed on the cursor's line and came out empty). Lex all of it.
            node = self._questions.text_ending_at(self.tree.root_node, byte_offset(text, offset))
            if node is not None and node.start_point[0] < node.end_point[0]:
                return self._lexicon.run(CODE, (node.text or b"").decode("utf-8", "replace"))
        return self._lexicon.run(CODE, text[line_start:offset])

    def cursor_facts(self, offset: int, scope: Scope) -> CursorFacts:
        text = self._text
        spec = self.spec
        line_start = text.rfind("\n", 0, offset) + 1
        line_end = text.find("\n", offset)
        line_end = len(text) if line_end < 0 else line_end
        before = text[line_start:offset]
        after = strip_cr(text[offset:line_end])
        following = [ln for ln in text[line_end + 1 : line_end + 1 + 4000].split("\n") if ln.strip()]
        suffix_line = following[0].strip() if following else ""
        recent: list[str] = []
        previous_line = ""
        end = line_start
        while end > 0 and len(recent) < RECENT_LINES:
            start = text.rfind("\n", 0, end - 1) + 1
            if text[start : end - 1].strip():
                previous_line = previous_line or strip_cr(text[start : end - 1])
                recent.append(text[start : end - 1].strip())
            end = start
        recent.reverse()
        if before.strip():
            recent.append(before.strip())
        openers = spec.block_openers if spec else (":", "{")
        opener_indent: int | None = None
        if scope is Scope.MULTI_LINE:
            if before.strip() and before.rstrip().endswith(openers):
                opener_indent = indent_width(before)
            elif not before.strip():
                prev = previous_code_line(text, line_start, self._lexicon)
                if prev.endswith(openers):
                    opener_indent = indent_width(prev)
        return CursorFacts(
            scope=scope,
            line_before=before,
            line_after=after,
            suffix_line=suffix_line,
            recent_lines=tuple(recent),
            previous_line=previous_line,
            opener_indent=opener_indent,
            braces=spec is not None and spec.block_style == "braces",
            start_state=self.lex_state_at(offset),
            suffix_lines=tuple(ln.strip() for ln in following[:SUFFIX_LINES]),
            suffix_indent=indent_width(strip_cr(following[0])) if following else None,
            openers=tuple(openers),
            # Read near the cursor (a bounded slice): the step there is the one the completion continues.
            indent_step=indent_step(text[max(0, line_start - 8000) : line_end + 2000])
            if scope is Scope.MULTI_LINE
            else None,
            element_list=scope is Scope.MULTI_LINE
            and self._in_element_list(offset, line_start, before, after),
        )

    def _in_element_list(self, offset: int, line_start: int, before: str, after: str) -> bool:
        """A blank line in a literal or argument list after an element (the scope's own test)."""
        if before.strip() or after.strip() or self.tree is None or self._questions is None:
            return False
        root = self.tree.root_node
        if self._questions.in_block(root, byte_offset(self._text, offset)) and not (
            root.has_error and open_bracket_before(self._text, line_start, self._lexicon)
        ):
            return False
        return after_element(self._text, line_start, self._lexicon)

    def generation(self, offset: int, scope: Scope, continue_lines: bool = False) -> GenerationTracker:
        """A decode-time view of ``text[:offset] + generated`` (a snapshot: later edits don't affect it).

        ``continue_lines``: a single-line completion at the end of a written line may go on to the next
        lines when it starts with a line break or completes a block header (see ``CursorFacts``)."""
        self._check_offset(offset)
        if not isinstance(scope, Scope):
            raise UserError(f"scope must be a Scope, not {scope!r}")
        facts = self.cursor_facts(offset, scope)
        if continue_lines and scope is Scope.SINGLE_LINE:
            facts = replace(facts, continuation=self.cursor_facts(offset, Scope.MULTI_LINE))
        text = self._text
        prefix = text[:offset]
        prefix_b = byte_offset(text, offset)
        tree: IncrementalTree
        if self._loaded is not None and self.tree is not None:
            # Derive the prefix's tree from the document's: delete the suffix and reparse incrementally.
            # Its own parser: the tracker may run on a decode thread while edits arrive here.
            tree = IncrementalTree(Parser(self._loaded.language), self._itree.data, self.tree.copy())
            tree.replace(prefix_b, len(self._itree.data), b"", point_at(text, offset))
        else:
            tree = IncrementalTree(None, prefix.encode("utf-8"))
        return GenerationTracker(
            loaded=self._loaded,
            tree=tree,
            prefix=prefix,
            facts=facts,
            words=self.words().copy(),
            lexicon=self._lexicon,
        )

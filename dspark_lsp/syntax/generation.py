"""GenerationTracker: the decode-time view of ``prefix + generated`` (key positions and stops).

The decoder calls it once per round with the whole generated text so far.  Appended characters become a
``tree.edit`` at the end of the tracker's own tree followed by an incremental reparse; the lexical state
and word index advance over the new characters only.
"""

from __future__ import annotations

import copy

from dspark_lsp.errors import UserError
from dspark_lsp.syntax.incremental import IncrementalTree
from dspark_lsp.syntax.keys import WORD_RE, WordIndex, is_key_at_end
from dspark_lsp.syntax.languages import LoadedLanguage
from dspark_lsp.syntax.lexer import Lexicon, LexState, strip_comment
from dspark_lsp.syntax.scope import Scope
from dspark_lsp.syntax.stops import CursorFacts, StopConfig, StopRules
from dspark_lsp.syntax.textutil import Point, advance_point, indent_width, point_at, strip_cr
from dspark_lsp.syntax.treequery import TreeQuestions

TAIL_CHARS = 256  # how much of the prefix the key rules look at


class GenerationTracker:
    def __init__(
        self,
        *,
        loaded: LoadedLanguage | None,
        tree: IncrementalTree,
        prefix: str,
        facts: CursorFacts,
        words: WordIndex,
        lexicon: Lexicon,
        stop_config: StopConfig | None = None,
    ) -> None:
        self._loaded = loaded
        self._tree = tree
        self._questions = TreeQuestions(loaded) if loaded is not None else None
        self._prefix_tail = prefix[-TAIL_CHARS:]
        self._prefix_bytes = len(tree.data)
        self._prefix_point: Point = point_at(prefix, len(prefix))
        self._facts = facts
        self._words = words
        self._lexicon = lexicon
        self._openers = loaded.spec.block_openers if loaded is not None else (":", "{")
        self._stops = StopRules(facts, lexicon, stop_config)
        # Until a line break is generated the current line is the cursor's; after it, the rules use
        # the lines generated so far (see _advance_lines).
        self._start_expected = self._expected_after(facts.previous_line)
        self._reset_generated()

    def _reset_generated(self) -> None:
        self._gen = ""
        self._gen_bytes = 0
        self._end_point = self._prefix_point
        self._line_start = 0  # start (in generated) of the current line
        self._line_state: LexState = self._facts.start_state
        self._expected_indent = self._start_expected
        self._word_scan = 0

    def _expected_after(self, line: str) -> int:
        """Indentation expected on the line after ``line``: deeper after a block opener."""
        if not line.strip():
            return 0
        code = strip_comment(line, self._lexicon).rstrip()
        raw = indent_width(line)
        return raw + 1 if code.endswith(self._openers) else raw

    @property
    def text(self) -> str:
        """The generated text the tracker is in step with."""
        return self._gen

    @property
    def tree_sexp(self) -> str:
        """The tracker's tree as an s-expression (tests compare it with a fresh parse)."""
        return str(self._tree.tree.root_node) if self._tree.tree is not None else ""

    def _sync(self, generated: str) -> None:
        if generated == self._gen:
            return
        if not isinstance(generated, str):
            raise UserError(f"generated text must be a string, not {type(generated).__name__}")
        old_end_b = self._prefix_bytes + self._gen_bytes
        if generated.startswith(self._gen):
            common, start_b, start_point = len(self._gen), old_end_b, self._end_point
        else:  # the decoder rolled back: edit from the first differing character
            common = 0
            limit = min(len(self._gen), len(generated))
            while common < limit and self._gen[common] == generated[common]:
                common += 1
            head = self._gen[:common].encode("utf-8")
            start_b, start_point = self._prefix_bytes + len(head), advance_point(self._prefix_point, head)
            if common < self._line_start or common < self._word_scan:
                self._line_start, self._line_state = 0, self._facts.start_state
                self._expected_indent, self._word_scan = self._start_expected, 0
        new_tail = generated[common:].encode("utf-8")
        self._tree.replace(start_b, old_end_b, new_tail, start_point)
        self._gen = generated
        self._gen_bytes = start_b - self._prefix_bytes + len(new_tail)
        self._end_point = advance_point(start_point, new_tail)
        self._advance_lines()
        for m in WORD_RE.finditer(generated, self._word_scan):
            if m.end() == len(generated):
                self._word_scan = m.start()  # still being spelled
                break
            self._words.add(m.group())
            self._word_scan = m.end()
        else:
            self._word_scan = len(generated)

    def _advance_lines(self) -> None:
        """Move the line-start checkpoint (lexical state, expected indentation) over completed lines."""
        gen = self._gen
        while (nl := gen.find("\n", self._line_start)) >= 0:
            line = gen[self._line_start : nl]
            full = self._facts.line_before + line if self._line_start == 0 else line
            if full.strip() and self._line_state.is_code:
                self._expected_indent = self._expected_after(strip_cr(full))
            self._line_state = self._lexicon.run(self._line_state, line + "\n")
            self._line_start = nl + 1

    def is_key_next(self, generated: str) -> bool:
        """Will the next token start or continue an identifier/keyword (draft it autoregressively)?"""
        self._sync(generated)
        end_state = self._lexicon.run(self._line_state, generated[self._line_start :])
        tail = (self._prefix_tail + generated)[-TAIL_CHARS:]
        root = self._tree.tree.root_node if self._tree.tree is not None else None
        return is_key_at_end(
            tail,
            end_state.is_code,
            self._words,
            self._questions,
            root,
            self._prefix_bytes + self._gen_bytes,
            self._expected_indent,
        )

    @property
    def line_before(self) -> str:
        """The cursor's line up to the cursor."""
        return self._facts.line_before

    @property
    def scope(self) -> Scope:
        """The completion's scope as decoded so far (a single-line one may have continued to more lines)."""
        return self._stops.scope

    def probe(self) -> GenerationTracker:
        """A copy for asking where a completion would end if it ended now (``stop_index(final=True)``, which
        sticks) while this tracker decodes on. It shares the tree: ask it stop_index only."""
        twin = copy.copy(self)
        twin._stops = self._stops.copy()
        return twin

    def stop_index(self, generated: str, final: bool = False, capped: bool = False) -> int | None:
        """Where to cut the completion (``generated[:i]``), or None to keep going.

        ``final=True`` when the decoder stopped for another reason (EOS, budget): the last, unfinished
        line is then judged as a complete one. ``capped=True`` (with ``final``) when that reason was the
        token budget: a multi-line completion then drops a last line the budget cut short.
        """
        if not isinstance(generated, str):
            raise UserError(f"generated text must be a string, not {type(generated).__name__}")
        return self._stops.stop_index(generated, final, capped)

"""Where a generated completion must end: stop rules applied incrementally as text is appended.

Rules, in the order they can fire while text streams in:
* single-line scope: the first line break; before that, the rest of the cursor's line once the
  generated text reaches it with balanced brackets (``print(|)`` + ``"hi")`` keeps ``"hi"``).
* multi-line scope:
  - braces languages: the ``}`` that closes the enclosing block (brace depth below zero, counting only
    code braces). Cut before it when the suffix already starts with ``}``, else keep it and stop after.
    In an element list (any language) the same with ``)`` and ``]`` counted too.
  - indent languages: a line indented less than the completion's first line (or not more than the
    block opener's line) - a dedent out of the block.
  - any language: a blank line followed by a line at column 0 (a new top-level construct, Tabby's rule);
    a line equal to the suffix's first non-blank line (the model is re-typing the code after the cursor),
    unless it lies in a block the completion opened at the suffix's depth or below;
    a line equal to one of the last lines before the cursor, or seen ``max_repeats`` times already (loops).
Cuts made "before a line" also drop the blank lines before it, so a completion never ends in blank lines.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass

from dspark_lsp.syntax.lexer import Lexicon, LexState, strip_comment
from dspark_lsp.syntax.scope import Scope
from dspark_lsp.syntax.textutil import CLOSER_OPENER, indent_width, is_word_char, strip_cr

# A rest of the cursor's line starting with one of these is cut as soon as the completion re-types it.
_EARLY_REST = ")]};,\"'`"
# Clauses that continue an indent-block statement at a shallower depth (StopConfig.continue_clauses).
CLAUSE_WORDS = frozenset({"elif", "else", "except", "finally"})
# Statements after which nothing more of their block runs (StopConfig.no_dead_suffix).
JUMP_WORDS = frozenset({"return", "raise", "break", "continue"})


@dataclass(frozen=True)
class StopConfig:
    repeat_window: int = 2  # how many of the prefix's last non-blank lines a generated line may not repeat
    # Only the completion's first line is compared with the prefix, and only with its last line (a
    # stutter); loops inside the completion are max_repeats' job. Comparing every generated line with the
    # prefix's last lines cut real code: a body repeats a line two back (``if a:\n    return 'No'\nif
    # b:\n    return 'No'``) and a later line the prefix's last (``return False`` in a second branch;
    # eval, HumanEval/141 and /39).
    repeat_previous_only: bool = True
    min_repeat_len: int = 6  # shorter lines (``}``, ``pass``, ``break;``) repeat legitimately
    max_repeats: int = 2  # a line already generated this many times is cut on its next appearance
    # A generated line equal to one of the suffix's first ``suffix_window`` non-blank lines: the model has
    # filled the hole and is re-typing the code after it (eval: it often skips the suffix's first line).
    suffix_window: int = 4
    # End after a top-level line that opens a block when the code after the cursor starts deeper: that
    # code is the block's body, the hole was its header.
    suffix_body: bool = True
    # ... but only as a fallback: the completion goes on past that header, and its later lines decide. If
    # it then re-types the first line of the code after the cursor, the lines between were the header's
    # body written before the suffix's (HumanEval/119 L2, /72 L3: ``for c in s:`` and its first
    # statements, then the suffix's ``if val < 0:``): cut before the re-typed line. If a clause at the
    # header's depth opens the suffix instead (``if a:`` / body / ``else:`` over the else's body: /65 L1,
    # /47 L1, /140 L15), end after it. Any other end (a dedent, a loop, the budget, the end of the text)
    # falls back to after the header.
    suffix_body_wait: bool = True
    # When nothing follows the cursor, a dedent below the completion's first line does not end it while
    # it stays inside the top-level construct (column 0 ends it): a hole at a function's end may close an
    # inner block and go on in the outer one (``...\n        elif c:\n    return r``; eval, /142).
    dedent_to_suffix: bool = True
    # The same when code follows, down to that code's level: off, it wrote statements before the
    # suffix's own (``return 'Yes'`` ahead of the checks after the hole; eval --rescore, single-line
    # set: pass@1 0.40 off, 0.35 on).
    dedent_with_suffix: bool = False
    # An indent-block completion never ends on a header whose body is missing: when it would end right
    # after ``if x:`` / ``for ...:`` and the code after the cursor does not start deeper (so it is not
    # that body), the header goes too. A bodiless header is a syntax error in the user's file (eval,
    # HumanEval/146 and /132: a second line ``if ...:`` cut off before its body by the suffix rule).
    drop_open_header: bool = True
    # An indent-block completion may dedent to a clause that continues the statement it is inside
    # (``elif`` / ``else`` / ``except`` / ``finally``): the hole ended a branch's body and went on with the
    # next branch (eval, HumanEval/1 L7, /47 L2, /99 L9: cut at the dedent, the oracle's longer cut
    # passed). Not when the code after the cursor starts with such a clause at that depth (the document
    # has the next branch already), nor below the depth that code starts at unless the clause is that
    # code's header (the suffix one step deeper: HumanEval/47 L2_L3, /1 L7_L10).
    continue_clauses: bool = True
    # An indent-block completion does not go on with a jump (``return``/``raise``/``break``/``continue``)
    # at the depth the code after the cursor starts, unless that code starts with a clause: it would make
    # the suffix's statements dead code (eval, HumanEval/36 L0_L3: ``return sum(...)`` written ahead of
    # the suffix's own computation). The completion's first line is exempt (the hole may be that jump).
    no_dead_suffix: bool = True


@dataclass(frozen=True)
class CursorFacts:
    """What the stop rules need to know about the document around the cursor."""

    scope: Scope
    line_before: str  # the cursor's line up to the cursor
    line_after: str  # the rest of the cursor's line (no line break)
    suffix_line: str  # the first non-blank line after the cursor's line, stripped ("" if none)
    recent_lines: tuple[str, ...]  # the last non-blank lines before the cursor's line, stripped
    previous_line: str  # the last non-blank line before the cursor's line, as written
    opener_indent: int | None  # indent of the block-opening line right before the cursor, if any
    braces: bool  # block style: braces (True) or indentation (False)
    start_state: LexState  # lexical state at the cursor
    suffix_lines: tuple[str, ...] = ()  # the first non-blank lines after the cursor's line, stripped
    suffix_indent: int | None = None  # indentation of the first of them (None: no code follows)
    openers: tuple[str, ...] = (":", "{")  # line endings that open a block
    indent_step: int | None = None  # the document's indentation step (None: unknown)
    # The multi-line facts a single-line completion switches to when it goes on past the cursor's line:
    # at the end of a written line, a completion that starts with a line break (the next statements)
    # or that finishes a block header (``for i in range(`` + ``n):``, then its body). Without it such
    # completions showed nothing or a bodiless header (eval, random-span set: 6 of 65 holes empty so).
    continuation: CursorFacts | None = None
    # The cursor is on a blank line in an element list (a literal, an argument list): the completion
    # ends at the closer of the enclosing bracket, whatever its kind (cut before it when the document
    # has it already), as a braces block ends at its ``}``.
    element_list: bool = False


def brackets_balanced(text: str) -> bool:
    """Do the brackets in ``text`` close everything they open (and nothing else)?"""
    stack: list[str] = []
    for ch in text:
        if ch in "([{":
            stack.append(ch)
        elif ch in CLOSER_OPENER:
            if not stack or stack.pop() != CLOSER_OPENER[ch]:
                return False
    return not stack


def _head(line: str) -> str:
    """A line's first word, without a trailing colon (``else:`` -> ``else``); "" for a blank line."""
    parts = line.split(None, 1)
    return parts[0].rstrip(":") if parts else ""


def _bracket_only(line: str) -> bool:
    return all(ch in ")]};,. " for ch in line)


class StopRules:
    """Feed it the whole generated text each call; it only looks at what is new."""

    def __init__(self, facts: CursorFacts, lexicon: Lexicon, config: StopConfig | None = None) -> None:
        self._initial_facts = facts
        self.facts = facts
        self.lexicon = lexicon
        self.config = config or StopConfig()
        self._reset()

    @property
    def scope(self) -> Scope:
        """The scope the completion has now (single-line until it continues onto further lines)."""
        return self.facts.scope

    def _reset(self) -> None:
        self.facts = self._initial_facts
        self._text = ""
        self._stop: int | None = None
        self._line_start = 0  # index in the generated text where the current line starts
        self._line_no = 0  # 0 = the rest of the cursor's line
        self._state = self.facts.start_state  # lexical state at the current line's start
        self._depth = 0  # brace depth at the current line's start
        self._kept_end = 0  # end of the last non-blank line: where a "cut before this line" lands
        self._before_header: int | None = None  # set when the last kept line opens a block: the end before it
        self._content_lines = 0
        self._blank_since_content = False
        self._min_indent: int | None = None
        self._top_indent: int | None = None  # indentation of the completion's first content line
        self._seen: Counter[str] = Counter()
        self._provisional: int | None = None  # suffix_body_wait: the end after the header, if no evidence
        self._evidence = False  # a later line showed where the hole ends (see suffix_body_wait)

    def copy(self) -> StopRules:
        """An independent copy in the same state: a final judgement asked of it (``final=True`` sticks)
        leaves this one decoding on."""
        twin = copy.copy(self)
        twin._seen = Counter(self._seen)
        return twin

    def stop_index(self, generated: str, final: bool = False, capped: bool = False) -> int | None:
        if not generated.startswith(self._text):
            self._reset()  # the decoder rolled back: replay from scratch (completions are short)
        if self._stop is not None:
            return self._stop
        self._text = generated
        while self._stop is None:
            nl = generated.find("\n", self._line_start)
            if nl < 0:
                break
            self._complete_line(generated[self._line_start : nl], nl)
        if self._stop is None:
            partial = generated[self._line_start :]
            self._check_partial(partial, final)
            if self._stop is None and final and partial.strip():
                if capped and self.facts.scope is Scope.MULTI_LINE and self._content_lines > 0:
                    # The budget cut this line short (``result.append(''.join(current``): the lines
                    # before it are a completion, a broken last line is not (eval, HumanEval/1).
                    self._stop = self._cut_before_line()
                    # A line cut short while re-typing the code after the cursor shows where the hole
                    # ended as the whole line would have (suffix_body_wait; eval, HumanEval/113 L0_L2).
                    head = strip_cr(partial).strip()
                    if len(head) >= self.config.min_repeat_len and self.facts.suffix_line.startswith(head):
                        self._evidence = True
                else:
                    self._complete_line(partial, len(generated))
            if self._stop is None and final and self._before_header is not None:
                self._stop = self._cut_before_line()  # the text ends on a bodiless header
        if self._provisional is not None and not self._evidence and (self._stop is not None or final):
            self._stop = self._provisional  # nothing after the header said it was more than the header
        return self._stop

    # -- single line -------------------------------------------------------------------------
    def _single_line_cut(self, first_line: str) -> int | None:
        """Cut the rest of the cursor's line off ``first_line`` when it was re-typed.

        When the rest starts with a closer/quote the cut is early: at the first point where the text so
        far ended with the rest (balanced before it), found by scanning, so it does not depend on where
        the decoder's rounds happened to end (one token a round or five: the same cut, eval). Otherwise
        only at the line's end ("x" alone matches too often)."""
        rest = self.facts.line_after.strip()
        body = first_line.rstrip()
        if not rest:
            return None
        if rest[0] in _EARLY_REST:
            i = body.find(rest)
            while i >= 0:
                if brackets_balanced(body[:i]):
                    return len(body[:i].rstrip())
                i = body.find(rest, i + 1)
            return None
        if body.endswith(rest):
            head = body[: len(body) - len(rest)]
            if brackets_balanced(head):
                # Before a word the space stays (``a * `` + ``abs(b)``); before a closer it goes.
                return len(head if is_word_char(rest[0]) else head.rstrip())
        return None

    def _check_partial(self, partial: str, final: bool) -> None:
        facts = self.facts
        if facts.scope is Scope.SINGLE_LINE:
            rest = facts.line_after.strip()
            if rest and (rest[0] in _EARLY_REST or final):
                self._stop = self._single_line_cut(partial)
            return
        if facts.braces or facts.element_list:
            self._scan_braces(partial, self._line_start)
        if self._stop is None and not facts.braces:
            self._check_indent(partial, self._line_start, complete=final)

    # -- multi line --------------------------------------------------------------------------
    def _complete_line(self, line: str, end: int) -> None:
        facts = self.facts
        start = self._line_start
        if facts.scope is Scope.SINGLE_LINE:
            if facts.continuation is None or not self._continues(strip_cr(line)):
                cut = self._single_line_cut(strip_cr(line))
                self._stop = cut if cut is not None else start + len(strip_cr(line))
                return
            self.facts = facts = facts.continuation  # from here on the multi-line rules judge it
        if facts.braces or facts.element_list:
            self._scan_braces(line, start)
        if self._stop is None and not facts.braces:
            self._check_indent(line, start)
        if self._stop is not None:
            return
        self._line_rules(strip_cr(line), start)
        if self._stop is not None:
            return
        # Advance the lexical state and the brace depth to the next line's start.
        depth = [self._depth]

        opens, closes = self._brackets()

        def on_code(_: int, ch: str) -> None:
            if ch in opens:
                depth[0] += 1
            elif ch in closes:
                depth[0] -= 1

        self._state = self.lexicon.run(self._state, line + "\n", on_code)
        self._depth = depth[0]
        self._line_start = end + 1
        self._line_no += 1

    def _continues(self, line: str) -> bool:
        """Does a single-line completion whose first line is ``line`` go on to further lines?"""
        facts = self.facts
        if self._line_no != 0 or facts.line_after.strip() or not facts.line_before.strip():
            return False  # text after the cursor, or a blank line (its scope was decided as single)
        if not facts.start_state.is_code:
            return False  # prose in a comment or string stays on its line
        if not line.strip():
            return True  # the completion starts on the next line
        full = strip_comment(facts.line_before + line, self.lexicon).rstrip()
        return full.endswith(facts.openers)

    def _full_line(self, line: str) -> str:
        return self.facts.line_before + line if self._line_no == 0 else line

    def _brackets(self) -> tuple[str, str]:
        """The openers and closers the depth counts: braces, or every bracket in an element list."""
        return ("([{", ")]}") if self.facts.element_list else ("{", "}")

    def _scan_braces(self, line: str, start: int) -> None:
        """Find a code closer in ``line`` that takes the depth below zero (closes the enclosing block, or
        the element list's bracket)."""
        depth = self._depth
        hit: list[int] = []
        opens, closes = self._brackets()

        def on_code(i: int, ch: str) -> None:
            nonlocal depth
            if hit:
                return
            if ch in opens:
                depth += 1
            elif ch in closes:
                depth -= 1
                if depth < 0:
                    hit.append(i)

        self.lexicon.run(self._state, line, on_code)
        if not hit:
            return
        i = hit[0]
        closer = line[i]
        if self.facts.suffix_line.startswith(closer) or self.facts.line_after.strip().startswith(closer):
            # The document already closes the block: cut before the brace (and before its line).
            self._stop = self._cut_before_line() if not line[:i].strip() else start + len(line[:i].rstrip())
        else:
            self._stop = start + i + 1

    def _check_indent(self, line: str, start: int, complete: bool = True) -> None:
        """Indentation rules, decided as soon as a line's first code character appears (a dedent to what
        may become a continuing clause, once its first word is whole: ``complete`` says the line is)."""
        stripped = line.strip()
        if not stripped or not self._state.is_code:
            return  # blank so far, or a line inside a multi-line string/comment
        full = self._full_line(line)
        indent = indent_width(full)
        opener = self.facts.opener_indent
        if self._min_indent is None:
            if opener is not None and indent <= opener and self._line_no > 0:
                self._stop = (
                    self._cut_before_line()
                )  # the body would be empty: the model left the block at once
                return
            self._min_indent = indent
            return
        if indent < self._min_indent:
            floor = self._dedent_floor(self._min_indent)
            if floor is None or indent < floor:
                clause = self._clause(stripped, indent, complete)
                if clause is None:
                    return  # the line's first word is still coming: decide when it is there
                if not clause:
                    self._stop = self._cut_before_line()
                    return
                return  # a continuing clause; its body comes back to the completion's depth, and a
                # line left at the clause's depth that is not one ends the completion as before
            self._min_indent = indent
        if indent == 0 and self._blank_since_content and self._content_lines > 0:
            self._stop = self._cut_before_line()

    def _line_rules(self, line: str, start: int) -> None:
        stripped = self._full_line(line).strip()
        if not stripped:
            if self._content_lines > 0:
                self._blank_since_content = True
            return
        if self._ends_before(line, stripped):
            self._stop = self._cut_before_line()
            return
        self._keep_line(line, start)

    def _ends_before(self, line: str, stripped: str) -> bool:
        """Does the completion end before this non-blank line: a new top-level construct, the code after
        the cursor re-typed, a line repeated, or a jump that would leave the suffix dead?"""
        facts = self.facts
        if (
            facts.braces
            and self._line_no > 0
            and indent_width(line) == 0
            and self._blank_since_content
            and self._content_lines > 0
        ):
            return True  # a blank line, then a new top-level construct
        if (
            facts.suffix_line
            and stripped == facts.suffix_line
            and not _bracket_only(stripped)
            and not self._own_block_line(line)
        ):
            self._evidence = True  # re-typing the code after the cursor
            return True
        if (
            self._content_lines > 0  # a first line equal to a later suffix line can be the hole (eval)
            and len(stripped) >= self.config.min_repeat_len
            and any(is_word_char(c) for c in stripped)
            and stripped in facts.suffix_lines[1 : self.config.suffix_window]
        ):
            # Re-typing the code a little after the cursor (no evidence for suffix_body_wait: a paraphrased
            # body may come before such a line).
            return True
        if self._repeats(stripped):
            return True
        return self._makes_suffix_dead(line)

    def _repeats(self, stripped: str) -> bool:
        """A line the model is looping on: the line just before re-typed (or one of the recent lines), or
        any line more than ``max_repeats`` times. Counts the line when it is neither."""
        if len(stripped) < self.config.min_repeat_len or not any(is_word_char(c) for c in stripped):
            return False
        facts = self.facts
        # The cursor's own line counts once it is a fresh line (on "def f():|" it is the prefix's).
        fresh = self._line_no > 0 or not facts.line_before.strip()
        if self.config.repeat_previous_only:
            repeated = self._content_lines == 0 and stripped in facts.recent_lines[-1:]
        else:
            repeated = stripped in facts.recent_lines[-self.config.repeat_window :]
        if fresh and repeated:
            return True
        if self._seen[stripped] >= self.config.max_repeats:
            return True
        self._seen[stripped] += 1
        return False

    def _keep_line(self, line: str, start: int) -> None:
        """The line stays: count it, remember where a cut before the next line lands, and stop after it
        when it opens the block whose body the suffix already holds."""
        if self._top_indent is None:
            self._top_indent = indent_width(self._full_line(line))
        self._content_lines += 1
        self._blank_since_content = False
        self._before_header = self._kept_end if self._open_header(line) else None
        self._kept_end = start + len(line.rstrip())
        if self._opens_suffix_body(line):
            if self.config.suffix_body_wait and self._provisional is None:
                self._provisional = self._kept_end
            else:
                self._stop = self._kept_end
                # After a provisional header only a clause is evidence (another header, ``for i in
                # d:``, is a second block: HumanEval/111 L4), and not when the suffix goes on with such
                # a clause itself: then its first lines were the header's body (/9 L4).
                self._evidence = self._provisional is None or self._clause_opens_suffix(line)

    def _own_block_line(self, line: str) -> bool:
        """Is ``line`` inside a block the completion opened at (or below) the depth of the code after the
        cursor? Then a line equal to that code's first line is the block's own (``if a == b:`` / ``return
        True`` / ``else:`` / ``return False`` over the suffix's ``return True``; eval, HumanEval/109 L8_L10
        came out empty), not the suffix re-typed. A completion that starts shallower than that code and
        re-types it deeper is wrapping it (``class Solution:`` / ``def ...``: /68 L0): a re-type."""
        facts = self.facts
        if facts.braces or facts.suffix_indent is None or self._top_indent is None:
            return False
        return self._top_indent >= facts.suffix_indent and indent_width(self._full_line(line)) > self._top_indent

    def _makes_suffix_dead(self, line: str) -> bool:
        """A jump at the suffix's depth, the suffix going on with a statement there (no_dead_suffix)."""
        facts = self.facts
        if not self.config.no_dead_suffix or facts.braces or self._content_lines == 0:
            return False
        if facts.suffix_indent is None or not facts.suffix_lines:
            return False
        full = self._full_line(line)
        indent = indent_width(full)
        if indent != facts.suffix_indent or _head(full) not in JUMP_WORDS:
            return False
        if self._top_indent is not None and indent > self._top_indent:
            return False  # inside a block the completion opened (``if a:`` / ``return x`` / ``else:``)
        return _head(facts.suffix_lines[0]) not in CLAUSE_WORDS and not _bracket_only(facts.suffix_lines[0])

    def _cut_before_line(self) -> int:
        """Where a "cut before this line" lands: after the last kept line, or before it when that line
        is a block header whose body would then be missing."""
        if self._before_header is not None:
            return self._before_header
        return self._kept_end

    def _open_header(self, line: str) -> bool:
        """Is ``line`` (just kept) an indent-block header the suffix does not give a body to?"""
        facts = self.facts
        if not self.config.drop_open_header or facts.braces:
            return False
        if self._line_no == 0 and facts.line_before.strip():
            return False  # the header was started by the user: not the completion's to drop
        full = self._full_line(line)
        if not strip_comment(full, self.lexicon).rstrip().endswith(facts.openers):
            return False
        return facts.suffix_indent is None or facts.suffix_indent <= indent_width(full)

    def _clause_opens_suffix(self, line: str) -> bool:
        """Is ``line`` a clause (CLAUSE_WORDS) while the suffix's next lines have none of their own?"""
        later = self.facts.suffix_lines[1 : self.config.suffix_window]
        return _head(self._full_line(line)) in CLAUSE_WORDS and not any(_head(t) in CLAUSE_WORDS for t in later)

    def _clause(self, stripped: str, indent: int, complete: bool) -> bool | None:
        """Does a dedented line (``stripped``, at ``indent``) continue the statement the completion is in
        with one of CLAUSE_WORDS? None while a partial line could still become one."""
        facts = self.facts
        if not self.config.continue_clauses or facts.braces:
            return False
        word = _head(stripped)
        if stripped == word and any(w.startswith(word) for w in CLAUSE_WORDS) and not complete:
            return None
        if word not in CLAUSE_WORDS:
            return False
        below = facts.suffix_indent
        if below is not None:
            if indent < below:
                # Below the code after the cursor only as that code's header: the clause's body is where
                # the suffix starts (``return l[m]`` / ``else:`` over the suffix's ``return (l[m - 1]...``,
                # or ``elif c == ')':`` and its body, the suffix going on at that depth; eval, HumanEval/47
                # L2_L3, /1 L7_L10). Whether the line opens a block is known once it is whole.
                step = facts.indent_step
                if step is not None and below > indent + step:
                    return False
                if not complete:
                    return None
                code = strip_comment(stripped, self.lexicon).rstrip()
                return code.endswith(facts.openers)
            if indent == below and facts.suffix_lines and _head(facts.suffix_lines[0]) in CLAUSE_WORDS:
                return False
        return True

    def _dedent_floor(self, min_indent: int) -> int | None:
        """The least indentation a dedent may reach without ending the completion (None: no dedent)."""
        if not self.config.dedent_to_suffix:
            return None
        below = self.facts.suffix_indent
        if below is None:
            return 1  # nothing follows: stay inside the top-level construct (column 0 ends it)
        if not self.config.dedent_with_suffix:
            return None
        return below if below < min_indent else None

    def _opens_suffix_body(self, line: str) -> bool:
        """A fresh top-level line of the completion that opens a block whose body is already there: the
        code after the cursor starts deeper than this line (the hole is a block's header; eval)."""
        facts = self.facts
        if not self.config.suffix_body or facts.suffix_indent is None:
            return False
        if self._line_no == 0 and facts.line_before.strip():
            return False
        full = self._full_line(line)
        code = strip_comment(full, self.lexicon).rstrip()
        indent = indent_width(full)
        if self._min_indent is not None and indent < self._min_indent:
            return False  # a clause dedented below the completion (_clause): its own rules end it
        at_top = self._top_indent is None or indent <= self._top_indent
        # The suffix is this header's body only if it starts one step deeper: two steps deeper, it is
        # the inside of a block the body has yet to open (``for i in x:`` over ``            x *= j``,
        # eval, HumanEval/106 and /3).
        step = facts.indent_step
        deeper = facts.suffix_indent > indent and (step is None or facts.suffix_indent <= indent + step)
        return at_top and code.endswith(facts.openers) and deeper

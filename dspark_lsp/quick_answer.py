"""Quick answers: a completion asked while typing is shown once its first lines are done.

A multi-line completion of 32 tokens takes ~0.5 s on the 0.5B on a 2-core CPU (~20 target forwards);
its first line is usually done in a third of that. So an automatic request (the editor asking as the user
types) may stop decoding once ``quickAnswerMs`` have passed since it arrived and at least one line with
code in it is finished: it answers with the finished lines. The decode then goes on in the background
from where it stopped (the prompt and the tokens so far are in the prefix cache, so it prefills one
token) and the whole completion joins the typed-through cache: accepting the shown lines or typing
through them is answered with the next ones at once. llama.vim does the same with a 250 ms limit on its
first request and a background request for the text after the suggestion.

Lossless still: the lines shown are the start of what the whole decode gives, and the continuation is the
same greedy decode carried on (batch-invariant kernels make the KV of the tokens so far the same either
way). An unfinished first line is never shown cut: the deadline waits for it.

This module holds the decision (``EarlyStop``) and what is kept between the answer and its continuation
(``Unfinished``); the service (service.py) runs both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dspark_lsp.completion import Prepared


def has_finished_line(text: str) -> bool:
    """Whether ``text`` holds a line with code in it that a line break has closed."""
    return any(line.strip() for line in text.split("\n")[:-1])


class EarlyStop:
    """The decode's stop rule: the syntax tracker's, and past ``deadline`` (a perf_counter time; None:
    never) a finished line that the answer would show: ``shown(text)`` is what the user would see of
    ``text`` cut there (the stop rules drop a block header whose body has not started, so a finished
    line alone is not always enough). ``hit`` tells afterwards whether the deadline ended the decode."""

    def __init__(self, tracker: Any, deadline: float | None, shown: Callable[[str], str]) -> None:
        self.tracker = tracker
        self.deadline = deadline
        self.shown = shown
        self.hit = False

    def __call__(self, text: str) -> bool:
        if self.tracker.stop_index(text) is not None:
            return True
        if self.deadline is not None and time.perf_counter() >= self.deadline and has_finished_line(text):
            self.hit = bool(self.shown(text).strip())
        return self.hit


@dataclass
class Unfinished:
    """A completion answered early: its request and the target's tokens so far (``head``), from which
    the background continuation goes on; ``head_text`` is their text."""

    prep: Prepared
    head: tuple[int, ...]
    head_text: str

    def still_ahead(self, before: str, after: str) -> bool:
        """Whether the document (``before`` / ``after`` the cursor now) still leads to this completion:
        nothing after the cursor changed, and what was typed since agrees with the text decoded so far
        (either way round: the user may have typed past it)."""
        if after != self.prep.after or not before.startswith(self.prep.before):
            return False
        typed = before[len(self.prep.before):]
        return self.head_text.startswith(typed) or typed.startswith(self.head_text)

"""Prefill ahead of requests: the prompt's KV computed while the user is not waiting.

A wide prompt (other files' context plus a 1k-token window) costs seconds of prefill on a CPU. Paid at
the keystroke, every first completion in a place would wait for it; paid once in the background, the
request finds it in the prefix cache and prefills only what changed. Triggers, each for one spot:

* a document opens: its end (where the replay, and often the user, starts typing); an editor that knows
  the cursor sends `dspark/cursor` at once after and moves the spot;
* typing pauses (`PAUSE_S` after the last edit, no completion asked meanwhile): the edit's end;
* `dspark/cursor` (our VS Code and Neovim clients send it when the cursor rests): that position;
* a completion answered, the document unchanged since (`AFTER_COMPLETION_S`): the same spot. Its prompt is
  cached by then, so this is for the service's look-ahead: the window as it will be after its next slide
  (service.CompletionService.warm), prefilled while the user reads the suggestion or types on. An answer
  given early (quickAnswerMs) is decoded on to its end first, by the same job, even with warm-ups off.

One spot per document is pending at a time; a completion request for the document drops it (the request
pays for its own prompt). The warm-up itself runs on the service's worker thread only when no
completion is active, in small prefill slices, and any completion request cancels it (worker.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dspark_lsp.lsp.session import Session

log = logging.getLogger(__name__)

PAUSE_S = 0.6  # typing pause before a warm-up (longer than the completion debounce: a request goes first)
OPEN_DELAY_S = 0.2  # after didOpen: leave the client a moment to send dspark/cursor
CURSOR_DELAY_S = 0.3  # the cursor must rest this long
CURSOR_METHOD = "dspark/cursor"
AFTER_COMPLETION_S = 0.1  # a completion's answer was just sent: the worker is free, the user reads it


@dataclass
class Warmer:
    server: Session  # the session whose documents and worker it uses
    _pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)

    def enabled(self) -> bool:
        config = self.server.config
        return bool(getattr(config, "warm_up", False)) and self.server.worker is not None

    def schedule(self, uri: str, offset: int | Callable[[str], int], delay: float, *, force: bool = False) -> None:
        """Warm the prompt at ``offset`` of ``uri`` after ``delay`` seconds (replacing a pending spot).
        ``offset`` may be a function of the document's text then (its end, say). ``force``: an early
        answer waits to be finished there; with warm-ups off, the job does only that."""
        self.drop(uri)
        if not (self.enabled() or (force and self.server.worker is not None)):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._pending[uri] = loop.call_later(delay, self._fire, uri, offset, force)

    def after_completion(self, uri: str, text: str, offset: int, *, force: bool = False) -> None:
        """A completion at ``offset`` of ``text`` (the document's whole text then) was answered: warm
        that spot again unless a newer spot is pending (an edit came meanwhile) or the text changed by
        the time it fires."""
        if uri in self._pending:
            return
        self.schedule(uri, lambda now: offset if now is text else -1, AFTER_COMPLETION_S, force=force)

    def drop(self, uri: str) -> None:
        handle = self._pending.pop(uri, None)
        if handle is not None:
            handle.cancel()

    def drop_all(self) -> None:
        for uri in list(self._pending):
            self.drop(uri)

    def _fire(self, uri: str, offset: int | Callable[[str], int], force: bool = False) -> None:
        self._pending.pop(uri, None)
        doc = self.server.docs.get(uri)
        worker, backend = self.server.worker, self.server.backend
        finish_only = not self.enabled()
        if doc is None or worker is None or backend is None or (finish_only and not force):
            return
        text = doc.text
        at = offset(text) if callable(offset) else offset
        if not 0 <= at <= len(text):
            return
        from dspark_lsp.lsp.handlers.completion import request_at, windowed

        # The text the request there will see (a huge document is cut to a window around the cursor):
        # the same text, so the same prompt, token for token.
        seen, at = windowed(text, at)
        worker.warm(uri, lambda: request_at(self.server, backend, uri, seen, at, doc.language_id),
                    finish_only=finish_only)


def end_of(text: str) -> int:
    return len(text)


def cursor_params(params: Any) -> tuple[str, int, int] | None:
    """(uri, line, character) of a `dspark/cursor` notification, or None when malformed."""
    def get(value: Any, name: str) -> Any:
        return value.get(name) if isinstance(value, dict) else getattr(value, name, None)

    uri = get(get(params, "textDocument"), "uri")
    pos = get(params, "position")
    line, character = get(pos, "line"), get(pos, "character")
    if not isinstance(uri, str) or not all(isinstance(v, int) and not isinstance(v, bool) for v in (line, character)):
        return None
    return uri, line, character

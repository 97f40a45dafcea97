"""What the editor showed and what the user took: shown / accepted / partially accepted completions.

Notifications (the Copilot language server's names for the first two; params are objects):
  textDocument/didShowCompletion            {"uri"?, "item": {"insertText": str}}
  textDocument/didPartiallyAcceptCompletion {"uri"?, "item": {...}, "acceptedLength": int}
  dspark/didAcceptCompletion                {"uri"?, "item": {...}}   (the whole item was inserted)

They only feed counters in dspark/stats (`feedback`), so a client that sends none loses nothing and a
malformed one is logged and dropped (a notification has no answer to carry an error).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dspark_lsp.lsp.session import Session

log = logging.getLogger(__name__)

DID_SHOW = "textDocument/didShowCompletion"
DID_PARTIALLY_ACCEPT = "textDocument/didPartiallyAcceptCompletion"
DID_ACCEPT = "dspark/didAcceptCompletion"

# Documents whose last shown item is remembered (for the re-show check): the least recently shown go
# first. Unbounded, a long session (or a client sending made-up URIs) grew it by a text per document.
LAST_SHOWN_MAX = 256


def _field(obj: Any, name: str) -> Any:
    """pygls hands custom params over as a dict or as an attribute object, depending on its version."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _item_text(params: Any) -> str | None:
    item = _field(params, "item")
    text = _field(item, "insertText") if item is not None else None
    if isinstance(text, dict) or (text is not None and not isinstance(text, str)):
        text = _field(text, "value")  # a StringValue snippet {"kind": "snippet", "value": ...}
    return text if isinstance(text, str) else None


@dataclass
class Feedback:
    shown: int = 0
    accepted: int = 0
    partially_accepted: int = 0
    shown_chars: int = 0
    accepted_chars: int = 0  # whole accepts count the item's length, partial ones acceptedLength
    # The last item shown per document: a client that re-shows the same item as the user types
    # through it (VS Code asks again on every keystroke) must not count it again.
    _last_shown: OrderedDict[str, str] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def show(self, uri: str, text: str) -> None:
        with self._lock:
            if self._last_shown.get(uri) == text:
                self._last_shown.move_to_end(uri)
                return
            self._last_shown[uri] = text
            self._last_shown.move_to_end(uri)
            while len(self._last_shown) > LAST_SHOWN_MAX:
                self._last_shown.popitem(last=False)
            self.shown += 1
            self.shown_chars += len(text)

    def accept(self, uri: str, text: str) -> None:
        with self._lock:
            self.accepted += 1
            self.accepted_chars += len(text)
            self._last_shown.pop(uri, None)  # the next item here is a new one, even if equal

    def partially_accept(self, uri: str, length: int) -> None:
        with self._lock:
            self.partially_accepted += 1
            self.accepted_chars += length

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            rate = self.accepted / self.shown if self.shown else None
            any_rate = (self.accepted + self.partially_accepted) / self.shown if self.shown else None
            return {
                "shown": self.shown,
                "accepted": self.accepted,
                "partiallyAccepted": self.partially_accepted,
                # Shares of the shown completions the user took whole / took at least a part of.
                "acceptanceRate": None if rate is None else round(min(rate, 1.0), 4),
                "anyAcceptanceRate": None if any_rate is None else round(min(any_rate, 1.0), 4),
                "shownChars": self.shown_chars,
                "acceptedChars": self.accepted_chars,
            }


def did_show(session: Session, params: Any) -> None:
    text = _item_text(params)
    if text is None:
        log.debug("%s without an item's insertText; ignored", DID_SHOW)
        return
    session.feedback.show(str(_field(params, "uri") or ""), text)


def did_accept(session: Session, params: Any) -> None:
    text = _item_text(params)
    if text is None:
        log.debug("%s without an item's insertText; ignored", DID_ACCEPT)
        return
    session.feedback.accept(str(_field(params, "uri") or ""), text)


def did_partially_accept(session: Session, params: Any) -> None:
    length = _field(params, "acceptedLength")
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        log.debug("%s with acceptedLength %r; ignored", DID_PARTIALLY_ACCEPT, length)
        return
    session.feedback.partially_accept(str(_field(params, "uri") or ""), length)

"""Open documents, kept in sync with the client (full or incremental changes).

Our own store rather than pygls' workspace: pygls splits lines with str.splitlines() (which also breaks
on \\x0c, \\u2028 …, shifting positions) and raises on out-of-range edits. Edits are applied on the event
loop in arrival order; completion workers only ever see an immutable `Snapshot`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from dspark_lsp.lsp.positions import (
    Encoding,
    PositionError,
    line_starts,
    position_to_offset,
)

log = logging.getLogger(__name__)

# A surrogate code point in a Python str is a lone half: JSON decoding joins a valid pair into one
# character. No UTF-8 encoder (the syntax layer's, the tokenizer's) accepts one, so such a document got no
# completions at all. U+FFFD counts one UTF-16 unit and three UTF-8 bytes, as the lone half does in the
# client's UTF-16 text and under `surrogatepass`, so every position after it stays where the client has it.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(text: str) -> str:
    """`text` with each lone UTF-16 surrogate replaced by U+FFFD (same length, same positions)."""
    if text.isascii():
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


@dataclass(frozen=True)
class Snapshot:
    """The text of one document at one version: what a completion request works on."""

    uri: str
    text: str
    version: int | None
    language_id: str | None


@dataclass
class Document:
    uri: str
    text: str
    version: int | None = None
    language_id: str | None = None
    _starts: list[int] | None = field(default=None, repr=False)

    @property
    def starts(self) -> list[int]:
        """Line-start table, rebuilt lazily after an edit (one regex pass over the text)."""
        if self._starts is None:
            self._starts = line_starts(self.text)
        return self._starts

    def offset_at(self, line: int, character: int, encoding: Encoding, *, strict: bool) -> int:
        return position_to_offset(
            self.text, line, character, encoding=encoding, starts=self.starts, strict=strict
        )

    def replace(self, start: int, end: int, new_text: str) -> None:
        if end < start:  # a reversed range from a sloppy client: treat it as the same span
            start, end = end, start
        self.text = self.text[:start] + scrub(new_text) + self.text[end:]
        self._starts = None

    def set_text(self, text: str) -> None:
        self.text = scrub(text)
        self._starts = None

    def snapshot(self) -> Snapshot:
        return Snapshot(self.uri, self.text, self.version, self.language_id)


class DocumentStore:
    """URI -> Document. Single-threaded: only the event loop mutates it."""

    def __init__(self) -> None:
        self._docs: dict[str, Document] = {}

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, uri: str) -> bool:
        return uri in self._docs

    def get(self, uri: str) -> Document | None:
        return self._docs.get(uri)

    def open(self, uri: str, text: str, version: int | None, language_id: str | None) -> Document:
        doc = Document(uri, scrub(text), version, language_id)
        self._docs[uri] = doc
        return doc

    def close(self, uri: str) -> bool:
        return self._docs.pop(uri, None) is not None

    def change(
        self,
        uri: str,
        version: int | None,
        changes: list[tuple[tuple[int, int, int, int] | None, str]],
        encoding: Encoding,
    ) -> Document | None:
        """Apply changes in order. Each is (range as (l0, c0, l1, c1) or None for full text, new text).

        Out-of-range edits clamp (see positions.py) and are logged; a change for a document that was
        never opened is ignored (there is no base text to apply it to).
        """
        doc = self._docs.get(uri)
        if doc is None:
            log.warning("didChange for a document that is not open: %s (ignored)", uri)
            return None
        for rng, new_text in changes:
            if rng is None:
                doc.set_text(new_text)
                continue
            l0, c0, l1, c1 = rng
            try:
                start = doc.offset_at(l0, c0, encoding, strict=False)
                end = doc.offset_at(l1, c1, encoding, strict=False)
            except PositionError as exc:
                log.warning("didChange on %s with an invalid range %s: %s (ignored)", uri, rng, exc)
                continue
            doc.replace(start, end, new_text)
        doc.version = version
        return doc

"""A bounded ring of chunks from the documents the editor has open or the user just edited.

Why chunks and not whole files: a prompt has room for a few hundred tokens of other files, and the part
of a sibling file that helps is usually one function or class near code like the cursor's. The files are
cut at fixed line boundaries (``CHUNK_LINES``), so the same region always yields the same chunk text and
a chunk chosen on one keystroke is byte-identical on the next (the prompt's KV stays reusable).

Bounds: at most ``max_chunks`` chunks and ``max_chars`` characters in all; past either, the chunks of
the documents touched longest ago go first. Closing a document drops its chunks at once.

Ranking (``pick``): identifier overlap (Jaccard) between a chunk and the lines before the cursor, plus a
small bonus for recency and for the same language. What is picked is then *ordered* by document and
line, not by score, so a small change in the scores while the user types does not reorder the prompt.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

from dspark_lsp.context.types import ContextFile

CHUNK_LINES = 32
# Lines before the cursor's line that the ranking compares chunks with. The cursor's own line is left
# out on purpose: it changes on every keystroke, and the choice of chunks should not.
QUERY_LINES = 32
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
# A document larger than this is chunked from its first MAX_CHARS only: chunking runs on the server's
# event loop, and a 50 MB log file open in the editor must not stall it (nor would its chunks help).
MAX_CHARS = 1_000_000


def identifiers(text: str) -> frozenset[str]:
    """The identifiers of ``text`` (three characters or more: ``i``, ``x``, ``if`` say nothing)."""
    return frozenset(_IDENT.findall(text))


@dataclass
class Chunk:
    path: str  # what the prompt calls the file
    language: str | None
    first_line: int
    text: str
    idents: frozenset[str]
    stamp: int  # when its document was last touched (a counter, not a clock: tests stay exact)
    edited: bool = False  # the user edited inside it (worth more than a chunk merely open)


@dataclass(frozen=True)
class RingLimits:
    max_chunks: int = 256
    max_chars: int = 400_000
    chunks_per_file: int = 64  # 2,048 lines of one file at most; a huge file must not flush the rest


@dataclass
class ChunkRing:
    limits: RingLimits = field(default_factory=RingLimits)
    _chunks: dict[str, list[Chunk]] = field(default_factory=dict)
    _clock: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, path: str, text: str, language: str | None = None, *, edited_line: int | None = None) -> None:
        """The document at ``path`` is open with ``text`` (opened, or changed: its chunks are replaced).
        ``edited_line``: where the user just edited; that chunk ranks above the others of its file, and
        when the file has more chunks than a file may keep, the kept ones are those nearest to it."""
        lines = text[:MAX_CHARS].splitlines(keepends=True)
        starts = list(range(0, len(lines), CHUNK_LINES))
        keep = self.limits.chunks_per_file
        if len(starts) > keep:
            centre = (edited_line or 0) // CHUNK_LINES * CHUNK_LINES
            starts = sorted(sorted(starts, key=lambda s: abs(s - centre))[:keep])
        with self._lock:
            self._clock += 1
            chunks = []
            for s in starts:
                body = "".join(lines[s : s + CHUNK_LINES])
                if not body.strip():
                    continue
                edited = edited_line is not None and s <= edited_line < s + CHUNK_LINES
                chunks.append(Chunk(path, language, s, body, identifiers(body), self._clock, edited))
            self._chunks.pop(path, None)  # re-inserted last: dict order is the touch order
            self._chunks[path] = chunks
            self._evict()

    def forget(self, path: str) -> None:
        """The document was closed: its chunks go now, not when the bounds push them out."""
        with self._lock:
            self._chunks.pop(path, None)

    def __len__(self) -> int:
        return sum(len(c) for c in self._chunks.values())

    @property
    def chars(self) -> int:
        return sum(len(ch.text) for cs in self._chunks.values() for ch in cs)

    def paths(self) -> list[str]:
        return list(self._chunks)

    def __contains__(self, path: object) -> bool:
        return path in self._chunks

    def _evict(self) -> None:
        while len(self) > self.limits.max_chunks or self.chars > self.limits.max_chars:
            if len(self._chunks) > 1:
                del self._chunks[next(iter(self._chunks))]  # the document touched longest ago
                continue
            # One document over the bounds on its own: drop its last chunk that the user did not edit.
            chunks = next(iter(self._chunks.values()))
            idx = max((i for i, c in enumerate(chunks) if not c.edited), default=len(chunks) - 1)
            chunks.pop(idx)

    def pick(
        self,
        query: str,
        *,
        exclude: str | None = None,
        language: str | None = None,
        max_chars: int,
    ) -> list[ContextFile]:
        """Chunks most like ``query`` (the text before the cursor), within ``max_chars`` in all, in a
        stable order: by file in the order the files were first picked, then by line."""
        if max_chars <= 0:
            return []
        q = identifiers(query)
        if not q:
            return []
        with self._lock:
            newest = self._clock
            scored = []
            for path, chunks in self._chunks.items():
                if path == exclude:
                    continue
                for ch in chunks:
                    overlap = len(q & ch.idents)
                    if overlap == 0:
                        continue
                    score = overlap / len(q | ch.idents)
                    score += 0.05 * (ch.language == language) + 0.05 * ch.edited
                    score += 0.02 / (1 + newest - ch.stamp)
                    scored.append((score, ch))
        scored.sort(key=lambda sc: -sc[0])
        chosen: list[Chunk] = []
        used = 0
        for _score, ch in scored:
            if used + len(ch.text) > max_chars:
                continue
            chosen.append(ch)
            used += len(ch.text)
        chosen.sort(key=lambda c: (c.path, c.first_line))
        return [ContextFile(c.path, c.text, "open") for c in chosen]


# The query ends at the start of the cursor's block of QUERY_SNAP lines, not at the cursor's line: typing
# a newline then leaves the picked chunks (and the KV of everything after them) as they were, until the
# cursor enters the next block.
QUERY_SNAP = 16


def query_text(text: str, offset: int, lines: int = QUERY_LINES) -> str:
    """The ``lines`` full lines before the start of the cursor's block of ``QUERY_SNAP`` lines (the cursor's
    own line never counts): what ``pick`` compares chunks with."""
    cursor_line = text.count("\n", 0, offset)
    block_line = cursor_line // QUERY_SNAP * QUERY_SNAP
    line_start = text.rfind("\n", 0, offset) + 1
    if block_line > 0:  # in the first block there is nothing before it: the lines before the cursor's
        for _ in range(cursor_line - block_line):
            line_start = text.rfind("\n", 0, max(0, line_start - 1)) + 1
    window_start = max(0, line_start - 200 * lines)  # no need to split megabytes for 32 lines
    return "".join(text[window_start:line_start].splitlines(keepends=True)[-lines:])

"""LSP base-protocol framing (``Content-Length: N`` headers, a blank line, N bytes of JSON), read so that
one bad frame costs one error answer and never the frames after it.

pygls' reader matches the header with a case-sensitive full-line pattern and then blocks in
``readexactly(N)``: a frame whose Content-Length is too large swallowed every later message (the fuzz
test of issue 19 found a server that answered nothing after one such frame), and a body without its
header glued onto the next frame's header line and hid that frame too. This reader instead

* finds headers anywhere (case-insensitive, after any garbage), so it resynchronises after junk;
* cuts a body short where the next frame's header appears inside it. Valid JSON can never contain the
  raw bytes ``Content-Length: 12`` followed by a line break (a JSON string cannot hold a raw newline and
  the name is not a JSON token), so such a body is malformed anyway and the frame after it is real;
* refuses absurd lengths up front instead of buffering gigabytes.

Decoding a body into a message is the protocol's job (`DSparkProtocol.handle_body`); this module only
splits the byte stream.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# A 300k-character line is ~1 MB of JSON; nothing an editor sends comes near this.
MAX_BODY_BYTES = 256 * 1024 * 1024
_CHUNK = 1 << 16
# Garbage without any header is dropped, but the last bytes are kept: they may be a header's start.
_KEEP_TAIL = 64
_HEADER = re.compile(rb"content-length[ \t]*:[ \t]*(\d{1,15})[ \t]*\r?\n", re.IGNORECASE)
_OTHER_HEADER = re.compile(rb"[A-Za-z][A-Za-z0-9-]*[ \t]*:[^\r\n]*")


@dataclass(frozen=True)
class Frame:
    """One body. ``complete`` is False when it was cut short (the next header came first, the stream
    ended, or the announced length was refused): such a body is reported as malformed."""

    body: bytes
    complete: bool
    problem: str = ""


class FrameReader:
    """Splits a byte stream into frames; ``read(n)`` returns up to n bytes, b"" at end of stream."""

    def __init__(self, read: Callable[[int], Awaitable[bytes]]) -> None:
        self._read = read
        self._buf = bytearray()
        self._eof = False

    async def _fill(self) -> bool:
        if self._eof:
            return False
        chunk = await self._read(_CHUNK)
        if not chunk:
            self._eof = True
            return False
        self._buf += chunk
        return True

    def _drop(self, n: int, why: str) -> None:
        junk = bytes(self._buf[:n])
        del self._buf[:n]
        if junk.strip():
            log.warning("skipped %d bytes that are not a framed message (%s): %.80r", len(junk), why, junk)

    async def next(self) -> Frame | None:
        """The next frame, or None at the end of the stream."""
        while True:
            match = _HEADER.search(self._buf)
            if match is None:
                if len(self._buf) > 4 * _CHUNK:
                    self._drop(len(self._buf) - _KEEP_TAIL, "no Content-Length header")
                if not await self._fill():
                    if self._buf.strip():
                        self._drop(len(self._buf), "no Content-Length header at the end of the stream")
                    return None
                continue
            body_start = self._end_of_headers(match.end())
            if body_start is None:  # the header block is not complete yet
                if not await self._fill():
                    return None
                continue
            if body_start < 0:  # a line that is no header where headers should be: junk, look again
                self._drop(-body_start, "a broken header block")
                continue
            if match.start():
                # Other headers (Content-Type) may come before Content-Length; anything else is junk.
                before = bytes(self._buf[: match.start()])
                if not all(_OTHER_HEADER.fullmatch(line) for line in before.split(b"\r\n")[:-1] if line):
                    log.warning("skipped %d bytes before a frame: %.80r", len(before), before)
            length = int(match.group(1))
            del self._buf[:body_start]
            if length > MAX_BODY_BYTES:
                # Its bytes follow as junk and are skipped up to the next header.
                return Frame(b"", False, f"Content-Length {length} is over the {MAX_BODY_BYTES}-byte limit")
            return await self._body(length)

    def _end_of_headers(self, pos: int) -> int | None:
        """Where the body starts (after the blank line), None if more bytes are needed, or -(bytes to
        drop) when a non-header line sits inside the header block."""
        while True:
            newline = self._buf.find(b"\n", pos)
            if newline < 0:
                return None
            line = bytes(self._buf[pos:newline]).rstrip(b"\r")
            if not line:
                return newline + 1
            if not _OTHER_HEADER.fullmatch(line):
                return -pos
            pos = newline + 1

    async def _body(self, length: int) -> Frame:
        scanned = 0
        while True:
            # Look for the next frame's header starting inside what we have of this body (see the
            # module doc). The search runs past `length`: a header that starts inside the announced
            # body may end after it. (One whose rest has not arrived yet when the body is complete is
            # missed; clients write a frame in one go, so the rest comes with it.)
            cut = _HEADER.search(self._buf, max(0, scanned - _KEEP_TAIL))
            if cut is not None and cut.start() < length:
                body = bytes(self._buf[: cut.start()])
                del self._buf[: cut.start()]
                return Frame(body, False, f"the body is shorter than its Content-Length {length}")
            scanned = min(len(self._buf), length)
            if len(self._buf) >= length:
                body = bytes(self._buf[:length])
                del self._buf[:length]
                return Frame(body, True)
            if not await self._fill():
                body = bytes(self._buf)
                self._buf.clear()
                return Frame(body, False, "the stream ended inside a body")

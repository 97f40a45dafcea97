"""Reads the client's byte stream on a daemon thread and feeds an asyncio.StreamReader.

pygls reads stdin through its thread pool, whose threads are joined at interpreter exit: after `exit`
the process would hang until the client closed the pipe. A daemon thread does not hold exit up.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import BinaryIO

CHUNK = 1 << 16


class DaemonStdinReader:
    """read(n) for framing.FrameReader, plus the AsyncReader interface of pygls' run_async (readline /
    readexactly); b"" at EOF."""

    def __init__(self, stream: BinaryIO, loop: asyncio.AbstractEventLoop) -> None:
        # A huge line (a minified file pasted in one go) must not trip StreamReader's line limit:
        # headers are short, bodies are read with readexactly.
        self._reader = asyncio.StreamReader(limit=1 << 30)
        self._loop = loop
        self._stream = stream
        threading.Thread(target=self._pump, name="dspark-stdin", daemon=True).start()

    def _pump(self) -> None:
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):
            fd = None
        try:
            while True:
                chunk = os.read(fd, CHUNK) if fd is not None else self._stream.read1(CHUNK)  # type: ignore[attr-defined]
                if not chunk:
                    break
                self._loop.call_soon_threadsafe(self._reader.feed_data, chunk)
        except (OSError, ValueError):
            pass
        finally:
            try:
                self._loop.call_soon_threadsafe(self._reader.feed_eof)
            except RuntimeError:  # loop already closed
                pass

    async def read(self, n: int) -> bytes:
        """Up to n bytes as they arrive (b"" at EOF): what framing.FrameReader reads."""
        return await self._reader.read(n)

    async def readline(self) -> bytes:
        try:
            return await self._reader.readline()
        except (asyncio.LimitOverrunError, ValueError):
            return b""

    async def readexactly(self, n: int) -> bytes:
        try:
            return await self._reader.readexactly(n)
        except asyncio.IncompleteReadError as exc:
            return exc.partial

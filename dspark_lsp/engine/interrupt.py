"""Stopping a prompt's prefill between two layers once nobody wants it.

A background warm-up prefills a prompt in slices and checks its cancel flag between them; a request that
arrives meanwhile waits for the slice in progress. On a slow CPU that wait is most of a slow follow-up: the
1.5B on a 2-core AVX2 host prefills at ~15 ms a token, so the smallest 64-token slice holds the model for
~1 s (typing replay: 7 of 25 follow-ups waited 0.24-1.3 s behind one). Inside ``interruptible(event)``, a
forward that checks between layers (models/lean_forward.py) raises :class:`ForwardInterrupted` as soon as
``event`` is set; the caller then crops the cache back to where the slice began (``kv.crop_layers``), so
the request waits one layer (~1/28 of the slice) instead of the whole slice, and what the earlier slices
prefilled is kept. Decode and verify forwards are one short forward each and are never interrupted.

A thread-local, not an argument: the forward is called through transformers' model signature, which has
no place for it, and each thread (a warm-up's, a request's) has its own flag.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_local = threading.local()


class ForwardInterrupted(Exception):
    """The flag given to :func:`interruptible` was set while a forward ran; its cache holds a partial
    slice, which the caller must crop."""


@contextmanager
def interruptible(event: threading.Event | None) -> Iterator[None]:
    """Forwards run by this thread inside the block stop between layers once ``event`` is set (None: never)."""
    before = getattr(_local, "event", None)
    _local.event = event
    try:
        yield
    finally:
        _local.event = before


def check_interrupt() -> None:
    """Raise :class:`ForwardInterrupted` when this thread's forward is no longer wanted (a layer boundary)."""
    event = getattr(_local, "event", None)
    if event is not None and event.is_set():
        raise ForwardInterrupted

"""Stopping a prompt's prefill between two layers once nobody wants it.

A background warm-up prefills a prompt in slices and checks its cancel flag between them; a request that
arrives meanwhile waits for the slice in progress. On a slow CPU that wait is most of a slow follow-up: the
1.5B on a 2-core AVX2 host prefills at ~15 ms a token, so the smallest 64-token slice holds the model for
~1 s (typing replay: 7 of 25 follow-ups waited 0.24-1.3 s behind one). Inside ``interruptible(event)``, a
forward that checks between layers (models/lean_forward.py) raises :class:`ForwardInterrupted` as soon as
``event`` is set; the caller then crops the cache back to where the slice began (``kv.crop_layers``), so
the request waits one layer (~1/28 of the slice) instead of the whole slice, and what the earlier slices
prefilled is kept. Decode and verify forwards are one short forward each and are never interrupted.

The exception carries the layer it stopped before and the hidden states that layer would have read, so
the slice's finished layers need not be thrown away: engine/resume.py keeps them and a later prompt that
starts the same way finishes the slice from that layer.

A thread-local, not an argument: the forward is called through transformers' model signature, which has
no place for it, and each thread (a warm-up's, a request's) has its own flag.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_local = threading.local()


class ForwardInterrupted(Exception):
    """The flag given to :func:`interruptible` was set while a forward ran; its cache holds a partial
    slice, which the caller must crop. ``layer``: the first layer that did not run; ``hidden``: what it
    would have read ([1, rows, d]; None when the forward could not say)."""

    def __init__(self, layer: int = 0, hidden: torch.Tensor | None = None) -> None:
        super().__init__(f"forward stopped before layer {layer}")
        self.layer = layer
        self.hidden = hidden


@contextmanager
def interruptible(event: threading.Event | None) -> Iterator[None]:
    """Forwards run by this thread inside the block stop between layers once ``event`` is set (None: never)."""
    before = getattr(_local, "event", None)
    _local.event = event
    try:
        yield
    finally:
        _local.event = before


def check_interrupt(layer: int = 0, hidden: torch.Tensor | None = None) -> None:
    """Raise :class:`ForwardInterrupted` when this thread's forward is no longer wanted (called at a layer
    boundary: ``layer`` is about to run on ``hidden``)."""
    event = getattr(_local, "event", None)
    if event is not None and event.is_set():
        raise ForwardInterrupted(layer, hidden)

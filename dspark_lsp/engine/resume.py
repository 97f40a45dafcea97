"""Finishing a prefill slice that was stopped half-way (engine/interrupt.py) instead of redoing it.

A request stops a background warm-up between two layers. Cropping the slice away threw out the layers
that had run: on a 2-core AVX2 CPU, the 1.5B's look-ahead warm-up for a slid window (the prompt the next
keystrokes will send) was stopped by nearly every keystroke, so the request after the slide prefilled
135-187 tokens instead of 16-123 and the file's end got slower at p95 (3.1 -> 4.9 s in a typing replay,
bench/results/2026-12-07-zen3/). Causal attention makes a slice's first rows independent of its later
ones, so what a stopped slice computed stays valid for any prompt with the same tokens up to those rows:
the keys and values its finished layers wrote, and the hidden states entering the first layer that did
not run. :func:`capture` copies them out before the cache is cropped; when a later prefill starts where
the slice started, on the same tokens, :meth:`PartialSlice.restore` puts the matching rows back into the
finished layers and the model runs only the remaining ones (``LeanQwen2.resume``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dspark_lsp.engine.interrupt import ForwardInterrupted
from dspark_lsp.engine.prefix_cache import common_prefix_len


@dataclass
class PartialSlice:
    """A stopped slice: the cache before it covered ``ids[:start]`` and its rows are ``ids[start:]``;
    layers before ``layer`` ran (their keys / values for those rows are kept), ``hidden`` [1, rows, d]
    is what ``layer`` would have read."""

    ids: list[int]
    start: int
    layer: int
    hidden: torch.Tensor
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    def rows_for(self, prompt: list[int], start: int, limit: int, cache: Any) -> int:
        """How many of the slice's rows a prefill of ``prompt`` from ``start`` on ``cache`` can take (at
        most ``limit``): 0 unless it starts where the slice started, on the same tokens, with every
        layer of the cache at that length."""
        if start != self.start or prompt[:start] != self.ids[:start]:
            return 0
        layers = getattr(cache, "layers", None)
        if layers is None or any(int(layer.get_seq_length()) != start for layer in layers):
            return 0
        return common_prefix_len(prompt[start : start + limit], self.ids[start:])

    def restore(self, cache: Any, rows: int) -> torch.Tensor:
        """Append the first ``rows`` rows to the finished layers of ``cache``; returns what the first
        unfinished layer reads for them."""
        for layer, k, v in zip(cache.layers, self.keys, self.values, strict=False):  # layers < self.layer
            layer.update(k[..., :rows, :], v[..., :rows, :])
        return self.hidden[:, :rows]


def capture(cache: Any, stop: ForwardInterrupted, ids: list[int], start: int) -> PartialSlice | None:
    """What a slice of ``ids[start:]`` fed on a cache of ``ids[:start]`` left when ``stop`` ended it
    (copies: the caller crops the cache next), or None when there is nothing to keep."""
    layers = getattr(cache, "layers", None)
    rows = len(ids) - start
    if stop.hidden is None or stop.layer <= 0 or layers is None or rows <= 0 or stop.hidden.shape[1] < rows:
        return None
    done, rest = layers[: stop.layer], layers[stop.layer :]
    # A padded slice (DecodeConfig.pad_to) wrote more rows than it has tokens; the padding is not kept.
    if any(int(layer.get_seq_length()) < start + rows for layer in done) \
            or any(int(layer.get_seq_length()) != start for layer in rest):
        return None
    keys = [layer.keys[..., start : start + rows, :].clone() for layer in done]
    values = [layer.values[..., start : start + rows, :].clone() for layer in done]
    return PartialSlice(list(ids), start, stop.layer, stop.hidden[:, :rows].clone(), keys, values)

"""A draft source backed by any causal LM that shares the target's tokenizer (autoregressive drafting)."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import torch

from dspark_lsp.engine.draft import DraftSource, Proposal, runner_ups
from dspark_lsp.engine.kv import cache_len, crop, forward, new_cache
from dspark_lsp.engine.prefix_cache import common_prefix_len

# Tokens a background prefill feeds between checks of its cancel event: a slice of the 0.5B is ~0.3 s on
# two cores, so a request waits at most that long for the warm-up to yield.
PREFILL_SLICE = 128


def dist_from_logits(logits: torch.Tensor, temperature: float, vocab_size: int) -> torch.Tensor:
    """Probability vector over the first ``vocab_size`` ids (a draft may pad its vocab differently)."""
    logits = logits[:vocab_size]
    if logits.shape[0] < vocab_size:
        pad = torch.full((vocab_size - logits.shape[0],), float("-inf"), dtype=logits.dtype)
        logits = torch.cat([logits, pad])
    if temperature > 0:
        return torch.softmax(logits / temperature, dim=-1)
    return torch.softmax(logits, dim=-1)


class ModelDraftSource(DraftSource):
    """An autoregressive draft model with its own KV cache, re-synced to each new context by prefix."""

    supports_parallel = False

    def __init__(self, model: Any, vocab_size: int, name: str = "model") -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.name = name
        self._cache = new_cache(model)
        self._ids: list[int] = []  # what the cache covers

    def reset(self) -> None:
        self._cache = new_cache(self.model)
        self._ids = []

    def prefill(self, context: list[int], cancel: threading.Event | None = None) -> int:
        """Feed what the cache lacks of ``context`` in slices, checking ``cancel`` between them (a slice
        already fed is kept: the cache stays a prefix of ``context``). Without it, the first draft call of
        a request prefills the whole prompt on the draft model: on the 1.5B+0.5B pair that was most of the
        draft's time (bench/results/2026-12-04-1p5b-drafts/)."""
        keep = common_prefix_len(self._ids, context)
        crop(self._cache, keep)
        self._ids = self._ids[:keep]
        fed = 0
        for start in range(keep, len(context), PREFILL_SLICE):
            if cancel is not None and cancel.is_set():
                break
            part = context[start : start + PREFILL_SLICE]
            forward(self.model, part, self._cache, keep=1)
            self._ids.extend(part)
            fed += len(part)
        assert cache_len(self._cache) == len(self._ids)
        return fed

    def _logits_after(self, context: list[int]) -> torch.Tensor:
        """Logits for the token after ``context``; leaves the cache covering all of ``context``."""
        keep = common_prefix_len(self._ids, context[:-1])
        crop(self._cache, keep)
        self._ids = self._ids[:keep]
        feed = context[keep:]
        logits = forward(self.model, feed, self._cache, keep=1)[0]
        self._ids = list(context)
        assert cache_len(self._cache) == len(self._ids)
        return logits

    def propose(
        self,
        context: list[int],
        max_tokens: int,
        *,
        parallel: bool,
        tau: float,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Proposal:
        out = Proposal.empty(temperature)
        ctx = list(context)
        while len(out.tokens) < max_tokens:
            logits = self._logits_after(ctx)
            out.forwards += 1
            probs = dist_from_logits(logits, temperature, self.vocab_size)
            if temperature > 0:
                tok = int(torch.multinomial(probs, 1, generator=generator).item())
            else:
                tok = int(torch.argmax(probs).item())
            conf = float(probs[tok].item())
            out.add(tok, conf, probs if temperature > 0 else None, partial(runner_ups, probs))
            if conf < tau:
                break
            ctx.append(tok)
        return out

"""``TrainedDraftSource``: the trained draft network behind the engine's ``DraftSource`` protocol.

It keeps a KV cache of the real context it has seen and re-syncs it on each call by longest common
prefix (crop, then extend), so after the decode loop rejects tokens the next call only pays for what
changed. The parallel step appends MASK tokens, reads n proposals from one forward, then crops the masks
back out of the cache.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dspark_lsp.drafts.blocks import KVCache
from dspark_lsp.drafts.io import DEFAULT_DRAFT, load_draft_net
from dspark_lsp.drafts.token.model import DraftNet
from dspark_lsp.drafts.vocab import MASK_ID, DraftVocab, append_pick
from dspark_lsp.engine.draft import DraftSource, Proposal, window_start
from dspark_lsp.engine.prefix_cache import common_prefix_len


class TrainedDraftSource(DraftSource):
    supports_parallel = True

    def __init__(self, model: DraftNet, vocab: DraftVocab, name: str = "trained-draft") -> None:
        self.model, self.vocab, self.name = model.eval(), vocab, name
        self.n_parallel = model.cfg.n_parallel
        self.max_context = model.cfg.max_context
        self._cache: KVCache = model.new_cache()
        self._seen: list[int] = []  # target ids whose keys/values are in the cache, in order
        self._offset = 0  # target-context index of self._seen[0] (non-zero once past max_context)

    def reset(self) -> None:
        self._cache = self.model.new_cache()
        self._seen = []
        self._offset = 0

    # -- cache --------------------------------------------------------------------------------------
    def _window(self, context: list[int]) -> tuple[int, list[int]]:
        """The part of the context the draft looks at. Past max_context, the window start moves in
        jumps of half the window, so consecutive calls mostly share it and keep their cache."""
        start = window_start(len(context), self.max_context)
        return start, context[start:]

    def _sync(self, context: list[int]) -> torch.Tensor:
        """Bring the cache to ``context[:-1]`` and run the last token(s); returns the last logits [V]."""
        if not context:
            raise ValueError("the draft needs at least one context token")
        start, window = self._window(context)
        if start != self._offset:
            self.reset()
            self._offset = start
        keep = min(common_prefix_len(self._seen, window), len(window) - 1)
        self._cache.crop(keep)
        new = window[keep:]
        logits = self._forward(new, keep)
        self._seen = window[:]
        return logits[-1]

    @torch.inference_mode()
    def _forward(self, target_ids: list[int], past: int, n_masks: int = 0) -> torch.Tensor:
        ids = self.vocab.encode(target_ids)
        if n_masks:
            ids = torch.cat([ids, torch.full((n_masks,), MASK_ID, dtype=torch.long)])
        positions = torch.arange(past, past + int(ids.numel()))
        return self.model(ids[None], positions[None], None, self._cache)[0].float()

    # -- proposals ----------------------------------------------------------------------------------
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
        if max_tokens <= 0:
            return out
        if parallel and self.n_parallel > 1:
            return self._propose_parallel(context, max_tokens, tau, temperature, generator, out)
        logits = self._sync(list(context))
        out.forwards += 1
        while True:
            p = append_pick(out, self.vocab, logits, temperature, generator)
            tok = out.tokens[-1]
            # Stop once the draft is unsure: a low-confidence token is still offered (verifying it is
            # nearly free), but drafting past it would mostly be wasted forwards.
            if len(out.tokens) >= max_tokens or p < tau:
                return out
            past = self._cache.length
            logits = self._forward([tok], past)[-1]
            self._seen.append(tok)
            out.forwards += 1

    def _propose_parallel(
        self,
        context: list[int],
        max_tokens: int,
        tau: float,
        temperature: float,
        generator: torch.Generator | None,
        out: Proposal,
    ) -> Proposal:
        n = min(max_tokens, self.n_parallel)
        start, window = self._window(list(context))
        if start != self._offset:
            self.reset()
            self._offset = start
        keep = min(common_prefix_len(self._seen, window), len(window) - 1)
        self._cache.crop(keep)
        logits = self._forward(window[keep:], keep, n_masks=n - 1)[-n:]
        self._cache.crop(len(window))  # the masks' keys/values are not context: drop them
        self._seen = window[:]
        out.forwards += 1
        for i in range(n):
            p = append_pick(out, self.vocab, logits[i], temperature, generator)
            if p < tau:
                break
        return out


def load_draft(path_or_name: str | Path = DEFAULT_DRAFT, dtype: torch.dtype = torch.float32) -> TrainedDraftSource:
    """Load a shipped draft (by name, from package data, offline) or a draft directory."""
    model, vocab = load_draft_net(path_or_name, dtype)
    return TrainedDraftSource(model, vocab, name=Path(str(path_or_name)).name)

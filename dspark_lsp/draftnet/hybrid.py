"""``HybridDraftSource``: prompt lookup first, the trained draft where lookup has nothing solid.

Code repeats itself, and on held-out FIM prompts a 2+-token n-gram match in the context predicts the
target better than a few-million-parameter draft does, at no forward cost. Where no such match exists
the trained draft proposes. Sampling (temperature > 0) always uses the model, whose proposals carry the
distribution q that speculative sampling needs.
"""

from __future__ import annotations

import torch

from dspark_lsp.draftnet.source import TrainedDraftSource
from dspark_lsp.engine.draft import DraftSource, Proposal
from dspark_lsp.engine.ngram import NgramDraftSource


class HybridDraftSource:
    supports_parallel = True

    def __init__(self, model: TrainedDraftSource, lookup: DraftSource | None = None, min_confidence: float = 0.55) -> None:
        # 0.55 is the n-gram source's confidence for a 1-token match. Measured on the held-out set (see the
        # shipped draft's MODEL_CARD.md): trusting even 1-gram matches (2.20 tokens per target forward)
        # beat requiring 2-gram matches (2.03), because the draft is weaker than a 1-gram copy.
        self.model = model
        self.lookup = lookup or NgramDraftSource(max_ngram=4, min_ngram=1)
        self.min_confidence = min_confidence
        self.name = f"{model.name}+ngram"

    def reset(self) -> None:
        self.model.reset()
        self.lookup.reset()

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
        if temperature <= 0 and max_tokens > 0:
            p = self.lookup.propose(context, max_tokens, parallel=parallel, tau=tau)
            if p.tokens and p.confidence[0] >= self.min_confidence:
                return p
        return self.model.propose(context, max_tokens, parallel=parallel, tau=tau, temperature=temperature,
                                  generator=generator)

"""An ordered chain of draft sources: the first source with a confident proposal answers the call.

The idea is llama.cpp's (common/speculative.cpp tries its cheap drafts before the model): a free
proposal (n-gram lookup) that clears its bar is taken; otherwise the next source is asked, and the last
one answers whatever it proposes. Each answered proposal says which source made its tokens
(``Proposal.sources``), so the decoder can count proposed and accepted tokens per source
(``DecodeStats.source_proposed`` / ``source_accepted``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from dspark_lsp.engine.draft import DraftSource, Proposal, RecentOutputs


@dataclass
class ChainLink:
    """One source of a chain and the first-token confidence its proposal needs to answer the call (the
    last link answers regardless). ``calibrate`` maps the link's confidences where the chain's must be
    acceptance probabilities but this source's are not (n-gram lookup beside a confidence head)."""

    source: DraftSource
    min_confidence: float = 0.0
    calibrate: Callable[[float], float] | None = None


class DraftChain(DraftSource):
    """Asks its links in order; the first with tokens whose first confidence reaches the link's
    ``min_confidence`` answers. A link that cannot draft in parallel is asked for one token."""

    supports_parallel = True

    def __init__(self, links: Sequence[ChainLink], name: str | None = None) -> None:
        if not links:
            raise ValueError("a draft chain needs at least one source")
        self.links = list(links)
        self.name = name or "+".join(link.source.name for link in self.links)
        # The features go to whichever link reads them; the decoder computes them if any does.
        self.wants_features = any(link.source.wants_features for link in self.links)
        self.calibrated = any(link.source.calibrated for link in self.links)

    def set_features(self, start: int, feats: torch.Tensor) -> None:
        for link in self.links:
            link.source.set_features(start, feats)

    def set_corpus(self, corpus: Callable[[], list[int]]) -> None:
        for link in self.links:
            link.source.set_corpus(corpus)

    def set_recent(self, recent: RecentOutputs | None) -> None:
        for link in self.links:
            link.source.set_recent(recent)

    def reset(self) -> None:
        for link in self.links:
            link.source.reset()

    def prefill(self, context: list[int], cancel: threading.Event | None = None) -> int:
        return sum(link.source.prefill(context, cancel) for link in self.links)

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
        if max_tokens <= 0:
            return Proposal()
        for i, link in enumerate(self.links):
            last = i == len(self.links) - 1
            p = self._ask(link, context, max_tokens, parallel, tau, temperature, generator)
            if last or (p.tokens and p.confidence[0] >= link.min_confidence):
                return self._answer(i, context, p, tau, temperature)
        raise AssertionError("unreachable: the last link always answers")

    def _ask(self, link: ChainLink, context: list[int], max_tokens: int, parallel: bool, tau: float,
             temperature: float, generator: torch.Generator | None) -> Proposal:
        use_parallel = parallel and link.source.supports_parallel
        return link.source.propose(context, max_tokens if use_parallel else 1, parallel=use_parallel, tau=tau,
                                   temperature=temperature, generator=generator)

    def _answer(self, index: int, context: list[int], p: Proposal, tau: float, temperature: float) -> Proposal:
        """Link ``index``'s proposal as the chain's answer: confidences mapped where the link says, and
        every token marked as that source's. (``context``, ``tau`` and ``temperature`` are the call's, for
        a chain that does more with an answer: the hybrid's second opinion.)"""
        link = self.links[index]
        if self.calibrated and link.calibrate is not None:
            p.confidence = [link.calibrate(c) for c in p.confidence]
        p.sources = [link.source.name] * len(p.tokens)
        return p

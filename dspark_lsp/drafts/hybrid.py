"""n-gram lookup in front of a model draft (HybridDraftSource, a two-link DraftChain), and what the lookup's
confidences mean."""

from __future__ import annotations

from dspark_lsp.drafts.chain import ChainLink, DraftChain
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.draft import DraftSource, Proposal


def lookup_of(src: DraftSource | None) -> NgramDraftSource | None:
    """The n-gram lookup a draft source drafts with (itself, or a chain's first lookup: a hybrid's), if any.
    (A request's corpus reaches it through the source's ``set_corpus``.)"""
    if isinstance(src, NgramDraftSource):
        return src
    if isinstance(src, DraftChain):
        return next((link.source for link in src.links if isinstance(link.source, NgramDraftSource)), None)
    return None


# What the lookup's fixed confidences turn out to mean: the share of its tokens the 4-bit default target
# accepted (each judged with every earlier one of its round accepted), per stated confidence, replaying the
# decode loop with the lookup alone on 40 held-out prompts in four languages
# (dspark_lsp/drafts/dspark-feat-qwc05/eval/calib_gguf.json; 756 tokens). Used only beside a calibrated
# draft, whose cost rule reads confidences as probabilities.
LOOKUP_ACCEPTANCE = {0.55: 0.35, 0.75: 0.57, 0.95: 0.68, 1.0: 0.84}


def calibrated_lookup(confidence: float) -> float:
    """The measured acceptance for a lookup confidence (the nearest stated value's)."""
    key = min(LOOKUP_ACCEPTANCE, key=lambda c: abs(c - confidence))
    return LOOKUP_ACCEPTANCE[key]


class HybridDraftSource(DraftChain):
    """n-gram lookup first, a draft model where the lookup has nothing: a two-link :class:`DraftChain`.

    Code repeats itself: on held-out FIM prompts even a 1-token n-gram match predicted the target better
    than our small trained draft (2.20 tokens per target forward with lookup on any match, 2.03 when
    requiring 2-token matches; see dspark_lsp/drafts/*/MODEL_CARD.md), and lookup costs no forward.
    Without a match, the model drafts: its masked parallel step when it has one, else one
    autoregressive step. Under sampling a lookup proposal is deterministic, which the speculative-
    sampling rule handles exactly as a one-hot q (accept with probability p(token)).
    """

    def __init__(
        self,
        model_source: DraftSource,
        ngram: NgramDraftSource | None = None,
        min_lookup_confidence: float = 0.55,
        second_opinion: bool = False,
    ) -> None:
        self.model_source = model_source
        self.ngram = ngram or NgramDraftSource()
        # 0.55 is NgramDraftSource's confidence for a 1-token match: any match is trusted. Beside a
        # calibrated draft (a confidence head: the decoder's cost rule reads confidences as
        # probabilities) the lookup's confidences become its measured acceptance.
        lookup = ChainLink(self.ngram, min_lookup_confidence, calibrate=calibrated_lookup)
        super().__init__([lookup, ChainLink(model_source)], name=f"{model_source.name}+ngram")
        self.min_lookup_confidence = min_lookup_confidence
        # Greedy only: when the lookup answers, also ask the model for the first position and offer its
        # choices as alternates (engine.alternates) - verified in the same target forward, so a lookup
        # that copied the wrong continuation can still land the model's token. Worth one draft forward
        # only when that is cheap next to the target's (a feature draft: ~2% of one).
        self.second_opinion = second_opinion
        self._continues: list[int] = []  # the context a call continuing this round would pass

    def reset(self) -> None:
        super().reset()
        self._continues = []

    def _answer(self, index: int, context: list[int], p: Proposal, tau: float, temperature: float) -> Proposal:
        if index > 0:  # the model answered
            self._continues = []
            return super()._answer(index, context, p, tau, temperature)
        # Within a round the decoder calls again with the previous proposal appended; the model's
        # opinion is asked only at a round's first position, where it reads true features (later
        # positions would cost a forward per chained token).
        if temperature <= 0 and self.second_opinion and context != self._continues:
            self._add_second_opinion(context, p, tau)
        self._continues = list(context) + p.tokens
        return super()._answer(index, context, p, tau, temperature)

    def _add_second_opinion(self, context: list[int], p: Proposal, tau: float) -> None:
        q = self.model_source.propose(context, 1, parallel=False, tau=tau)
        p.forwards += q.forwards
        if not q.tokens:
            return
        ranked = [(q.tokens[0], q.confidence[0])] + (q.alternates[0] if q.alternates else [])
        alts = [(t, c) for t, c in ranked if t != p.tokens[0]]
        p.alternates = [alts] + [[] for _ in p.tokens[1:]]

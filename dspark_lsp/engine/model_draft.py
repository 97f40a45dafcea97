"""Draft sources backed by a causal LM that shares the target's tokenizer (autoregressive drafting)."""

from __future__ import annotations

from typing import Any

import torch

from dspark_lsp.engine.draft import DraftSource, Proposal, runner_ups
from dspark_lsp.engine.kv import cache_len, crop, forward, new_cache
from dspark_lsp.engine.ngram import NgramDraftSource
from dspark_lsp.engine.prefix_cache import common_prefix_len


def dist_from_logits(logits: torch.Tensor, temperature: float, vocab_size: int) -> torch.Tensor:
    """Probability vector over the first ``vocab_size`` ids (a draft may pad its vocab differently)."""
    logits = logits[:vocab_size]
    if logits.shape[0] < vocab_size:
        pad = torch.full((vocab_size - logits.shape[0],), float("-inf"), dtype=logits.dtype)
        logits = torch.cat([logits, pad])
    if temperature > 0:
        return torch.softmax(logits / temperature, dim=-1)
    return torch.softmax(logits, dim=-1)


class ModelDraftSource:
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
        out = Proposal(dists=[] if temperature > 0 else None, alternates=None if temperature > 0 else [])
        ctx = list(context)
        while len(out.tokens) < max_tokens:
            logits = self._logits_after(ctx)
            out.forwards += 1
            probs = dist_from_logits(logits, temperature, self.vocab_size)
            if temperature > 0:
                tok = int(torch.multinomial(probs, 1, generator=generator).item())
                assert out.dists is not None
                out.dists.append(probs)
            else:
                tok = int(torch.argmax(probs).item())
            conf = float(probs[tok].item())
            out.tokens.append(tok)
            out.confidence.append(conf)
            if out.alternates is not None:
                out.alternates.append(runner_ups(probs))
            if conf < tau:
                break
            ctx.append(tok)
        return out


def lookup_of(src: DraftSource | None) -> NgramDraftSource | None:
    """The n-gram lookup a draft source drafts with (itself, or a hybrid's), if any: the caller hands it
    the document outside the prompt window."""
    if isinstance(src, NgramDraftSource):
        return src
    return src.ngram if isinstance(src, HybridDraftSource) else None


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


class HybridDraftSource:
    """n-gram lookup first, a draft model where the lookup has nothing.

    Code repeats itself: on held-out FIM prompts even a 1-token n-gram match predicted the target better
    than our small trained draft (2.20 tokens per target forward with lookup on any match, 2.03 when
    requiring 2-token matches; see dspark_lsp/drafts/*/MODEL_CARD.md), and lookup costs no forward.
    Without a match, the model drafts: its masked parallel step when it has one, else one
    autoregressive step. Under sampling a lookup proposal is deterministic, which the speculative-
    sampling rule handles exactly as a one-hot q (accept with probability p(token)).
    """

    supports_parallel = True

    def __init__(
        self,
        model_source: DraftSource,
        ngram: NgramDraftSource | None = None,
        min_lookup_confidence: float = 0.55,
        second_opinion: bool = False,
    ) -> None:
        self.model_source = model_source
        self.ngram = ngram or NgramDraftSource()
        # 0.55 is NgramDraftSource's confidence for a 1-token match: any match is trusted.
        self.min_lookup_confidence = min_lookup_confidence
        self.name = f"{model_source.name}+ngram"
        # A feature-conditioned draft behind the lookup still needs the target's features every round.
        self.wants_features = bool(getattr(model_source, "wants_features", False))
        # Its confidences are calibrated acceptance probabilities (a confidence head): the decoder then lets
        # its cost rule set each round's length.
        self.calibrated = bool(getattr(model_source, "calibrated", False))
        # Greedy only: when the lookup answers, also ask the model for the first position and offer its
        # choices as alternates (engine.alternates) - verified in the same target forward, so a lookup
        # that copied the wrong continuation can still land the model's token. Worth one draft forward
        # only when that is cheap next to the target's (a feature draft: ~2% of one).
        self.second_opinion = second_opinion
        self._continues: list[int] = []  # the context a call continuing this round would pass

    def set_features(self, start: int, feats: torch.Tensor) -> None:
        setter = getattr(self.model_source, "set_features", None)
        if setter is not None:
            setter(start, feats)

    def reset(self) -> None:
        self.model_source.reset()
        self.ngram.reset()
        self._continues = []

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
        want = max_tokens if parallel else 1
        p = self.ngram.propose(context, want, parallel=parallel, tau=tau)
        if p.tokens and p.confidence[0] >= self.min_lookup_confidence:
            # Within a round the decoder calls again with the previous proposal appended; the model's
            # opinion is asked only at a round's first position, where it reads true features (later
            # positions would cost a forward per chained token).
            if temperature <= 0 and self.second_opinion and context != self._continues:
                self._add_second_opinion(context, p, tau)
            self._continues = list(context) + p.tokens
            if self.calibrated:
                p.confidence = [calibrated_lookup(c) for c in p.confidence]
            return p
        self._continues = []
        use_parallel = parallel and self.model_source.supports_parallel
        return self.model_source.propose(
            context,
            max_tokens if use_parallel else 1,
            parallel=use_parallel,
            tau=tau,
            temperature=temperature,
            generator=generator,
        )

    def _add_second_opinion(self, context: list[int], p: Proposal, tau: float) -> None:
        q = self.model_source.propose(context, 1, parallel=False, tau=tau)
        p.forwards += q.forwards
        if not q.tokens:
            return
        ranked = [(q.tokens[0], q.confidence[0])] + (q.alternates[0] if q.alternates else [])
        alts = [(t, c) for t, c in ranked if t != p.tokens[0]]
        p.alternates = [alts] + [[] for _ in p.tokens[1:]]

"""Draft sources: n-gram lookup, an autoregressive draft model, and the hybrid of the two."""

from __future__ import annotations

from typing import Any

import pytest

from dspark_lsp.drafts.causal_lm import ModelDraftSource, dist_from_logits
from dspark_lsp.drafts.hybrid import HybridDraftSource, lookup_of
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.config import DecodeConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource, RecentOutputs

V = 40


def test_ngram_proposes_what_followed_the_latest_match() -> None:
    src = NgramDraftSource(max_ngram=3)
    ctx = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    p = src.propose(ctx, 3, parallel=True, tau=0.9)
    assert p.tokens == [7, 8, 5]  # after the latest earlier [1, 2, 3]
    assert p.forwards == 0 and p.dists is None
    assert p.confidence == [pytest.approx(0.95)] * 3
    assert src.propose(ctx, 3, parallel=False, tau=0.9).tokens == [7]


def test_ngram_prefers_longer_matches_and_reports_lower_confidence_for_short_ones() -> None:
    src = NgramDraftSource(max_ngram=3)
    ctx = [4, 2, 3, 6, 1, 2, 3, 8, 0, 3]
    p = src.propose(ctx, 2, parallel=True, tau=0.9)
    assert p.tokens == [8, 0]  # only the 1-gram [3] matches; its latest occurrence is followed by 8, 0
    assert p.confidence[0] < 0.9 < src.propose([1, 2, 3, 4, 1, 2, 3], 1, parallel=True, tau=0.9).confidence[0]


def test_ngram_searches_the_extra_corpus_and_gives_up_quietly() -> None:
    src = NgramDraftSource(max_ngram=2, extra_corpus=[7, 7, 5, 6, 11, 12])
    assert src.propose([1, 5, 6], 2, parallel=True, tau=0.9).tokens == [11, 12]
    assert src.propose([30, 31], 2, parallel=True, tau=0.9).tokens == []
    assert src.propose([5, 6], 0, parallel=True, tau=0.9).tokens == []
    assert src.propose([], 2, parallel=True, tau=0.9).tokens == []
    with pytest.raises(ValueError):
        NgramDraftSource(max_ngram=1, min_ngram=2)


def test_sources_implement_the_protocol(random_lm: Any) -> None:
    model = random_lm(1, vocab_size=V)
    for src in (
        NgramDraftSource(),
        ModelDraftSource(model, V),
        HybridDraftSource(ModelDraftSource(model, V)),
    ):
        assert isinstance(src, DraftSource)


def test_model_draft_greedy_chain_and_early_stop(random_lm: Any) -> None:
    model = random_lm(2, vocab_size=V, hidden=32, layers=2, head_scale=16.0)
    reference = SpeculativeDecoder(model).generate([1, 2, 3], config=DecodeConfig(max_new_tokens=6)).tokens
    src = ModelDraftSource(model, V)
    p = src.propose([1, 2, 3], 6, parallel=False, tau=0.0)
    assert p.tokens == reference and p.forwards == 6
    # With tau above every confidence the first (low-confidence) token is proposed and drafting stops.
    q = src.propose([1, 2, 3], 6, parallel=False, tau=1.01)
    assert q.tokens == reference[:1] and q.forwards == 1
    src.reset()
    assert src.propose([1, 2, 3], 2, parallel=False, tau=0.0).tokens == reference[:2]


def test_model_draft_pads_a_smaller_vocabulary(random_lm: Any) -> None:
    import torch

    d = dist_from_logits(torch.tensor([0.0, 1.0, 2.0]), 0.0, 5)
    assert d.shape == (5,) and float(d[3]) == 0.0 and float(d.sum()) == pytest.approx(1.0)
    small = random_lm(3, vocab_size=V - 8)
    p = ModelDraftSource(small, V).propose([1, 2], 2, parallel=False, tau=0.0, temperature=1.0)
    assert p.dists is not None and len(p.dists) == 2
    for x in p.dists:
        assert x is not None and x.shape == (V,) and float(x[V - 8 :].sum()) == 0.0


def test_hybrid_uses_ngram_lookup_first_and_the_model_otherwise(random_lm: Any) -> None:
    model = random_lm(4, vocab_size=V, head_scale=16.0)
    hybrid = HybridDraftSource(ModelDraftSource(model, V), NgramDraftSource())
    ctx = [5, 6, 7, 8, 5, 6]
    par = hybrid.propose(ctx, 2, parallel=True, tau=0.9)
    assert par.tokens == [7, 8] and par.forwards == 0
    # An autoregressive step with a match: one looked-up token, no forward.
    ar = hybrid.propose(ctx, 2, parallel=False, tau=0.0)
    assert ar.tokens == [7] and ar.forwards == 0
    # An autoregressive step without a match: one model forward.
    ar_miss = hybrid.propose([10, 11, 12], 2, parallel=False, tau=0.0)
    assert ar_miss.forwards == 1 and len(ar_miss.tokens) == 1
    # No n-gram match: one model step keeps the round from being empty.
    miss = hybrid.propose([30, 31, 32], 3, parallel=True, tau=0.0)
    assert miss.forwards == 1 and len(miss.tokens) == 1
    assert hybrid.name.endswith("+ngram")


def _scan_reference(ctx: list[int], corpus: list[int], want: int, max_n: int = 4) -> list[int]:
    """What the lookup must return: the latest earlier match in the context, else in the corpus."""
    for n in range(min(max_n, len(ctx)), 0, -1):
        pat = ctx[-n:]
        hits = [i + n for i in range(len(ctx) - 1 - n, -1, -1) if ctx[i : i + n] == pat]
        source = ctx
        if not hits:
            hits = [i + n for i in range(len(corpus) - n, -1, -1) if corpus[i : i + n] == pat]
            source = corpus
        if hits and source[hits[0] : hits[0] + want]:
            return source[hits[0] : hits[0] + want]
    return []


def test_indexed_corpus_lookup_equals_a_linear_scan() -> None:
    import random

    rng = random.Random(7)
    for _ in range(300):
        corpus = [rng.randrange(6) for _ in range(rng.randint(0, 60))]
        ctx = [rng.randrange(6) for _ in range(rng.randint(1, 12))]
        got = NgramDraftSource(extra_corpus=corpus).propose(ctx, 3, parallel=True, tau=0.9).tokens
        assert got == _scan_reference(ctx, corpus, 3), (corpus, ctx)


def test_lookup_of_finds_the_ngram_source_a_draft_drafts_with(random_lm: Any) -> None:
    model = random_lm(3, vocab_size=V, hidden=16, layers=1)
    ngram = NgramDraftSource()
    plain = ModelDraftSource(model, V)
    assert lookup_of(ngram) is ngram
    assert lookup_of(HybridDraftSource(plain, ngram)) is ngram
    assert lookup_of(plain) is None and lookup_of(None) is None


# ------------------------------------------------------------------- the target's recent outputs
def recent(outputs: list[list[int]], anchor: list[int], start: int) -> RecentOutputs:
    return RecentOutputs(tuple(tuple(o) for o in outputs), tuple(anchor), start)


def test_ngram_searches_recent_outputs_before_the_context() -> None:
    src = NgramDraftSource(max_ngram=2)
    # A FIM-like context: prompt [.. 5, 6 | suffix 90, 91], then the generated 92, 5, 6.
    ctx = [1, 5, 6, 20, 21, 90, 91, 92, 5, 6]
    assert src.propose(ctx, 2, parallel=True, tau=0.9).tokens == [20, 21]  # the context's own [5, 6]
    src.set_recent(recent([[7, 5, 6, 30, 31, 32]], anchor=[4], start=7))
    assert src.propose(ctx, 3, parallel=True, tau=0.9).tokens == [30, 31, 32]  # the same 2-gram, recent first
    # A longer match in the context still beats a shorter one in the recent outputs.
    src.set_recent(recent([[6, 40, 41]], anchor=[4], start=7))
    assert src.propose(ctx, 2, parallel=True, tau=0.9).tokens == [20, 21]
    # Cleared: back to the context alone.
    src.set_recent(None)
    assert src.propose(ctx, 2, parallel=True, tau=0.9).tokens == [20, 21]


def test_ngram_matches_recent_outputs_from_the_text_before_the_cursor() -> None:
    """At a FIM decode's first step the context ends in the suffix and the FIM markers; the recent outputs
    are matched from the anchor (the tokens before the cursor) instead."""
    src = NgramDraftSource(max_ngram=3)
    prompt = [8, 3, 4, 70, 71, 72]  # ... 3 4 | the suffix and markers 70 71 72
    src.set_recent(recent([[1, 3, 4, 50, 51, 52]], anchor=[3, 4], start=len(prompt)))
    assert src.propose(prompt, 3, parallel=True, tau=0.9).tokens == [50, 51, 52]
    assert src.propose([*prompt, 50], 3, parallel=True, tau=0.9).tokens == [51, 52]
    # A context shorter than the prompt it was set for (another call): no recent match.
    assert src.propose([3, 4], 2, parallel=True, tau=0.9).tokens == []


def test_ngram_recent_outputs_newest_first_and_never_an_empty_continuation() -> None:
    src = NgramDraftSource(max_ngram=2)
    # The newest ends in [3, 4]: no continuation there, so the middle one answers.
    src.set_recent(recent([[3, 4, 50, 51], [8, 3, 4, 60], [2, 3, 4]], anchor=[9], start=1))
    assert src.propose([9, 3, 4], 2, parallel=True, tau=0.9).tokens == [60]
    assert src.propose([9, 3, 4], 2, parallel=False, tau=0.9).tokens == [60]


def test_a_hybrid_hands_the_recent_outputs_to_its_lookup(random_lm: Any) -> None:
    hybrid = HybridDraftSource(ModelDraftSource(random_lm(1, vocab_size=V), V))
    hybrid.set_recent(recent([[11, 12, 13, 14]], anchor=[11], start=2))
    lookup = lookup_of(hybrid)
    assert lookup is not None
    p = hybrid.propose([30, 31, 12], 2, parallel=True, tau=0.9)
    assert p.tokens == [13, 14] and p.forwards == 0 and p.sources == [lookup.name] * 2

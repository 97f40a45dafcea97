"""Draft sources: n-gram lookup, an autoregressive draft model, and the hybrid of the two."""

from __future__ import annotations

from typing import Any

import pytest

from dspark_lsp.drafts.causal_lm import ModelDraftSource, dist_from_logits
from dspark_lsp.drafts.hybrid import HybridDraftSource, lookup_of
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.config import DecodeConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource

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

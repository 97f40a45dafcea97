"""TrainedDraftSource: the parallel step's token counts, cache re-sync, target-vocab dists."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_lsp.drafts.token.config import DraftNetConfig
from dspark_lsp.drafts.token.model import DraftNet
from dspark_lsp.drafts.token.source import TrainedDraftSource, load_draft
from dspark_lsp.drafts.vocab import MASK_ID, DraftVocab
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.errors import UserError

TARGET_V = 1000


def make_source(max_context: int = 64, seed: int = 0) -> TrainedDraftSource:
    torch.manual_seed(seed)
    kept = torch.randperm(TARGET_V)[:40].tolist()
    vocab = DraftVocab(kept, TARGET_V)
    cfg = DraftNetConfig(vocab_size=vocab.size, d_model=32, n_layers=2, n_heads=2, d_ff=64,
                         n_parallel=4, max_context=max_context, target_vocab_size=TARGET_V)
    model = DraftNet(cfg)
    with torch.no_grad():  # sharpen the random model so proposals are not all ties
        model.embed.weight.mul_(20)
    return TrainedDraftSource(model, vocab)


def ctx_from(src: TrainedDraftSource, raw: list[int]) -> list[int]:
    """Map arbitrary ints onto target ids, some kept by the draft vocabulary, some not (UNK)."""
    kept = src.vocab.target_ids.tolist()
    return [kept[x % len(kept)] if x % 3 else (x * 7) % TARGET_V for x in raw]


def test_implements_the_protocol() -> None:
    assert isinstance(make_source(), DraftSource)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6])
def test_parallel_step_proposes_exactly_the_requested_number(k: int) -> None:
    src = make_source()
    p = src.propose(ctx_from(src, list(range(1, 20))), k, parallel=True, tau=0.0)
    assert len(p) == min(k, 4) and p.forwards == 1
    assert len(p.confidence) == len(p)
    assert src._cache.length == 19  # the mask positions were cropped out of the cache


def test_ar_steps_one_forward_per_token_and_only_target_ids() -> None:
    src = make_source()
    p = src.propose(ctx_from(src, list(range(1, 12))), 5, parallel=False, tau=0.0)
    assert len(p) == 5 and p.forwards == 5
    kept = set(src.vocab.target_ids.tolist())
    assert all(t in kept for t in p.tokens)  # never UNK/MASK, never outside the target vocab


def test_tau_stops_early() -> None:
    src = make_source()
    p = src.propose(ctx_from(src, list(range(1, 12))), 5, parallel=False, tau=1.01)
    assert len(p) == 1  # the first (unsure) token is offered, then drafting stops


def test_parallel_step_matches_a_fresh_full_forward() -> None:
    src = make_source()
    ctx = ctx_from(src, [5, 9, 2, 11, 4, 8, 1])
    src.propose(ctx[:4] + [ctx[0]], 2, parallel=False, tau=0.0)  # leave some stale cache behind
    p = src.propose(ctx, 4, parallel=True, tau=0.0)
    ids = torch.cat([src.vocab.encode(ctx), torch.full((3,), MASK_ID)])[None]
    with torch.no_grad():
        logits = src.model(ids, torch.arange(ids.shape[1])[None])[0, len(ctx) - 1 :]
    logits[:, :2] = float("-inf")
    expect = src.vocab.to_target[logits.argmax(-1)].tolist()
    assert p.tokens == expect


@settings(max_examples=12, deadline=None)
@given(
    calls=st.lists(
        st.tuples(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.booleans(), st.integers(1, 5)),
        min_size=1, max_size=6,
    ),
)
def test_cache_resync_equals_a_fresh_source(calls: list[tuple[list[int], bool, int]]) -> None:
    """Whatever the previous calls left in the cache (longer, shorter, diverging contexts, past the
    context window), a call proposes what a freshly reset source proposes."""
    src = make_source(max_context=24)
    fresh = make_source(max_context=24)
    base: list[int] = []
    for raw, parallel, k in calls:
        # Half the calls extend/diverge from the previous context, as the decode loop's contexts do.
        ctx = ctx_from(src, (base[: len(base) // 2] + raw) if parallel else raw)
        base = raw
        got = src.propose(ctx, k, parallel=parallel, tau=0.0)
        fresh.reset()
        want = fresh.propose(ctx, k, parallel=parallel, tau=0.0)
        assert got.tokens == want.tokens
        assert got.confidence == pytest.approx(want.confidence, abs=1e-4)


def test_sampling_returns_target_vocab_distributions() -> None:
    src = make_source()
    g = torch.Generator().manual_seed(3)
    p = src.propose(ctx_from(src, list(range(1, 10))), 3, parallel=True, tau=0.0, temperature=0.8, generator=g)
    assert p.dists is not None and len(p.dists) == len(p) == 3
    outside = torch.ones(TARGET_V, dtype=torch.bool)
    outside[src.vocab.target_ids] = False
    for tok, dist in zip(p.tokens, p.dists, strict=True):
        assert dist.shape == (TARGET_V,)
        assert float(dist.sum()) == pytest.approx(1.0, abs=1e-5)
        assert float(dist[outside].sum()) == 0.0 and float(dist[tok]) > 0.0


def test_empty_request_and_unknown_draft() -> None:
    src = make_source()
    assert len(src.propose([1, 2, 3], 0, parallel=True, tau=0.0)) == 0
    with pytest.raises(UserError, match="no draft model"):
        load_draft("no-such-draft-anywhere")


def test_hybrid_prefers_a_solid_lookup_match_and_falls_back_to_the_model() -> None:
    from dspark_lsp.drafts.hybrid import HybridDraftSource

    src = make_source()
    hybrid = HybridDraftSource(src)
    kept = src.vocab.target_ids.tolist()
    a, b, c, d, e = kept[:5]
    repeated = [a, b, c, d, e, kept[7], a, b]  # "a b" seen before, followed by "c d e"
    p = hybrid.propose(repeated, 3, parallel=True, tau=0.0)
    assert p.tokens == [c, d, e] and p.forwards == 0
    fresh = [kept[i] for i in (1, 2, 3, 4, 5, 6)]  # nothing repeats: the model drafts
    q = hybrid.propose(fresh, 3, parallel=True, tau=0.0)
    src.reset()
    assert q.forwards == 1 and q.tokens == src.propose(fresh, 3, parallel=True, tau=0.0).tokens
    # Under sampling a lookup match is still free and deterministic (no q: the decode loop treats it
    # as one-hot); without a match the model samples and returns its distributions.
    g = torch.Generator().manual_seed(0)
    r = hybrid.propose(repeated, 3, parallel=True, tau=0.0, temperature=1.0, generator=g)
    assert r.tokens == [c, d, e] and r.forwards == 0 and r.dists is None
    src.reset()
    t = hybrid.propose(fresh, 3, parallel=True, tau=0.0, temperature=1.0, generator=g)
    assert t.forwards == 1 and t.dists is not None and len(t.dists) == len(t)

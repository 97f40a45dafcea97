"""KV rollback and prefix reuse give what a fresh run gives; the prefix cache's memory bound holds."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import DynamicCache

from dspark_lsp.drafts.causal_lm import ModelDraftSource
from dspark_lsp.drafts.hybrid import HybridDraftSource
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.kv import cache_len, cache_nbytes, crop, forward, new_cache
from dspark_lsp.engine.prefix_cache import PrefixCache, common_prefix_len

V = 48


@pytest.fixture(scope="module")
def target(random_lm: Any) -> Any:
    return random_lm(21, vocab_size=V, hidden=32, layers=2, head_scale=16.0)


@pytest.fixture(scope="module")
def draft_model(random_lm: Any) -> Any:
    return random_lm(22, vocab_size=V, hidden=16, layers=1, head_scale=16.0)


def fresh_logits(model: Any, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


# ------------------------------------------------------------------------------------------ rollback
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prefix=st.lists(st.integers(0, V - 1), min_size=1, max_size=12),
    junk=st.lists(st.integers(0, V - 1), min_size=1, max_size=6),
    cont=st.lists(st.integers(0, V - 1), min_size=1, max_size=6),
    crop_back=st.integers(0, 3),
)
def test_crop_then_forward_equals_fresh_forward(
    target: Any, prefix: list[int], junk: list[int], cont: list[int], crop_back: int
) -> None:
    """Feed prefix + rejected junk, roll back to a point inside the prefix, feed the continuation: the
    logits equal a fresh forward of the rolled-back text + continuation."""
    keep = max(1, len(prefix) - crop_back)
    cache = new_cache(target)
    forward(target, prefix, cache)
    forward(target, junk, cache)
    assert cache_len(cache) == len(prefix) + len(junk)
    crop(cache, keep)
    assert cache_len(cache) == keep
    got = forward(target, cont, cache)
    want = fresh_logits(target, prefix[:keep] + cont)[keep:]
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
    assert cache_len(cache) == keep + len(cont)


def test_crop_is_a_no_op_at_or_past_the_current_length(target: Any) -> None:
    cache = new_cache(target)
    forward(target, [1, 2, 3, 4], cache)
    crop(cache, 4)
    crop(cache, 10)
    assert cache_len(cache) == 4
    crop(cache, 0)
    assert cache_len(cache) == 0
    assert torch.allclose(forward(target, [5, 6], cache), fresh_logits(target, [5, 6]), atol=1e-4)


def test_model_draft_resyncs_its_cache_after_a_rollback(draft_model: Any) -> None:
    """A draft source given a shorter / diverging context proposes what a fresh source proposes."""
    src = ModelDraftSource(draft_model, V)
    src.propose([1, 2, 3, 4, 5, 6, 7], 4, parallel=False, tau=0.0)
    for ctx in ([1, 2, 3], [1, 2, 9, 9, 9], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [7]):
        got = src.propose(ctx, 3, parallel=False, tau=0.0)
        fresh = ModelDraftSource(draft_model, V).propose(ctx, 3, parallel=False, tau=0.0)
        assert got.tokens == fresh.tokens
        assert got.confidence == pytest.approx(fresh.confidence, abs=1e-5)


# ------------------------------------------------------------------------------------- prefix reuse
def test_second_call_reuses_the_prefix_and_matches_a_fresh_run(target: Any) -> None:
    pc = PrefixCache(max_entries=4, max_tokens=4096, min_reuse=4)
    cached = SpeculativeDecoder(target, prefix_cache=pc)
    plain = SpeculativeDecoder(target)
    prompt = [(7 * i + 3) % V for i in range(30)]
    config = DecodeConfig(max_new_tokens=10)

    first = cached.generate(prompt, config=config)
    assert first.stats.reused_tokens == 0
    assert first.stats.prefill_tokens == len(prompt)
    assert first.tokens == plain.generate(prompt, config=config).tokens
    assert len(pc) == 1

    # The user typed on: the new prompt extends the old one by different text.
    second_prompt = prompt + [1, 2, 3]
    second = cached.generate(second_prompt, config=config)
    assert second.stats.reused_tokens == len(prompt)
    assert second.stats.prefill_tokens == 3
    assert second.tokens == plain.generate(second_prompt, config=config).tokens

    # A prompt that diverges inside the cached prefix reuses exactly the common part.
    third_prompt = prompt[:20] + [5, 5, 5, 5]
    third = cached.generate(third_prompt, config=config)
    assert third.stats.reused_tokens == 20
    assert third.tokens == plain.generate(third_prompt, config=config).tokens

    # The same prompt again: everything but the last prompt token comes from the cache.
    again = cached.generate(third_prompt, config=config)
    assert again.stats.reused_tokens == len(third_prompt) - 1
    assert again.tokens == third.tokens


def test_take_and_put_round_trip_gives_the_same_logits(target: Any) -> None:
    pc = PrefixCache(max_entries=2, max_tokens=1000, min_reuse=2)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    cache = new_cache(target)
    forward(target, ids, cache)
    pc.put(ids, cache)
    taken, n = pc.take(ids[:5] + [40, 41])
    assert n == 5 and taken is not None and cache_len(taken) == 5
    assert len(pc) == 0  # taken out while in use
    got = forward(target, [40, 41], taken)
    assert torch.allclose(got, fresh_logits(target, ids[:5] + [40, 41])[5:], atol=1e-4)


@st.composite
def prompt_sequences(draw: st.DrawFn) -> list[list[int]]:
    """Prompts as an editor produces them: each shares a (random) prefix with an earlier one."""
    base = draw(st.lists(st.integers(0, 7), min_size=10, max_size=24))
    prompts = [base]
    for _ in range(draw(st.integers(1, 3))):
        parent = draw(st.sampled_from(prompts))
        cut = draw(st.integers(1, len(parent)))
        tail = draw(st.lists(st.integers(0, 7), min_size=0, max_size=6))
        prompts.append(parent[:cut] + tail or [1])
    return prompts


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prompts=prompt_sequences(),
    max_new=st.integers(1, 12),
    eos=st.one_of(st.none(), st.integers(0, 7)),
    draft_kind=st.sampled_from(["none", "ngram", "hybrid"]),
)
def test_calls_sharing_prefix_and_draft_state_match_fresh_runs(
    target: Any, draft_model: Any, prompts: list[list[int]], max_new: int, eos: int | None, draft_kind: str
) -> None:
    """One decoder with a prefix cache and one long-lived draft source over a series of related prompts:
    every output equals a fresh target-only run, whatever was cached (including past an EOS)."""
    pc = PrefixCache(max_entries=2, max_tokens=4096, min_reuse=1)
    decoder = SpeculativeDecoder(target, prefix_cache=pc)
    reference = SpeculativeDecoder(target)
    draft: Any = None
    if draft_kind == "ngram":
        draft = NgramDraftSource()
    elif draft_kind == "hybrid":
        draft = HybridDraftSource(ModelDraftSource(draft_model, V))
    eos_ids = () if eos is None else (eos,)
    config = DecodeConfig(max_new_tokens=max_new, scheduler=SchedulerConfig(tau=0.5))
    seen: list[list[int]] = []
    for prompt in prompts:
        res = decoder.generate(prompt, config=config, draft=draft, eos_ids=eos_ids)
        ref = reference.generate(prompt, config=DecodeConfig(max_new_tokens=max_new), eos_ids=eos_ids)
        assert res.tokens == ref.tokens
        best = max((common_prefix_len(s, prompt[:-1]) for s in seen), default=0)
        assert res.stats.reused_tokens <= best
        seen.append(prompt + res.tokens)
        assert len(pc) <= 2


# -------------------------------------------------------------------------------------- memory bound
def kv_of_length(n: int) -> DynamicCache:
    cache = DynamicCache()
    z = torch.zeros(1, 1, n, 2)
    cache.update(z, z.clone(), 0)
    return cache


@settings(max_examples=30, deadline=None)
@given(
    max_entries=st.integers(1, 5),
    max_tokens=st.integers(1, 60),
    ops=st.lists(
        st.tuples(st.sampled_from(["put", "take"]), st.lists(st.integers(0, 3), min_size=1, max_size=40)),
        min_size=1,
        max_size=40,
    ),
)
def test_prefix_cache_never_exceeds_its_bounds(
    max_entries: int, max_tokens: int, ops: list[tuple[str, list[int]]]
) -> None:
    pc = PrefixCache(max_entries=max_entries, max_tokens=max_tokens, min_reuse=1)
    for op, ids in ops:
        if op == "put":
            pc.put(ids, kv_of_length(len(ids)))
            if len(ids) <= max_tokens:
                # The newest entry is the last to be evicted (LRU): it is always kept.
                cache, n = pc.take(ids)
                assert n == len(ids) and cache is not None and cache_len(cache) == n
                pc.put(ids, cache)
        else:
            before = len(pc)
            cache, n = pc.take(ids)
            assert (cache is None) == (n == 0)
            assert len(pc) == before - (cache is not None)
        assert len(pc) <= max_entries
        assert pc.total_tokens <= max_tokens
        assert pc.nbytes == pc.total_tokens * 2 * 2 * 4  # keys + values, 2 floats of 4 bytes a token


def test_prefix_cache_evicts_least_recently_used_first() -> None:
    pc = PrefixCache(max_entries=2, max_tokens=100, min_reuse=1)
    a, b, c = [1, 1, 1], [2, 2, 2], [3, 3, 3]
    pc.put(a, kv_of_length(3))
    pc.put(b, kv_of_length(3))
    got, _ = pc.take(a)  # a is used again: b becomes the oldest
    assert got is not None
    pc.put(a, got)
    pc.put(c, kv_of_length(3))
    assert pc.take(b) == (None, 0)
    assert pc.take(a)[1] == 3
    assert pc.take(c)[1] == 3


def test_prefix_cache_token_bound_and_minimum_reuse() -> None:
    pc = PrefixCache(max_entries=10, max_tokens=10, min_reuse=4)
    pc.put(list(range(11)), kv_of_length(11))  # larger than the whole budget: not stored
    assert len(pc) == 0
    pc.put([1, 2, 3, 4, 5, 6], kv_of_length(6))
    pc.put([7, 8, 9, 10, 11], kv_of_length(5))  # 11 tokens in all: the oldest goes
    assert pc.total_tokens == 5 and len(pc) == 1
    assert pc.take([7, 8, 9, 0]) == (None, 0)  # 3 shared tokens < min_reuse
    assert len(pc) == 1  # a refused take leaves the entry in place
    cache, n = pc.take([7, 8, 9, 10, 0])
    assert n == 4 and cache is not None and cache_len(cache) == 4
    with pytest.raises(ValueError):
        pc.put([1, 2, 3], kv_of_length(2))
    with pytest.raises(ValueError):
        PrefixCache(max_entries=0)
    assert cache_nbytes(kv_of_length(3)) == 3 * 2 * 2 * 4


def test_keep_others_copies_another_prompts_entry_and_takes_one_it_extends(target: Any) -> None:
    pc = PrefixCache(max_entries=4, max_tokens=1000, min_reuse=2)
    ids = list(range(1, 21))
    cache = new_cache(target)
    forward(target, ids, cache)
    pc.put(ids, cache)
    other = ids[:12] + [7, 8]  # shares 12 tokens, then differs: the stored entry is another prompt's
    copy, n, _ = pc.take_with_features(other, keep_others=True)
    assert copy is not None and n == 12 and cache_len(copy) == 12
    assert len(pc) == 1 and pc.covered(ids) == 20  # still stored, whole
    forward(target, [7, 8], copy)  # writing the copy leaves the stored entry's KV as it was
    kept, m, _ = pc.take_with_features(ids + [5, 6], keep_others=True)  # extends it: taken, not copied
    assert kept is not None and m == 20 and len(pc) == 0
    assert torch.allclose(forward(target, [5], kept)[-1], fresh_logits(target, ids + [5])[-1], atol=1e-4)

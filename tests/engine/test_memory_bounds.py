"""Every cache that grows with use has a bound (issue 19): one test per bound not tested elsewhere.

Tested elsewhere: the prefix cache's entry and token bounds (test_engine_cache), the completion cache,
the per-document scheduler state and the service's recent records (test_lsp_soak). Here: the prefix
cache's bound on the bytes its entries hold, the feedback's per-document memory, the worker's records,
and the n-gram lookup's extra corpus.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import DynamicCache

from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.kv import PreallocatedLayer, cache_len, cache_nbytes, crop
from dspark_lsp.engine.prefix_cache import PrefixCache, held_bytes
from dspark_lsp.lsp.handlers.feedback import LAST_SHOWN_MAX, Feedback


def _grown_then_cropped(grown: int, kept: int) -> DynamicCache:
    """A cache whose buffers grew to ``grown`` positions and that now covers ``kept`` (as after a decode
    whose tail was rejected, or a take() cropped to a shared prefix)."""
    cache = DynamicCache()
    cache.layers = [PreallocatedLayer(), PreallocatedLayer()]
    for i in range(2):
        z = torch.zeros(1, 1, grown, 2)
        cache.update(z, z.clone(), i)
    crop(cache, kept)
    assert cache_len(cache) == kept
    return cache


def test_held_bytes_counts_whole_buffers_not_the_covered_length() -> None:
    cache = _grown_then_cropped(300, 10)
    assert cache_nbytes(cache) == 10 * 2 * 2 * 2 * 4  # 2 layers, keys + values, 2 floats
    assert held_bytes(cache) == 300 * 2 * 2 * 2 * 4  # what stays allocated
    feats = (0, torch.zeros(50, 4))
    assert held_bytes(cache, feats) == held_bytes(cache) + 50 * 4 * 4


def test_prefix_cache_bounds_the_bytes_its_entries_hold() -> None:
    one = held_bytes(_grown_then_cropped(300, 10))
    pc = PrefixCache(max_entries=10, max_tokens=10_000, min_reuse=1, max_bytes=3 * one)
    for i in range(5):  # 50 tokens and 5 entries are within those bounds; 5 buffers are not
        pc.put([i] * 10, _grown_then_cropped(300, 10))
        assert pc.held_bytes <= pc.max_bytes
    assert len(pc) == 3 and pc.held_bytes == 3 * one
    assert pc.take([0] * 10) == (None, 0)  # the oldest went first
    assert pc.take([4] * 10)[1] == 10
    pc.put([9] * 10, _grown_then_cropped(1000, 10))  # one entry above the whole budget: not stored
    assert pc.take([9] * 10) == (None, 0)
    with pytest.raises(ValueError):
        PrefixCache(max_bytes=0)


def test_feedback_remembers_a_bounded_number_of_documents() -> None:
    fb = Feedback()
    for i in range(LAST_SHOWN_MAX * 4):
        fb.show(f"file:///d{i}.py", f"item {i}")
        assert len(fb._last_shown) <= LAST_SHOWN_MAX
    assert fb.shown == LAST_SHOWN_MAX * 4
    newest = f"file:///d{LAST_SHOWN_MAX * 4 - 1}.py"
    fb.show(newest, f"item {LAST_SHOWN_MAX * 4 - 1}")  # the same item re-shown: not counted again
    assert fb.shown == LAST_SHOWN_MAX * 4
    assert "file:///d0.py" not in fb._last_shown  # least recently shown went first


def test_worker_keeps_a_bounded_number_of_request_records() -> None:
    from dspark_lsp.lsp.executor import SerialExecutor
    from dspark_lsp.lsp.worker import RECENT, CompletionWorker

    class Models:
        service, state = None, "loading"  # every request answers not_ready: no model needed

    executor = SerialExecutor("test-records")
    try:
        worker = CompletionWorker(Models(), executor)  # type: ignore[arg-type]

        async def many() -> None:
            for i in range(RECENT * 3):
                await worker.run(f"file:///r{i}.py", lambda: None, 0)

        asyncio.run(many())
        assert len(worker.records) == RECENT
        assert len(worker.stats()["requests"]) == RECENT
        assert worker.counters["not_ready"] == RECENT * 3  # the counters count all, by status only
        assert worker._active == {}
    finally:
        executor.shutdown()


def test_ngram_corpus_is_bounded_by_the_window_around_the_cursor(tiny_models: tuple[Path, Path]) -> None:
    """The extra corpus the lookup indexes per request is the text within OUTSIDE_CHARS of the prompt
    window, however long the document (and its index holds one key per n-gram length and position)."""
    from transformers import AutoTokenizer

    from dspark_lsp.models.fim import detect_fim_tokens
    from dspark_lsp.prompt import OUTSIDE_CHARS, build_fim_prompt, outside_window_ids

    tok: Any = AutoTokenizer.from_pretrained(str(tiny_models[0]))
    fim = detect_fim_tokens(tok)
    line = "value_{i} = compute(value_{j}) + {i}\n"
    text = "".join(line.format(i=i, j=i // 2) for i in range(20_000))  # ~0.7 M characters
    offset = len(text) // 2
    fp = build_fim_prompt(text, offset, tok, fim, context_window=64, prefix_share=0.75)
    ids = outside_window_ids(text, offset, fp, tok)
    assert 0 < len(tok.decode(ids)) <= 2 * OUTSIDE_CHARS
    assert len(ids) <= 2 * OUTSIDE_CHARS
    lookup = NgramDraftSource()
    lookup.extra_corpus = ids
    assert len(lookup._extra_index) <= (lookup.max_ngram - lookup.min_ngram + 1) * len(ids)
    lookup.extra_corpus = ids[:10]  # the next request's corpus replaces, not adds to, the last one's
    assert len(lookup.extra_corpus) == 10 and len(lookup._extra_index) <= 40

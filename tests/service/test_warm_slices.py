"""A warm-up's prefill slice follows the measured prefill rate, so a request waits behind one slice about as
long on the 1.5B as on the 0.5B (warm_slices.WarmSlices)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.service import CompletionRequest, CompletionService, ServiceConfig
from dspark_lsp.warm_slices import WarmSlices


def test_the_slice_takes_about_the_target_time() -> None:
    s = WarmSlices()
    assert s.size() == 128  # nothing timed yet
    s.observe(960, 2.0)  # the 0.5B on a fast host: 2.1 ms a token; never above the old 128
    assert s.size() == 128
    s = WarmSlices()
    s.observe(960, 6.0)  # 6.25 ms a token: 96 tokens take 0.6 s
    assert s.size() == 96
    s.observe(960, 20.0)  # slower (smoothed to 13.5 ms): the floor
    assert s.size() == 64


def test_short_or_empty_warm_ups_do_not_move_it() -> None:
    s = WarmSlices()
    s.observe(10, 1.0)  # a few tokens: mostly fixed cost
    s.observe(0, 0.0)  # cancelled before it fed anything
    assert s.ms_per_token is None and s.size() == 128


def test_the_service_sizes_its_next_warm_up_from_the_last(tiny_models: tuple[Path, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = ServiceConfig(model=str(tiny_models[0]), draft_model="ngram", max_new_tokens=4, completion_cache=False,
                        context_window=400, context_budget=0)
    service = CompletionService.load(cfg)
    decoder = service.decoding
    chunks: list[int] = []
    real = decoder.engine.generate

    def spy(ids: list[int], *, config: Any, **kw: Any) -> Any:
        chunks.append(config.prefill_chunk)
        res = real(ids, config=config, **kw)
        res.stats.t_prefill = len(ids) * 0.00625  # as if 6.25 ms a token
        return res

    monkeypatch.setattr(decoder.engine, "generate", spy)
    text_a = "".join(f"alpha_{i} = {i}\n" for i in range(120))
    text_b = "".join(f"beta_{i} = {i} * 2\n" for i in range(120))
    for text in (text_a, text_b):
        service.warm(CompletionRequest(text=text, offset=len(text), path="/w/a.py", doc_key="file:///w/a.py"))
    assert chunks[0] == 128 and chunks[-1] == 96


def test_the_first_warm_up_is_priced_from_the_verify_curve() -> None:
    # The 1.5B's measured curve on the 2-core host: 8 tokens in 82 ms, ~10 ms a token -> the floor (64).
    assert WarmSlices.from_verify_cost({1: 31.2, 2: 37.6, 4: 54.2, 8: 82.2}).size() == 64
    assert WarmSlices.from_verify_cost({1: 15.5, 4: 18.4, 8: 27.4}).size() == 128  # the 0.5B's
    assert WarmSlices.from_verify_cost({1: 1.0, 4: 8.0, 8: 100.0}).size() == 64  # 12.5 ms a token
    assert WarmSlices.from_verify_cost({1: 0.05, 2: 0.1}).size() == 128  # no rate from 1-2 tokens
    assert WarmSlices.from_verify_cost({}).size() == 128

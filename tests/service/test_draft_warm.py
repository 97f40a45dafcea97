"""A draft model's own prompt prefill, paid in the background warm-up (issue 32): the draft keeps a KV cache
of its own, and without this the first draft call of every request fed it the whole prompt while the user
waited (on the 1.5B+0.5B pair, most of the draft's time). Counted in tokens fed to the draft model."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.drafts import causal_lm
from dspark_lsp.drafts.causal_lm import PREFILL_SLICE, ModelDraftSource
from dspark_lsp.drafts.registry import model_of
from dspark_lsp.models.loader import load_causal_lm
from dspark_lsp.service import CompletionRequest, CompletionService, ServiceConfig
from dspark_lsp.syntax.document import SyntaxDocument

TEXT = "".join(f"def f_{i}(x):\n    return x * {i} + f_{i - 1}(x)\n\n" for i in range(1, 40))


@pytest.fixture
def fed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Token counts of every forward the draft model runs."""
    counts: list[int] = []
    real = causal_lm.forward

    def counting(model: Any, ids: list[int], cache: Any, **kw: Any) -> Any:
        counts.append(len(ids))
        return real(model, ids, cache, **kw)

    monkeypatch.setattr(causal_lm, "forward", counting)
    return counts


@pytest.fixture
def source(tiny_models: tuple[Path, Path]) -> ModelDraftSource:
    model, _ = load_causal_lm(str(tiny_models[1]))
    return ModelDraftSource(model, int(model.config.vocab_size))


def test_a_prefilled_draft_feeds_only_the_new_token(source: ModelDraftSource, fed: list[int]) -> None:
    ids = [(i * 37) % 200 + 3 for i in range(300)]
    assert source.prefill(ids) == 300
    assert fed == [PREFILL_SLICE, PREFILL_SLICE, 300 - 2 * PREFILL_SLICE]  # in slices
    fed.clear()
    source.propose([*ids, 5], 1, parallel=False, tau=0.0)
    assert fed == [1]
    assert source.prefill([*ids, 5]) == 0  # already covered
    # A prompt that shares the first 250 tokens: only its tail is fed.
    fed.clear()
    assert source.prefill([*ids[:250], 9, 9, 9]) == 3 and fed == [3]


def test_a_cold_draft_feeds_the_whole_prompt(source: ModelDraftSource, fed: list[int]) -> None:
    ids = [(i * 37) % 200 + 3 for i in range(300)]
    source.propose([*ids, 5], 1, parallel=False, tau=0.0)
    assert fed == [301]  # what the warm-up saves the request


def test_a_cancelled_prefill_stops_between_slices_and_keeps_a_prefix(source: ModelDraftSource,
                                                                     fed: list[int]) -> None:
    ids = list(range(3, 303))
    cancel = threading.Event()
    cancel.set()
    assert source.prefill(ids, cancel) == 0 and fed == []
    cancel.clear()
    real = causal_lm.forward

    def then_cancel(model: Any, part: list[int], cache: Any, **kw: Any) -> Any:
        cancel.set()  # a request arrives while the first slice runs
        return real(model, part, cache, **kw)

    causal_lm.forward = then_cancel  # type: ignore[assignment]
    assert source.prefill(ids, cancel) == PREFILL_SLICE
    causal_lm.forward = real  # (the fixture's monkeypatch restores the module either way)
    fed.clear()
    source.propose(ids, 1, parallel=False, tau=0.0)
    assert fed == [300 - PREFILL_SLICE]  # the slice already fed was kept


def test_the_service_warm_up_prefills_the_draft_model(tiny_models: tuple[Path, Path], fed: list[int]) -> None:
    cfg = ServiceConfig(model=str(tiny_models[0]), draft_model=str(tiny_models[1]), max_new_tokens=4,
                        completion_cache=False, context_window=200, context_budget=0)
    service = CompletionService.load(cfg)
    draft = model_of(service.draft)
    assert isinstance(draft, ModelDraftSource)
    req = CompletionRequest(text=TEXT, offset=len(TEXT), path="/w/a.py", doc_key="file:///w/a.py")
    fp = service.prompt_for(req, SyntaxDocument(TEXT, "python"))
    fed.clear()
    service.warm(req)
    assert sum(fed) == len(fp.ids) and service.decoding.draft_warmed_tokens == len(fp.ids)
    fed.clear()
    service.warm(req)  # the same prompt again: nothing to feed
    assert fed == []
    fed.clear()
    service.complete(req)
    assert all(n <= cfg.max_new_tokens + 1 for n in fed)  # never the prompt again


def test_a_cold_decode_prefills_the_draft_in_its_prefill_not_in_a_draft_call(
    tiny_models: tuple[Path, Path], source: ModelDraftSource, fed: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a warm-up, the draft model's prompt prefill happens in the decoder's prefill phase: no draft
    call feeds the prompt (which the draft meter would time as one draft forward), and the output is the
    target's own greedy decoding."""
    from dspark_lsp.engine.config import DecodeConfig
    from dspark_lsp.engine.decode import SpeculativeDecoder

    target, _ = load_causal_lm(str(tiny_models[0]))
    prompt = [(i * 37) % 200 + 3 for i in range(150)]
    in_propose: list[bool] = [False]
    seen: list[tuple[bool, int]] = []
    real_propose = source.propose

    def propose(*args: Any, **kw: Any) -> Any:
        in_propose[0] = True
        try:
            return real_propose(*args, **kw)
        finally:
            in_propose[0] = False

    monkeypatch.setattr(source, "propose", propose)
    real_forward = causal_lm.forward

    def forward(model: Any, ids: list[int], cache: Any, **kw: Any) -> Any:
        seen.append((in_propose[0], len(ids)))
        return real_forward(model, ids, cache, **kw)

    monkeypatch.setattr(causal_lm, "forward", forward)
    engine = SpeculativeDecoder(target)
    res = engine.generate(prompt, config=DecodeConfig(max_new_tokens=12), draft=source)
    alone = SpeculativeDecoder(target).generate(prompt, config=DecodeConfig(max_new_tokens=12), draft=None)
    assert res.tokens == alone.tokens
    assert sum(n for inside, n in seen if not inside) == len(prompt)  # the prefill phase fed the prompt
    assert [n for inside, n in seen if inside] and all(n <= 2 for inside, n in seen if inside)

"""CompletionService on tiny random models: the real path from document + cursor to completion text.

The models are random, so the text is nonsense; what is checked is the contract: lossless ids, the ids
covering the text, the typed-through cache, prefix reuse, scope NONE, settings validation, bad offsets.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.drafts.hybrid import HybridDraftSource
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.errors import UserError
from dspark_lsp.service import CompletionRequest, CompletionService, ServiceConfig
from dspark_lsp.syntax import SyntaxDocument

DOC = "def add(a, b):\n    return a + b\n\nresult = add("
BLOCK_DOC = "def f(x):\n    "


@pytest.fixture
def make_service(tiny_models: tuple[Path, Path]) -> Any:
    target, draft = tiny_models

    def make(draft_model: str = "ngram", **overrides: Any) -> CompletionService:
        spec = str(draft) if draft_model == "model" else draft_model
        cfg = ServiceConfig(model=str(target), draft_model=spec, max_new_tokens=24, **overrides)
        return CompletionService.load(cfg)

    return make


def req(text: str, offset: int | None = None, doc: str = "file:///a.py") -> CompletionRequest:
    return CompletionRequest(
        text=text, offset=len(text) if offset is None else offset, path="a.py", doc_key=doc
    )


def forbid_decoding(service: CompletionService, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: Any, **kw: Any) -> Any:
        raise AssertionError("the model was run")

    monkeypatch.setattr(service.decoder, "generate", boom)


# ---------------------------------------------------------------------------------------- completion
@pytest.mark.parametrize("draft_model", ["ngram", "model", "none"])
def test_completion_is_the_targets_greedy_output(
    make_service: Any, tiny_target: Any, tiny_tokenizer: Any, greedy_reference: Any, draft_model: str
) -> None:
    # psm: the prompt is the whole model input; the default spm's healed prompt is in test_token_healing.py.
    service = make_service(draft_model, fim_order="psm")
    if draft_model == "model":
        assert isinstance(service.draft, HybridDraftSource)
    elif draft_model == "ngram":
        assert isinstance(service.draft, NgramDraftSource)
    else:
        assert service.draft is None
    res = service.complete(req(DOC))
    assert res.scope == "single_line"
    assert res.text, "the tiny model completes this document with some (nonsense) text"
    assert res.completion_ids
    assert res.prompt.startswith("<|fim_prefix|>def add(a, b):") and res.prompt.endswith(
        "<|fim_suffix|><|fim_middle|>"
    )
    # The ids cover exactly the text shown: their decoding starts with it, one token fewer does not.
    decoded = tiny_tokenizer.decode(
        res.completion_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    assert decoded.startswith(res.text)
    shorter = tiny_tokenizer.decode(
        res.completion_ids[:-1], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    # (A trailing U+FFFD is half a multi-byte character: not shown text.)
    assert len(shorter.rstrip("\ufffd")) < len(res.text)
    # Lossless: the ids are what the target alone produces greedily for the exact prompt.
    prompt_ids = tiny_tokenizer(res.prompt, add_special_tokens=False).input_ids
    assert greedy_reference(tiny_target, prompt_ids, len(res.completion_ids)) == res.completion_ids
    s = res.stats
    assert s["tokens"] >= len(res.completion_ids)
    assert s["prompt_tokens"] == len(prompt_ids)
    assert s["target_forwards"] >= 1 and s["seconds"] >= 0
    assert s["draft"] == getattr(service.draft, "name", "none")
    assert not res.cancelled and not res.from_cache


def test_all_draft_kinds_give_the_same_text(make_service: Any) -> None:
    texts = {make_service(d).complete(req(BLOCK_DOC)).text for d in ("ngram", "model", "none")}
    assert len(texts) == 1


def test_streaming_text(make_service: Any) -> None:
    service = make_service()
    streamed: list[str] = []
    res = service.complete(req(DOC), on_text=streamed.append)
    assert streamed and streamed[-1].startswith(res.text)


# ------------------------------------------------------------------------------------ typed through
def test_typing_through_a_completion_is_answered_from_the_cache(
    make_service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service()
    first = service.complete(req(DOC))
    assert len(first.text) >= 3
    forbid_decoding(service, monkeypatch)
    typed = DOC + first.text[:2]
    again = service.complete(req(typed))
    assert again.from_cache
    assert again.text == first.text[2:]
    assert again.stop_reason == "cache"


def test_typing_something_else_decodes_again_and_reuses_the_prefix(make_service: Any) -> None:
    service = make_service()
    first = service.complete(req(DOC))
    assert first.stats["reused_tokens"] == 0
    other = "zz" if not first.text.startswith("z") else "qq"
    second = service.complete(req(DOC + other))
    assert not second.from_cache
    assert second.stats["reused_tokens"] > 0
    assert second.stats["prefill_tokens"] < second.stats["prompt_tokens"]


def test_completion_cache_off(make_service: Any) -> None:
    service = make_service(completion_cache=False)
    first = service.complete(req(DOC))
    again = service.complete(req(DOC + first.text[:1]))
    assert not again.from_cache


def test_other_documents_do_not_share_typed_through_answers(make_service: Any) -> None:
    service = make_service()
    first = service.complete(req(DOC, doc="file:///one.py"))
    other = service.complete(req(DOC + first.text[:1], doc="file:///two.py"))
    assert not other.from_cache


def test_a_cancelled_completion_is_not_remembered(make_service: Any) -> None:
    service = make_service()
    cancel = threading.Event()
    streamed: list[str] = []

    def on_text(text: str) -> None:
        streamed.append(text)
        cancel.set()

    res = service.complete(req(DOC), cancel=cancel, on_text=on_text)
    assert res.cancelled
    assert streamed and streamed[0]
    again = service.complete(req(DOC + streamed[0][:1]))
    assert not again.from_cache


def test_a_cancelled_completion_reports_cancelled_as_its_stop_reason(make_service: Any) -> None:
    service = make_service()
    cancel = threading.Event()
    res = service.complete(req(DOC), cancel=cancel, on_text=lambda text: cancel.set())
    assert res.cancelled
    assert res.stop_reason == "cancelled"


# ------------------------------------------------------------------------------------------ scope
def test_scope_none_inside_a_word_gives_nothing_without_decoding(
    make_service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service()
    forbid_decoding(service, monkeypatch)
    res = service.complete(req(DOC, offset=DOC.index("dd(a")))  # def a|dd(a, b)
    assert res.scope == "none"
    assert res.text == "" and res.completion_ids == []
    assert res.stop_reason == "scope_none"


def test_multiline_setting_overrides_the_scope(make_service: Any) -> None:
    assert make_service().complete(req(BLOCK_DOC)).scope == "multi_line"
    assert make_service(multiline="never").complete(req(BLOCK_DOC)).scope == "single_line"
    assert make_service(multiline="always").complete(req(DOC)).scope == "multi_line"


def test_single_line_results_have_no_newline(make_service: Any) -> None:
    res = make_service().complete(req(DOC))
    assert "\n" not in res.text and res.text == res.text.rstrip()


# ------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("offset", [-1, len(DOC) + 1])
def test_offset_outside_the_document(make_service: Any, offset: int) -> None:
    with pytest.raises(UserError, match="outside the document"):
        make_service().complete(req(DOC, offset=offset))


def test_invalid_settings_give_problems_and_defaults() -> None:
    cfg, problems = ServiceConfig.from_settings(
        {
            "threshold": 2.5,
            "kMax": 100,
            "multiline": "sometimes",
            "maxNewTokens": "many",
            "relaxed": "yes",
            "contextWindow": 512,
            "kMin": 2,
            "noSuchSetting": 1,
            "enable": True,
            "debounceMs": 100,
        }
    )
    defaults = ServiceConfig()
    assert (cfg.threshold, cfg.k_max, cfg.multiline, cfg.max_new_tokens, cfg.relaxed) == (
        defaults.threshold,
        defaults.k_max,
        defaults.multiline,
        defaults.max_new_tokens,
        defaults.relaxed,
    )
    assert cfg.context_window == 512 and cfg.k_min == 2  # the valid ones apply
    assert cfg.problems() == []
    joined = "\n".join(problems)
    for key in ("threshold", "kMax", "multiline", "maxNewTokens", "relaxed", "noSuchSetting"):
        assert key in joined
    assert "enable" not in joined and "debounceMs" not in joined
    assert len(problems) == 6


def test_settings_must_be_an_object() -> None:
    cfg, problems = ServiceConfig.from_settings(["model"])  # type: ignore[arg-type]
    assert cfg == ServiceConfig() and len(problems) == 1
    assert ServiceConfig.from_settings(None) == (ServiceConfig(), [])


def test_settings_keep_the_base_and_flag_reloads() -> None:
    base = ServiceConfig(model="/models/x", threshold=0.8)
    cfg, problems = ServiceConfig.from_settings({"kMax": 3}, base=base)
    assert problems == [] and cfg.model == "/models/x" and cfg.threshold == 0.8 and cfg.k_max == 3
    assert not cfg.needs_reload(base)
    assert cfg.needs_reload(ServiceConfig(model="/models/y"))
    dc = cfg.decode_config()
    assert dc.scheduler is not None and (dc.scheduler.tau, dc.scheduler.k_max) == (0.8, 3)
    assert dc.scheduler.k_min <= dc.scheduler.k_start <= dc.scheduler.k_max


def test_load_refuses_an_invalid_config(tiny_models: tuple[Path, Path]) -> None:
    with pytest.raises(UserError, match="invalid configuration"):
        CompletionService.load(ServiceConfig(model=str(tiny_models[0]), k_min=3, k_max=1))


def test_update_config_rejects_invalid_and_applies_valid(make_service: Any) -> None:
    service = make_service()
    with pytest.raises(UserError):
        service.update_config(ServiceConfig(threshold=0.0))
    service.update_config(ServiceConfig(model=service.config.model, prefix_reuse=False, max_new_tokens=5))
    res = service.complete(req(BLOCK_DOC))
    assert res.stats["tokens"] <= 5
    assert service.decoder.prefix_cache is None


def test_recent_stats_record_each_request(make_service: Any) -> None:
    service = make_service()
    service.complete(req(DOC))
    service.complete(req(DOC, offset=DOC.index("dd(a")))
    recent = service.recent_stats()
    assert [r["scope"] for r in recent] == ["single_line", "none"]
    assert recent[0]["doc"] == "file:///a.py" and "latency_ms" in recent[0]


def test_alternates_setting_reaches_the_decoder() -> None:
    cfg, problems = ServiceConfig.from_settings({"alternates": 0})
    assert problems == [] and cfg.decode_config().alternates == 0
    assert ServiceConfig().decode_config().alternates == 3
    bad, problems = ServiceConfig.from_settings({"alternates": -2})
    assert bad.alternates == 3 and len(problems) == 1 and "alternates" in problems[0]


def test_a_draft_model_that_is_not_prepared_falls_back_to_ngram_with_one_warning(
    tiny_models: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 32's bad input: a pair whose draft is a registry model missing from the cache still loads
    (the target is there) and completes, drafting by n-gram lookup, with one line naming the fix."""
    import logging

    messages: list[str] = []
    cfg = ServiceConfig(model=str(tiny_models[0]), draft_model="qwen2.5-coder-0.5b",
                        cache_dir=str(tmp_path / "empty-cache"), max_new_tokens=8)
    with caplog.at_level(logging.WARNING, logger="dspark_lsp.service"):
        service = CompletionService.load(cfg, progress=lambda msg, _f: messages.append(msg))
    assert isinstance(service.draft, NgramDraftSource)
    assert "not prepared" in service.description
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and r.name == "dspark_lsp.service"]
    assert len(warnings) == 1 and "dspark-lsp models prepare qwen2.5-coder-0.5b" in warnings[0]
    assert any("models prepare qwen2.5-coder-0.5b" in m for m in messages)
    result = service.complete(req(DOC))
    # The target really decoded (not an empty answer): forwards ran and produced the answer's ids.
    assert not result.from_cache and (result.stats.target_forwards or 0) >= 1 and result.completion_ids


# ------------------------------------------------------------------------ the recent outputs as drafts
def test_a_request_drafts_from_the_documents_last_output(make_service: Any) -> None:
    """The same place asked again with the typed-through cache off (as after moving away and back): the
    lookup proposes the last answer, anchored on the text before the cursor, and the target accepts it,
    so the request takes far fewer target forwards than on a fresh service; the text is the same."""
    service = make_service(completion_cache=False)
    first = service.complete(req(BLOCK_DOC))
    # The anchor ends where the prompt does: before the text token healing left for the model to spell.
    heal = service.prompt_for(req(BLOCK_DOC), SyntaxDocument(BLOCK_DOC, "python")).heal
    anchor = service._anchor(BLOCK_DOC[: len(BLOCK_DOC) - len(heal)])
    kept = list(service._outputs["file:///a.py"][-1])
    assert anchor and kept[: len(anchor)] == list(anchor)
    assert kept[len(anchor) : len(anchor) + len(first.completion_ids)] == first.completion_ids
    second = service.complete(req(BLOCK_DOC))
    fresh = make_service(completion_cache=False).complete(req(BLOCK_DOC))
    assert second.text == fresh.text == first.text and second.completion_ids == fresh.completion_ids
    assert second.stats["tokens"] == fresh.stats["tokens"] >= 8
    assert second.stats["target_forwards"] * 2 <= fresh.stats["target_forwards"]


def test_recent_outputs_are_per_document_and_dropped_on_close(make_service: Any) -> None:
    service = make_service(completion_cache=False)
    for i in range(CompletionService.OUTPUTS_PER_DOC + 2):
        service.complete(req(BLOCK_DOC + "x" * i))
    service.complete(req(BLOCK_DOC, doc="file:///b.py"))
    assert len(service._outputs["file:///a.py"]) == CompletionService.OUTPUTS_PER_DOC
    service.forget("file:///a.py")
    assert "file:///a.py" not in service._outputs and "file:///b.py" in service._outputs

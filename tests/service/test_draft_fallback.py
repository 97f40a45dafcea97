"""A pair whose draft model is known but not prepared (the 1.5B's 0.5B draft) still completes: the service
drafts by n-gram lookup, says so once in the log, and its progress names the command that prepares it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.draft_loading import load_draft as _load_draft
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.models import loader
from dspark_lsp.models.registry import QWEN_05B, get_pair
from dspark_lsp.service import ServiceConfig


def test_an_unprepared_draft_model_falls_back_to_ngram(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_real_load(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the test must not load a real model")

    # resolve_model must refuse first (the cache is empty); nothing past it may run.
    monkeypatch.setattr(loader, "_from_pretrained", no_real_load)
    monkeypatch.setattr(loader, "_load_quantized", no_real_load)
    pair = get_pair("qwen2.5-coder-1.5b+0.5b")
    assert pair.draft == QWEN_05B.name and pair.draft_kind == "model"
    config = ServiceConfig(model=pair.target, cache_dir=str(tmp_path))
    progress: list[tuple[str, float]] = []
    with caplog.at_level(logging.WARNING, logger="dspark_lsp.service"):
        # No target: a causal LM draft reads only the target's vocab size, after its own load succeeded.
        draft, description = _load_draft(pair, None, config, lambda msg, frac: progress.append((msg, frac)))

    assert isinstance(draft, NgramDraftSource)
    assert description == f"{pair.target} + ngram ({pair.draft} not prepared)"
    warnings = [r for r in caplog.records if r.name == "dspark_lsp.service"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert pair.draft in warnings[0].getMessage() and "n-gram" in warnings[0].getMessage()
    assert "not prepared" in warnings[0].getMessage()  # the loader's reason is passed on
    messages = [msg for msg, _ in progress]
    assert messages[0] == f"loading draft {pair.draft}"
    assert f"dspark-lsp models prepare {pair.draft}" in messages[-1]
    assert list(tmp_path.iterdir()) == []  # nothing was downloaded or written

"""The window's slide, paid ahead: a warm-up near the point where the prefix outgrows its budget also
prefills the window as it will be after the slide, beside the current one (service.CompletionService.warm),
so the request after the slide prefills only what was typed and the suffix (count the prefill tokens)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.context.types import ContextFile
from dspark_lsp.service import LOOKAHEAD_TOKENS, CompletionRequest, CompletionService, ServiceConfig
from dspark_lsp.syntax.document import SyntaxDocument

LINES = [f"value_{i} = compute(value_{i - 1}, {i})\n" for i in range(1, 300)]
TEXT = "".join(LINES)
CONTEXT = (ContextFile("pkg/util.py", "def compute(a, b):\n    return a + b\n", "definition"),)


def req(text: str, context: tuple[ContextFile, ...]) -> CompletionRequest:
    return CompletionRequest(text=text, offset=len(text), path="/w/pkg/main.py", doc_key="file:///w/pkg/main.py",
                             context=context, repo_name="w", prompt_path="pkg/main.py")


@pytest.fixture(params=[(), CONTEXT], ids=["no-context", "context"])
def setup(request: Any, tiny_models: tuple[Path, Path]) -> tuple[CompletionService, tuple[ContextFile, ...]]:
    cfg = ServiceConfig(model=str(tiny_models[0]), draft_model="ngram", max_new_tokens=4, completion_cache=False,
                        context_window=300, context_budget=64 if request.param else 0, prefix_share=0.9)
    return CompletionService.load(cfg), request.param


def window_start(service: CompletionService, text: str, context: tuple[ContextFile, ...], ahead: int = 0) -> int:
    fp = service.prompt_for(req(text, context), SyntaxDocument(text, "python"), lookahead=ahead)
    return len(text) - len(fp.prefix)


def near_a_slide(service: CompletionService, context: tuple[ContextFile, ...]) -> tuple[str, str]:
    """(text now, text after typing on to the first point where the window has slid)."""
    n = next(n for n in range(20, len(LINES)) if window_start(service, "".join(LINES[:n]), context, LOOKAHEAD_TOKENS)
             != window_start(service, "".join(LINES[:n]), context))
    now = "".join(LINES[:n])
    rest = TEXT[len(now):]
    m = next(m for m in range(1, len(rest)) if window_start(service, now + rest[:m], context)
             != window_start(service, now, context))
    return now, now + rest[:m]


def test_the_request_after_the_slide_reuses_the_look_ahead(setup: Any) -> None:
    service, context = setup
    now, slid = near_a_slide(service, context)
    assert window_start(service, slid, context) == window_start(service, now, context, LOOKAHEAD_TOKENS)
    warmed = service.warm(req(now, context))
    first = service.complete(req(now, context))
    assert first.stats.prefill_tokens == 1  # the current window's KV survived the look-ahead's prefill
    after = service.complete(req(slid, context))
    assert warmed > first.stats.prompt_tokens  # both windows were prefilled
    assert after.stats.prompt_tokens is not None and after.stats.prefill_tokens is not None
    # Only what was typed since the warm-up (and the FIM markers after it) is prefilled; without the
    # look-ahead the slide re-prefills everything after the context (~270 tokens here).
    typed = len(service.tokenizer(slid[len(now):], add_special_tokens=False).input_ids)
    assert after.stats.prefill_tokens <= typed + 4 < after.stats.prompt_tokens - 100


def test_no_look_ahead_far_from_a_slide(setup: Any) -> None:
    service, context = setup
    text = "".join(LINES[:6])  # the whole file fits: the window cannot slide
    assert window_start(service, text, context, LOOKAHEAD_TOKENS) == window_start(service, text, context) == 0
    warmed = service.warm(req(text, context))
    assert warmed == service.complete(req(text, context)).stats.prompt_tokens and len(service.prefix_cache) == 1
    assert service.warm(req(text, context)) == 0  # cached already: not even the last token is fed again

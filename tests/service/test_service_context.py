"""The service with other files' context: the prompt holds it within contextBudget, its KV is reused across
keystrokes, a background warm-up pays the prefill before the request, and context off changes nothing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.context.types import ContextFile
from dspark_lsp.service import CompletionRequest, CompletionService, ServiceConfig

DOC = "from .util import add\n\n\ndef main():\n    total = add("
CONTEXT = (
    ContextFile("pkg/other.py", "".join(f"def other_{i}(x):\n    return x + {i}\n" for i in range(12)), "open"),
    ContextFile("pkg/util.py", "def add(a, b):\n    return a + b\n", "definition"),
)


@pytest.fixture
def make_service(tiny_models: tuple[Path, Path]) -> Any:
    target, _ = tiny_models

    def make(**overrides: Any) -> CompletionService:
        cfg = ServiceConfig(model=str(target), draft_model="ngram", max_new_tokens=8, completion_cache=False,
                            **overrides)
        return CompletionService.load(cfg)

    return make


def req(text: str, context: tuple[ContextFile, ...] = CONTEXT) -> CompletionRequest:
    return CompletionRequest(text=text, offset=len(text), path="/w/pkg/main.py", doc_key="file:///w/pkg/main.py",
                             context=context, repo_name="w", prompt_path="pkg/main.py")


def test_context_goes_in_within_its_budget(make_service: Any) -> None:
    service = make_service(context_budget=512)
    result = service.complete(req(DOC))
    assert result.prompt.startswith("<|repo_name|>w\n<|file_sep|>pkg/other.py\n")
    assert "<|file_sep|>pkg/util.py\ndef add(a, b):" in result.prompt
    assert "<|file_sep|>pkg/main.py\n<|fim_prefix|>" in result.prompt
    tight = make_service(context_budget=40).complete(req(DOC))
    assert "pkg/util.py" in tight.prompt and "pkg/other.py" not in tight.prompt  # the least important went
    prompt_ids = service.tokenizer(tight.prompt, add_special_tokens=False).input_ids
    plain_ids = service.tokenizer(service.complete(req(DOC, ())).prompt, add_special_tokens=False).input_ids
    assert len(prompt_ids) - len(plain_ids) <= 40


def test_context_off_is_todays_prompt(make_service: Any) -> None:
    off = make_service(context_budget=0, fim_order="psm")
    plain = make_service(fim_order="psm")
    assert off.complete(req(DOC)).prompt == plain.complete(req(DOC, ())).prompt == (
        f"<|fim_prefix|>{DOC}<|fim_suffix|><|fim_middle|>"
    )
    # The default order puts the (empty) suffix first and backs off the prefix's last token.
    spm = make_service(context_budget=0).complete(req(DOC)).prompt
    head = "<|fim_prefix|><|fim_suffix|><|fim_middle|>"
    assert spm.startswith(head) and DOC.startswith(spm[len(head):]) and 0 < len(DOC) - len(spm[len(head):]) <= 8


def test_the_context_kv_is_reused_across_keystrokes(make_service: Any) -> None:
    service = make_service(context_budget=512)
    first = service.complete(req(DOC))
    second = service.complete(req(DOC + "1"))
    assert first.stats.prompt_tokens is not None and first.stats.prompt_tokens > 150
    # Everything up to the typed character came from the prefix cache: the forwards fed only the tail.
    assert second.stats.reused_tokens is not None and second.stats.reused_tokens >= first.stats.prompt_tokens - 4
    assert second.stats.prefill_tokens is not None and second.stats.prefill_tokens <= 6


def test_warm_up_pays_the_prefill_before_the_request(make_service: Any) -> None:
    service = make_service(context_budget=512)
    assert service.warm(req(DOC)) > 150
    result = service.complete(req(DOC))
    assert result.stats.prefill_tokens == 1  # only the last prompt token, fed for its logits
    assert service.warm(req(DOC)) <= 1  # already cached
    cancelled = threading.Event()
    cancelled.set()
    assert service.warm(req(DOC + "x = 1\n"), cancelled) == 0


def test_warm_up_output_is_the_same_as_cold(make_service: Any) -> None:
    cold = make_service(context_budget=512).complete(req(DOC))
    warmed = make_service(context_budget=512)
    warmed.warm(req(DOC))
    assert warmed.complete(req(DOC)).completion_ids == cold.completion_ids


def test_a_request_without_pieces_gets_the_budget_as_window(make_service: Any) -> None:
    """No piece found (a language without definitions, no import resolved): the file's window takes the
    whole budget, as the measured 1,024-token window row, not just contextWindow."""
    long_doc = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(300))
    wide = make_service(context_window=128, context_budget=256, prefix_share=0.9)
    narrow = make_service(context_window=128, context_budget=0, prefix_share=0.9)
    ids = lambda s: len(wide.tokenizer(s, add_special_tokens=False).input_ids)  # noqa: E731
    from dspark_lsp.syntax.document import SyntaxDocument

    doc = SyntaxDocument(long_doc, "python")
    wide_prompt = wide.prompt_for(req(long_doc, ()), doc)
    assert wide_prompt.context_tokens == 0 and "<|repo_name|>" not in wide_prompt.text
    narrow_prompt = narrow.prompt_for(req(long_doc, ()), doc)
    assert ids(narrow_prompt.text) <= 128 < ids(wide_prompt.text) <= 128 + 256

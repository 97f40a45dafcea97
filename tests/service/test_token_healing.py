"""Token healing through the service (fimOrder spm, tokenHealing): the prompt backs off its last token,
the completion spells it again first and the user is shown only what follows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark_lsp.contract import CompletionRequest
from dspark_lsp.models import cache

MODEL = "qwen2.5-coder-0.5b"
MANIFEST = cache.model_dir(cache.cache_root(), MODEL) / "dspark-model.json"

STACK = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        self."
JOIN = "import os\n\n\ndef join_all(parts):\n    return os.path.jo"


def _service(model: str, draft: str | None = None, **kw: object):  # type: ignore[no-untyped-def]
    from dspark_lsp.service import CompletionService, ServiceConfig

    return CompletionService.load(ServiceConfig(model=model, draft_model=draft, fim_order="spm",
                                                completion_cache=False, **kw))  # type: ignore[arg-type]


def test_the_shown_text_follows_the_healed_text(tiny_models: tuple[Path, Path]) -> None:
    """With a random model: the raw tokens start with the backed-off text, the shown text is what follows
    (the same whether asked whole or answered early and continued)."""
    service = _service(str(tiny_models[0]), "ngram", max_new_tokens=16, quick_answer_ms=0)
    doc = "def f(x):\n    return g(x) + h("
    req = CompletionRequest(doc, len(doc), path="a.py", doc_key="file:///a.py")
    fp = service.prompt_for(req, _doc(doc))
    assert fp.heal and doc.endswith(fp.heal)
    result = service.complete(req)
    # The target's raw output (kept per document after the prompt's anchor) spells the healed text first.
    anchor = service._anchor(fp.prefix[: -len(fp.heal)])
    assert list(anchor) == service.tokenizer.encode(doc[: -len(fp.heal)], add_special_tokens=False)[-len(anchor):]
    kept = service._outputs["file:///a.py"][-1][len(anchor):]
    raw = service._decoder_text()(list(kept))
    assert raw.startswith(fp.heal)
    assert raw[len(fp.heal):].startswith(result.text) and service._decoder_text(fp.heal)(list(kept)) == raw[len(fp.heal):]
    off = _service(str(tiny_models[0]), "ngram", max_new_tokens=16, quick_answer_ms=0, token_healing=False)
    assert off.prompt_for(req, _doc(doc)).heal == ""


def _doc(text: str):  # type: ignore[no-untyped-def]
    from dspark_lsp.syntax import SyntaxDocument, detect_language

    return SyntaxDocument(text, detect_language("a.py", None))


@pytest.mark.real_model
@pytest.mark.skipif(not MANIFEST.is_file(), reason=f"real model not prepared; run: dspark-lsp models prepare {MODEL}")
def test_healing_mends_a_cursor_inside_a_token() -> None:
    """Suffix first, a prompt ending in `self.` or `.jo` reads as a boundary the model never saw: without
    healing the 0.5B writes ` items` (a space after the dot) and `all(` (a new name after `jo`)."""
    healed = _service(MODEL, max_new_tokens=24, quick_answer_ms=0)
    plain = _service(MODEL, max_new_tokens=24, quick_answer_ms=0, token_healing=False)

    def complete(service, doc: str) -> str:  # type: ignore[no-untyped-def]
        return service.complete(CompletionRequest(doc, len(doc), path="a.py", doc_key=f"file:///{id(service)}")).text

    assert complete(healed, STACK).startswith("items.append(")
    assert complete(plain, STACK).startswith(" ")
    assert complete(healed, JOIN).startswith("in(")
    assert not complete(plain, JOIN).startswith("in(")


@pytest.mark.parametrize("draft", ["ngram", "model", "none"])
def test_healed_completions_are_the_targets_constrained_greedy_output(
    tiny_models: tuple[Path, Path], tiny_target: object, draft: str
) -> None:
    """Lossless with healing: whatever the draft, the completion's ids are the target's greedy tokens under
    the healing constraint (full recompute, one token at a time)."""
    import torch

    from dspark_lsp.models.token_bytes import token_table

    spec = str(tiny_models[1]) if draft == "model" else draft
    service = _service(str(tiny_models[0]), spec, max_new_tokens=12, quick_answer_ms=0)
    doc = "def add(a, b):\n    return a + b\n\nresult = add("
    req = CompletionRequest(doc, len(doc), path="a.py", doc_key="file:///a.py")
    fp = service.prompt_for(req, _doc(doc))
    result = service.complete(req)
    table = token_table(service.tokenizer)
    ids, rest, want = list(fp.ids), fp.heal.encode(), []
    for _ in range(len(result.completion_ids)):
        logits = tiny_target(torch.tensor([ids])).logits[0, -1]  # type: ignore[operator]
        if rest:
            logits = table.restrict(logits, rest)
        tok = int(torch.argmax(logits[: service.decoder.vocab_size]))
        rest = table.left_after(rest, [tok])
        ids.append(tok)
        want.append(tok)
    assert result.completion_ids == want and fp.heal == "("

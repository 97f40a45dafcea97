"""The prepared real default model loads by name, has Qwen's FIM tokens, and completes code sensibly."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from dspark_lsp.models import cache
from dspark_lsp.models.registry import DEFAULT_TARGET, get_model_spec

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def real() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    spec = get_model_spec(DEFAULT_TARGET)
    if not cache.is_ready(cache.model_dir(cache.cache_root(), DEFAULT_TARGET), DEFAULT_TARGET, spec.sha256):
        pytest.skip(f"run `dspark-lsp models prepare {DEFAULT_TARGET}` first")
    from dspark_lsp.models.loader import load_causal_lm

    return load_causal_lm(DEFAULT_TARGET)


def test_real_default_model_fim_completion(real: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> None:
    import torch

    from dspark_lsp.models.fim import detect_fim_tokens

    model, tok = real
    fim = detect_fim_tokens(tok)
    assert (fim.prefix_id, fim.suffix_id, fim.middle_id) == (151659, 151661, 151660)
    assert 151643 in fim.eos_ids and 151662 in fim.eos_ids  # <|endoftext|>, <|fim_pad|>
    # Packed linears (models.packing) hold their weights as buffers; an untied quantized embedding table
    # is read from the GGUF row by row (quant/file_rows.py).
    rows = getattr(model.get_input_embeddings(), "rows", None)
    from_file = rows.n * rows.k if rows is not None else 0
    held = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    assert held + from_file > 600_000_000
    prompt = fim.prompt("def fibonacci(n):\n    if n < 2:\n        return n\n    return ", "\n")
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        generate: Any = model.generate  # transformers types it as a Tensor-returning wrapper
        out = generate(ids, max_new_tokens=12, do_sample=False)
    text = str(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
    assert "fibonacci(n - 1)" in text.replace("n-1", "n - 1")

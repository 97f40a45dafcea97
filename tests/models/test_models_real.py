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


def test_real_model_finishes_a_stopped_slice_losslessly(real: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> None:
    """A warm-up stopped half-way through a slice (engine/interrupt.py) is finished by the next request from
    the layer it stopped before (engine/resume.py), and the request decodes what a fresh decoder does."""
    import threading
    from pathlib import Path

    from dspark_lsp.engine.config import DecodeConfig
    from dspark_lsp.engine.decode import SpeculativeDecoder
    from dspark_lsp.engine.prefix_cache import PrefixCache

    model, tok = real
    source = (Path(__file__).parents[2] / "dspark_lsp" / "engine" / "kv.py").read_text()
    prompt = tok(source[:1400], add_special_tokens=False).input_ids[:200]
    engine = SpeculativeDecoder(model, prefix_cache=PrefixCache(max_entries=4, max_tokens=8192, min_reuse=4))
    cancel, seen = threading.Event(), {"n": 0}

    def raise_flag(_m: Any, _a: Any) -> None:  # the second slice, while layer 9 runs
        seen["n"] += 1
        if seen["n"] == 2:
            cancel.set()

    hook = model.model.layers[9].mlp.down_proj.register_forward_pre_hook(raise_flag)
    try:
        warm = engine.generate(prompt, config=DecodeConfig(max_new_tokens=0, prefill_chunk=64), cancel=cancel)
    finally:
        hook.remove()
    assert warm.stats.stop_reason == "cancelled"
    config = DecodeConfig(max_new_tokens=16, prefill_chunk=64)
    res = engine.generate(prompt, config=config)
    assert res.stats.reused_tokens == 64 and res.stats.resumed_tokens == 64
    assert res.tokens == SpeculativeDecoder(model).generate(prompt, config=config).tokens

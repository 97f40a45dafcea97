"""Shared fixtures: tiny random models on disk (built once per session) and in-process model factories.

The tests live in one folder per layer or feature (tests/engine, tests/quant, tests/lsp, ...; each folder's
README.md says what it holds). Every fixture here is used by several folders, so all stay here (pytest applies
this file to every subfolder); shared helper modules are in tests/helpers, on sys.path through pyproject's
pytest ``pythonpath``.

Fixture names are part of the test suite's contract (other test files use them): keep them stable.

* ``tiny_models`` -> ``(target_dir, draft_dir)``: a random tiny Qwen2 target and draft sharing a byte-level
  BPE tokenizer that has Qwen's FIM tokens (``dspark_lsp.testing.tiny.build_tiny_models``).
* ``tiny_tokenizer``: that tokenizer, loaded.
* ``tiny_target``: the tiny target loaded in eval mode (shared: do not mutate it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Modules whose tiny-model tests run single-threaded: on tiny models intra-op threads cost far more than
# they give on a shared 2-core machine (measured: ~15x slower decoding with 2 threads under load).
_SINGLE_THREAD_MODULES = ("test_engine_", "test_service", "test_prompt", "test_textpos", "test_cli", "test_quant_model")


@pytest.fixture(scope="module", autouse=True)
def _single_torch_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    name = request.module.__name__.rsplit(".", 1)[-1]
    if not name.startswith(_SINGLE_THREAD_MODULES):
        yield
        return
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# The kernel's int8 activations are on by default (quant.linear.ACT8_DEFAULT); the suite's numeric checks
# (tolerances against fp32 references, bit-equality across loads) were written for the int16 path, so the
# test process and the servers it starts keep int16 unless a test turns int8 on itself
# (tests/quant/test_quant_act8.py: its arithmetic, batch invariance and losslessness).
os.environ["DSPARK_ACT8"] = "0"


@pytest.fixture(autouse=True)
def _exact_prefill_products() -> Iterator[None]:
    """Each test starts with the quantized kernel's fp32 prefill products: loading a quantized model with
    dtype auto on a CPU with native bf16 turns the kernel's process-wide bf16 prefill on, and a later test
    holding a product to the exact values then failed, depending on the order (found in a full run)."""
    import sys

    if "torch" in sys.modules:
        import torch

        try:
            torch.ops.dspark_q.set_prefill_bf16(False)
        except (AttributeError, RuntimeError):  # the kernel is not loaded in this process (yet)
            pass
        try:
            torch.ops.dspark_q.set_act8(False)
            torch.ops.dspark_q.set_prefill_int8(0)  # int8 prefill rows: on after a dtype auto load
        except (AttributeError, RuntimeError):  # not loaded, or a build without int8 products
            pass
    yield


def make_random_lm(
    seed: int,
    *,
    vocab_size: int = 64,
    hidden: int = 16,
    layers: int = 1,
    heads: int = 2,
    kv_heads: int = 1,
    head_scale: float = 8.0,
    eos_token_id: int | None = None,
) -> Any:
    """A random in-process Qwen2 causal LM (eval, no grad).

    Random init gives near-uniform logits; ``head_scale`` multiplies the LM head so greedy argmax is
    decisive (no near-ties that float rounding between a 1-token and a k-token forward could flip).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=eos_token_id,
        pad_token_id=None,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    model.eval()
    model.requires_grad_(False)
    return model


def hf_greedy(
    model: Any, prompt: list[int], max_new_tokens: int, eos_token_id: int | None = None
) -> list[int]:
    """``model.generate(do_sample=False)`` with an explicit all-ones attention mask; new tokens only.

    With ``eos_token_id`` the EOS itself is dropped (the decoder never returns it).
    """
    import torch

    x = torch.tensor([prompt], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(
            x,
            attention_mask=torch.ones_like(x),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            min_new_tokens=0,
            eos_token_id=eos_token_id,
            pad_token_id=eos_token_id if eos_token_id is not None else 0,
            temperature=None,
            top_p=None,
            top_k=None,
        )
    new = [int(t) for t in out[0, len(prompt) :].tolist()]
    if eos_token_id is not None and eos_token_id in new:
        new = new[: new.index(eos_token_id)]
    return new


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target_dir, draft_dir): random tiny Qwen2 models with a FIM-capable tokenizer, built once."""
    from dspark_lsp.testing.tiny import build_tiny_models

    return build_tiny_models(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_models: tuple[Path, Path]) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_models[0]))


@pytest.fixture(scope="session")
def tiny_target(tiny_models: tuple[Path, Path]) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_models[0]), dtype=torch.float32)
    model.eval()
    model.requires_grad_(False)
    return model


@pytest.fixture(scope="session")
def random_lm() -> Any:
    """The ``make_random_lm`` factory (session-scoped so hypothesis tests may use it)."""
    return make_random_lm


@pytest.fixture(scope="session")
def greedy_reference() -> Any:
    """The ``hf_greedy`` helper: ``model.generate(do_sample=False)`` new tokens, EOS dropped."""
    return hf_greedy


def _hypothesis_profile() -> None:
    """Derandomised examples: the same cases on every run, so CI never turns red by luck of the draw."""
    from hypothesis import settings

    settings.register_profile("dspark", derandomize=True, deadline=None)
    settings.load_profile("dspark")


_hypothesis_profile()

"""A tiny random Qwen2 written to GGUF with mixed quant types, loaded by the quantized path.

Checks: the quantized model computes what a plain fp32 model holding the file's dequantized values
computes; its quantized layers are batch invariant inside a real forward; speculative decoding on it is
lossless; types the kernel lacks load dequantized (with a log line); corrupt files and other archs are
ModelErrors; ``load_causal_lm`` picks the quantized path, and falls back (or refuses) without the kernel.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quant_testlib import T, model_to_gguf, random_qwen2, reference_model, tiny_config
from torch import nn

from dspark_lsp.drafts.causal_lm import ModelDraftSource
from dspark_lsp.drafts.hybrid import HybridDraftSource
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine import kv
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.errors import ModelError
from dspark_lsp.models.gguf_target import LoadReport, build_quantized_model, is_quantized, weights_kind
from dspark_lsp.quant import build
from dspark_lsp.quant.build import KernelUnavailable, load_kernel
from dspark_lsp.quant.linear import ProjectionPart, QuantEmbedding, QuantLinear

VOCAB = 320


@pytest.fixture(scope="module", autouse=True)
def _kernel() -> None:
    # Tiny models run single-threaded (conftest.py's list of such modules names this one).
    try:
        load_kernel()  # default cache root: compiled once per machine, shared with test_quant_kernel
    except KernelUnavailable as exc:  # pragma: no cover - the kernel builds wherever the project is developed
        pytest.skip(f"the quantized kernel is unavailable here: {exc}")


# Three type mixes (one per random model) that together put every supported type in a model: the q/k/v
# and gate/up groups fuse when their layouts match (kind, zero point, scales per group, offsets or not).
_ROLES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def _mix(embedding: T, head: T, *layers: tuple[T, ...]) -> dict[str, T]:
    """GGUF tensor name -> type: the embedding, the head, and each layer's projections in _ROLES order."""
    mix = {"token_embd.weight": embedding, "output.weight": head}
    for i, types in enumerate(layers):
        mix.update({f"blk.{i}.{role}.weight": t for role, t in zip(_ROLES, types, strict=True)})
    return mix


_MIXES: list[dict[str, T]] = [
    _mix(T.Q8_0, T.Q8_0,
         (T.Q8_0, T.Q5_0, T.Q5_0, T.Q4_0, T.Q5_0, T.Q8_0, T.Q4_K),
         (T.Q4_0, T.Q4_1, T.Q5_1, T.Q8_0, T.Q4_1, T.Q4_1, T.Q6_K)),
    _mix(T.Q4_0, T.Q5_1,
         (T.Q4_1, T.Q4_1, T.Q4_1, T.Q5_1, T.Q8_0, T.Q4_0, T.Q5_K),
         (T.Q5_1, T.Q5_1, T.Q5_1, T.Q4_1, T.Q4_0, T.Q4_0, T.Q4_K)),
    _mix(T.Q5_0, T.Q4_1,
         (T.Q4_0, T.Q4_0, T.Q4_0, T.Q5_0, T.Q5_1, T.Q5_1, T.Q6_K),
         (T.Q8_0, T.Q8_0, T.Q8_0, T.Q4_0, T.Q8_0, T.Q5_0, T.Q5_K)),
]

# The kernel layout of each type (blocks.pack): code layout, zero point, scales per 32 values, offsets.
_LAYOUT = {T.Q4_0: (4, 8, 1, False), T.Q4_1: (4, 0, 1, True), T.Q4_K: (4, 0, 1, True),
           T.Q5_0: (8, 0, 1, False), T.Q8_0: (8, 0, 1, False), T.Q5_1: (8, 0, 1, True),
           T.Q5_K: (8, 0, 1, True), T.Q6_K: (8, 0, 2, False)}


@dataclass
class Built:
    config: Any
    path: Path
    model: Any  # the quantized model
    reference: Any  # plain fp32 Qwen2ForCausalLM holding the file's dequantized values
    report: LoadReport
    types: dict[str, T]
    logs: list[str] = field(default_factory=list)


def _build(dest: Path, seed: int, types: dict[str, T], config: Any | None = None, **gguf_kw: Any) -> Built:
    config = config or tiny_config(vocab=VOCAB)
    source = random_qwen2(seed, config)
    path = dest / f"model-{seed}.gguf"
    expected = model_to_gguf(path, source, types, seed=seed, **gguf_kw)
    logs: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        # Unfused layers on the Python layer loop, which this file holds to transformers' forward bit for
        # bit (the native path for them: tests/quant/test_native_unfused.py).
        mp.setenv("DSPARK_NATIVE_UNFUSED", "0")
        model, report = build_quantized_model(path, config, log=logs.append)
    return Built(config, path, model, reference_model(config, expected), report, types, logs)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[Built]:
    dest = tmp_path_factory.mktemp("quant-models")
    return [_build(dest, seed, mix) for seed, mix in enumerate(_MIXES)]


# The quantized forward's decode path rounds each group of 32 activations to int16 steps (~1.5e-5 of the
# group's largest value per product) and that compounds over the layers; the tiny models' logits are
# O(1), so ~1e-3 is that rounding, while a wrong code, scale or layout moves logits by O(0.1).
QUANT_TOL = {"atol": 2e-3, "rtol": 2e-3}


def _logits(model: Any, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0].float()


def _sequences(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, VOCAB, n)] for n in (1, 7, 20, 45)]  # 45 > SMALL_M: GEMM path


# ------------------------------------------------------------------------------- (a) the right numbers
@pytest.mark.parametrize("which", [0, 1, 2])
def test_quantized_model_matches_dequantized_fp32_model(built: list[Built], which: int,
                                                         greedy_reference: Any) -> None:
    b = built[which]
    assert is_quantized(b.model)
    assert b.report.dequantized == {} and b.logs == []
    counts: dict[str, int] = {}
    for t in b.types.values():
        counts[t.name] = counts.get(t.name, 0) + 1
    assert b.report.quantized == counts
    assert 0 < b.report.weight_bytes < sum(p.numel() * 4 for p in b.reference.parameters())
    assert isinstance(b.model.model.embed_tokens, QuantEmbedding)
    assert isinstance(b.model.lm_head, QuantLinear)
    assert not any(isinstance(m, nn.Linear | nn.Embedding) for m in b.model.modules())
    for i, layer in enumerate(b.model.model.layers):
        for owner, names, short in ((layer.self_attn, ("q_proj", "k_proj", "v_proj"), ("q", "k", "v")),
                                    (layer.mlp, ("gate_proj", "up_proj"), ("gate", "up"))):
            prefix = "attn" if owner is layer.self_attn else "ffn"
            layouts = {_LAYOUT[b.types[f"blk.{i}.{prefix}_{s}.weight"]] for s in short}
            want = ProjectionPart if len(layouts) == 1 else QuantLinear
            assert all(type(getattr(owner, n)) is want for n in names), (i, names)
        assert isinstance(layer.self_attn.o_proj, QuantLinear) and isinstance(layer.mlp.down_proj, QuantLinear)

    for ids in _sequences(which):
        got, want = _logits(b.model, ids), _logits(b.reference, ids)
        torch.testing.assert_close(got, want, **QUANT_TOL)
        assert torch.equal(got.argmax(-1), want.argmax(-1))
    # Greedy decoding on the quantized target is the fp32 model's greedy output.
    decoder = SpeculativeDecoder(b.model)
    for prompt in ([5], [1, 2, 3, 4, 5, 6], _sequences(which + 10)[2]):
        alone = decoder.generate(prompt, config=DecodeConfig(max_new_tokens=12))
        assert alone.tokens == greedy_reference(b.reference, prompt, 12)


def test_tied_head_reads_the_quantized_embedding(tmp_path: Path) -> None:
    config = tiny_config(vocab=VOCAB, tie=True)
    b = _build(tmp_path, 3, {"token_embd.weight": T.Q5_1}, config=config)
    head = b.model.lm_head
    assert isinstance(head, QuantLinear) and isinstance(b.model.model.embed_tokens, QuantEmbedding)
    assert head.codes.data_ptr() == b.model.model.embed_tokens.codes.data_ptr()  # one table, not two
    for ids in _sequences(3)[:3]:
        got, want = _logits(b.model, ids), _logits(b.reference, ids)
        torch.testing.assert_close(got, want, **QUANT_TOL)
        assert torch.equal(got.argmax(-1), want.argmax(-1))


# ------------------------------------------------------------------------------- (b) batch invariance
def _rowwise_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
                       **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Causal attention computed one query row at a time with exactly the shapes a one-token forward
    uses (a plain continuation forward only: the mask is not consulted)."""
    from transformers.models.qwen2.modeling_qwen2 import repeat_kv

    assert attention_mask is None
    keys = repeat_kv(key, module.num_key_value_groups)
    values = repeat_kv(value, module.num_key_value_groups)
    q_len, kv_len = query.shape[2], keys.shape[2]
    rows = []
    for i in range(q_len):
        n = kv_len - q_len + i + 1
        w = torch.matmul(query[:, :, i : i + 1].contiguous(), keys[:, :, :n].contiguous().transpose(2, 3))
        w = torch.softmax(w * scaling, dim=-1)
        rows.append(torch.matmul(w, values[:, :, :n].contiguous()))
    return torch.cat(rows, dim=2).transpose(1, 2).contiguous(), None


@pytest.fixture
def rowwise_attention(built: list[Built]) -> Iterator[list[Any]]:
    """Quantized models (fresh copies of the fixtures' configs) whose attention is batch invariant."""
    from transformers import AttentionInterface

    AttentionInterface.register("dspark_test_rowwise", _rowwise_attention)
    models = []
    for b in built:
        config = copy.deepcopy(b.config)
        model, _ = build_quantized_model(b.path, config)
        model.config._attn_implementation = "dspark_test_rowwise"
        models.append(model)
    yield models


def _split_forwards(model: Any, ids: list[int], prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of ids[prefix:] as one forward on a cache of ids[:prefix], and as one-token forwards on the
    same cache cropped back to ids[:prefix]."""
    cache = kv.new_cache(model)
    kv.forward(model, ids[:prefix], cache)
    together = kv.forward(model, ids[prefix:], cache)
    kv.crop(cache, prefix)
    assert kv.cache_len(cache) == prefix
    alone = torch.cat([kv.forward(model, [t], cache) for t in ids[prefix:]])
    return together, alone


@pytest.mark.parametrize("which", [0, 1, 2])
def test_k_token_forward_equals_k_one_token_forwards_bitwise(rowwise_attention: list[Any], which: int) -> None:
    """With the one torch op whose rounding depends on the query count (attention) made row-wise, a
    k-token forward's logits are k one-token forwards' bit for bit: every quantized layer (embedding,
    fused q/k/v and gate/up, o/down, head) and everything else in the model is batch invariant."""
    model = rowwise_attention[which]
    rng = np.random.default_rng(50 + which)
    for prefix, k in ((1, 1), (1, 4), (10, 2), (10, 3), (7, 5), (3, 7), (12, 12), (40, 9)):
        ids = [int(t) for t in rng.integers(0, VOCAB, prefix + k)]
        together, alone = _split_forwards(model, ids, prefix)
        assert together.shape == alone.shape == (k, VOCAB)
        for i in range(k):
            assert torch.equal(together[i], alone[i]), f"prefix {prefix}, k {k}: row {i} differs"


@pytest.mark.parametrize("which", [0, 1, 2])
def test_quantized_layers_batch_invariant_inside_a_real_forward(built: list[Built], which: int) -> None:
    """Every quantized module, fed the rows it saw in a stock k-token forward one row at a time, gives
    the same bits as in that forward."""
    model = built[which].model
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(name: str) -> Any:
        def hook(_mod: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> None:
            seen.setdefault(name, (args[0], out))
        return hook

    hooks = [m.register_forward_hook(keep(name))
             for name, m in model.named_modules() if isinstance(m, QuantLinear | QuantEmbedding)]
    rng = np.random.default_rng(60 + which)
    ids = [int(t) for t in rng.integers(0, VOCAB, 15)]
    cache = kv.new_cache(model)
    kv.forward(model, ids[:8], cache)
    try:
        kv.forward(model, ids[8:], cache)
    finally:
        for h in hooks:
            h.remove()
    assert len(seen) == sum(isinstance(m, QuantLinear | QuantEmbedding) for m in model.modules())
    with torch.inference_mode():
        for name, (x, out) in seen.items():
            mod = model.get_submodule(name)
            rows = torch.cat([mod(x[:, i : i + 1]) for i in range(x.shape[1])], dim=1)
            assert torch.equal(rows, out), name


@pytest.mark.parametrize("which", [0, 1, 2])
def test_k_token_forward_with_stock_attention_is_close_with_same_argmax(built: list[Built], which: int) -> None:
    model = built[which].model
    rng = np.random.default_rng(70 + which)
    for prefix, k in ((10, 4), (5, 7), (20, 12)):
        ids = [int(t) for t in rng.integers(0, VOCAB, prefix + k)]
        together, alone = _split_forwards(model, ids, prefix)
        torch.testing.assert_close(together, alone, atol=2e-5, rtol=1e-5)
        assert torch.equal(together.argmax(-1), alone.argmax(-1))


@pytest.mark.parametrize("which", [0, 1, 2])
def test_k_token_forward_of_the_built_model_is_bitwise(built: list[Built], which: int) -> None:
    """As built (row-wise attention, models/rowwise_attention.py), the whole model is batch invariant:
    a k-token verify forward's logits are k one-token forwards' bit for bit."""
    rng = np.random.default_rng(80 + which)
    for prefix, k in ((10, 8), (3, 2), (25, 16)):
        ids = [int(t) for t in rng.integers(0, VOCAB, prefix + k)]
        together, alone = _split_forwards(built[which].model, ids, prefix)
        assert torch.equal(together, alone), f"prefix {prefix}, k {k}"


def _run_both(model: Any, steps: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """Each step's output through the installed (lean) forward and through transformers' own, each on
    its own cache built by the same steps."""
    stock = type(model).forward.__get__(model)
    outs: list[list[Any]] = [[], []]
    for which, call in enumerate((model, stock)):
        cache = kv.new_cache(model)
        with torch.inference_mode():
            for step in steps:
                outs[which].append(call(**step, cache=cache, use_cache=True))
    return list(zip(*outs, strict=True))


@pytest.mark.parametrize("which", [0, 1, 2])
def test_lean_forward_equals_transformers_forward(built: list[Built], which: int) -> None:
    """The direct forward (models/lean_forward.py) the quantized target runs is transformers' forward (bit
    for bit in its Python layer loop, to fp32 rounding in the C++ layer): logits, every hidden state, on a cache, for a prefill, a long continuation (> 16 rows after
    cached ones: an explicit causal mask), verify rows, one row, kept logits, and tree rows with their own
    positions and mask."""
    model = built[which].model
    assert model.forward.__func__ is not type(model).forward  # installed by build_quantized_model
    # Mix 2 fuses every layer's q/k/v and gate/up, so its decode/verify rows run each layer as one C++ op
    # (quant/decoder_layer.cpp); mixes 0 and 1 have unfusable layers and run the Python layer loop.
    assert (model.dspark_lean.native is not None) == (which == 2)
    rng = np.random.default_rng(90 + which)
    ids = [int(t) for t in rng.integers(0, VOCAB, 60)]
    cached = 6 + 20 + 5 + 1
    # Tree rows: two alternates at the same position, each seeing the cache and itself only.
    tree_mask = torch.full((1, 1, 2, cached + 2), float("-inf"))
    tree_mask[..., :cached] = 0.0
    tree_mask[0, 0, 0, cached] = tree_mask[0, 0, 1, cached + 1] = 0.0
    one_row = torch.full((1, 1, 1, cached + 3), float("-inf"))
    one_row[..., :cached] = 0.0
    one_row[0, 0, 0, cached + 1] = one_row[0, 0, 0, cached + 2] = 0.0
    steps: list[dict[str, Any]] = [
        {"input_ids": torch.tensor([ids[:6]]), "logits_to_keep": 1},
        {"input_ids": torch.tensor([ids[6:26]]), "output_hidden_states": True},
        {"input_ids": torch.tensor([ids[26:31]]), "output_hidden_states": True},
        {"input_ids": torch.tensor([ids[31:32]])},
        {"input_ids": torch.tensor([ids[32:34]]), "attention_mask": tree_mask,
         "position_ids": torch.tensor([[cached, cached]])},
        # one tree row seeing the cache and the second alternate only (not a prefix: keys gathered)
        {"input_ids": torch.tensor([ids[34:35]]), "attention_mask": one_row,
         "position_ids": torch.tensor([[cached + 1]])},
        {"input_ids": torch.tensor([ids[35:39]]), "output_hidden_states": True},
    ]
    # The Python layer loop issues transformers' own operations: the same bits. The C++ layer computes the
    # row operations and attention with loops of its own (fixed order, own exp): fp32 rounding apart, which
    # the products' int16 rounding of their inputs can turn into a step of that rounding (QUANT_TOL's
    # reason); a wrong sign, position or key moves logits by O(0.1).
    def same(a: torch.Tensor, b: torch.Tensor, step: int) -> None:
        if which == 2:
            torch.testing.assert_close(a, b, **QUANT_TOL, msg=lambda m: f"step {step}: {m}")
        else:
            assert torch.equal(a, b), step

    native_differs = False
    for i, (lean, stock) in enumerate(_run_both(model, steps)):
        assert lean.logits.shape == stock.logits.shape, i
        same(lean.logits, stock.logits, i)
        native_differs |= not torch.equal(lean.logits, stock.logits)
        if stock.hidden_states is not None:
            assert len(lean.hidden_states) == len(stock.hidden_states)
            for a, b in zip(lean.hidden_states, stock.hidden_states, strict=True):
                same(a, b, i)
    # ... and it is really the C++ layer that ran for mix 2 (its rounding shows somewhere).
    assert native_differs == (which == 2)


def test_lean_forward_defers_to_transformers_for_what_it_does_not_handle(built: list[Built]) -> None:
    model = built[0].model
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        # inputs_embeds, a 2-D padding mask, a batch of two: transformers' forward answers, same numbers
        embeds = model.model.embed_tokens(ids)
        direct = model(input_ids=ids).logits
        assert torch.equal(model(inputs_embeds=embeds).logits, direct)
        assert torch.equal(model(input_ids=ids, attention_mask=torch.ones(1, 4, dtype=torch.long)).logits, direct)
        assert model(input_ids=ids.repeat(2, 1)).logits.shape[0] == 2
    # A hook on a quantized projection still fires (the direct path calls hooked modules as modules).
    seen: list[torch.Size] = []
    handle = model.model.layers[0].self_attn.o_proj.register_forward_hook(lambda _m, a, _o: seen.append(a[0].shape))
    try:
        with torch.inference_mode():
            model(input_ids=ids)
    finally:
        handle.remove()
    assert seen == [torch.Size([1, 4, model.config.hidden_size])]


# -------------------------------------------------------------------------------- (c) lossless decoding
_draft_models: dict[int, Any] = {}


def _draft_lm(seed: int, random_lm: Any) -> Any:
    if seed not in _draft_models:
        _draft_models[seed] = random_lm(seed, vocab_size=VOCAB, hidden=16, layers=1, head_scale=16.0)
    return _draft_models[seed]


@st.composite
def decode_cases(draw: st.DrawFn) -> dict[str, Any]:
    alphabet = draw(st.sampled_from([3, 8, VOCAB]))  # small alphabets: repetitive prompts, n-gram hits
    k_min = draw(st.integers(1, 3))
    k_max = draw(st.integers(k_min, 7))
    return {
        "prompt": draw(st.lists(st.integers(0, alphabet - 1), min_size=1, max_size=30)),
        "max_new_tokens": draw(st.integers(1, 20)),
        "draft": draw(st.sampled_from(["ngram", "model", "hybrid", "self"])),
        "draft_seed": draw(st.integers(0, 3)),
        "mode": draw(st.sampled_from(["semi", "ar", "parallel"])),
        "alternates": draw(st.sampled_from([0, 3])),
        "scheduler": SchedulerConfig(k_min=k_min, k_max=k_max, k_start=draw(st.integers(k_min, k_max)),
                                     fixed_k=draw(st.one_of(st.none(), st.integers(1, 7)))),
        "eos": draw(st.one_of(st.none(), st.integers(0, VOCAB - 1))),
    }


@pytest.mark.parametrize("which", [0, 1, 2])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=decode_cases())
def test_speculative_greedy_equals_quantized_target_alone(built: list[Built], which: int, random_lm: Any,
                                                          case: dict[str, Any]) -> None:
    target = built[which].model
    ngram = NgramDraftSource(max_ngram=3)
    other = ModelDraftSource(_draft_lm(case["draft_seed"], random_lm), VOCAB, name="tiny")
    draft = {"ngram": ngram, "model": other, "hybrid": HybridDraftSource(other, ngram),
             "self": ModelDraftSource(target, VOCAB, name="self")}[case["draft"]]
    eos = () if case["eos"] is None else (case["eos"],)
    decoder = SpeculativeDecoder(target)
    n = case["max_new_tokens"]
    alone = decoder.generate(case["prompt"], config=DecodeConfig(max_new_tokens=n), eos_ids=eos)
    spec = decoder.generate(case["prompt"], draft=draft, eos_ids=eos, config=DecodeConfig(
        max_new_tokens=n, draft_mode=case["mode"], scheduler=case["scheduler"], alternates=case["alternates"]))
    assert spec.tokens == alone.tokens
    assert spec.stop_reason == alone.stop_reason


@pytest.mark.parametrize("which", [0, 1, 2])
def test_speculation_on_the_quantized_target_pays(built: list[Built], which: int) -> None:
    """Not vacuous: drafting for itself, the quantized target accepts its own drafts (fewer forwards)."""
    target = built[which].model
    decoder = SpeculativeDecoder(target)
    config = DecodeConfig(max_new_tokens=24, draft_mode="ar",
                          scheduler=SchedulerConfig(fixed_k=4, tau=0.05, tau_min=0.05))
    res = decoder.generate([1, 2, 3], config=config, draft=ModelDraftSource(target, VOCAB, name="self"))
    alone = decoder.generate([1, 2, 3], config=DecodeConfig(max_new_tokens=24))
    assert res.tokens == alone.tokens
    assert res.stats.proposed > 0 and res.stats.accepted == res.stats.proposed
    assert res.stats.target_forwards <= alone.stats.target_forwards - res.stats.accepted // 2


# ------------------------------------------------------------------- (d) types the kernel does not hold
def test_unsupported_types_load_dequantized_and_run(tmp_path: Path) -> None:
    types = dict(_MIXES[0])
    types.update({"blk.0.ffn_down.weight": T.Q2_K, "blk.1.ffn_down.weight": T.Q3_K,
                  "blk.0.attn_output.weight": T.F16, "blk.1.attn_output.weight": T.BF16})
    b = _build(tmp_path, 4, types)
    assert b.report.dequantized == {"Q2_K": 1, "Q3_K": 1}
    assert "F16" not in b.report.quantized and "BF16" not in b.report.quantized
    assert sorted(b.logs) == [
        "GGUF tensor blk.0.ffn_down.weight: type Q2_K is not supported by the quantized kernel; loaded as fp32",
        "GGUF tensor blk.1.ffn_down.weight: type Q3_K is not supported by the quantized kernel; loaded as fp32",
    ]
    assert "Q2_K" in b.report.summary() and "fp32 [" in b.report.summary()
    for i in (0, 1):
        layer = b.model.model.layers[i]
        assert type(layer.mlp.down_proj) is nn.Linear and type(layer.self_attn.o_proj) is nn.Linear
        want = b.reference.model.layers[i].mlp.down_proj.weight
        assert torch.equal(layer.mlp.down_proj.weight, want)  # the gguf package's values exactly
    assert is_quantized(b.model)
    for ids in _sequences(4):
        got, want = _logits(b.model, ids), _logits(b.reference, ids)
        torch.testing.assert_close(got, want, **QUANT_TOL)
        assert torch.equal(got.argmax(-1), want.argmax(-1))
    decoder = SpeculativeDecoder(b.model)
    prompt = [3, 4, 5, 3, 4, 5, 3, 4]
    alone = decoder.generate(prompt, config=DecodeConfig(max_new_tokens=16))
    spec = decoder.generate(prompt, config=DecodeConfig(max_new_tokens=16), draft=NgramDraftSource())
    assert spec.tokens == alone.tokens and len(alone.tokens) == 16


# ---------------------------------------------------------------------------------- (e) refused files
def test_corrupt_files_and_other_archs_are_model_errors(built: list[Built], tmp_path: Path) -> None:
    b = built[0]
    data = b.path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="truncated"):
        build_quantized_model(cut, b.config)
    cut.write_bytes(data[:100])
    with pytest.raises(ModelError, match="truncated"):
        build_quantized_model(cut, b.config)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"\x00" * 1000)
    with pytest.raises(ModelError, match="not a GGUF file"):
        build_quantized_model(junk, b.config)
    with pytest.raises(ModelError, match="cannot open"):
        build_quantized_model(tmp_path / "missing.gguf", b.config)

    source = random_qwen2(0, b.config)
    llama = tmp_path / "llama.gguf"
    model_to_gguf(llama, source, {}, arch="llama")
    with pytest.raises(ModelError, match=r"supports qwen2 GGUF files, not 'llama'"):
        build_quantized_model(llama, b.config)


def test_files_that_do_not_match_the_model_are_model_errors(tmp_path: Path) -> None:
    config = tiny_config(vocab=VOCAB)
    source = random_qwen2(1, config)
    lacking = tmp_path / "lacking.gguf"
    model_to_gguf(lacking, source, {}, drop=("blk.1.ffn_up.weight",))
    with pytest.raises(ModelError, match=r"lacks tensors the model needs: model\.layers\.1\.mlp\.up_proj"):
        build_quantized_model(lacking, config)

    bias_only = tmp_path / "bias_only.gguf"
    model_to_gguf(bias_only, source, {}, drop=("blk.0.attn_k.weight",))
    with pytest.raises(ModelError, match="has a bias for model.layers.0.self_attn.k_proj but no weight"):
        build_quantized_model(bias_only, config)

    extra = tmp_path / "extra.gguf"
    model_to_gguf(extra, source, {}, extra=[("blk.0.attn_q_norm.weight", np.ones(16, np.float32), T.F32)])
    with pytest.raises(ModelError, match=r"GGUF tensor blk\.0\.attn_q_norm\.weight has no counterpart"):
        build_quantized_model(extra, config)

    other = tiny_config(vocab=VOCAB, intermediate=512)  # the file's are 256 wide
    path = tmp_path / "ok.gguf"
    model_to_gguf(path, source, {})
    with pytest.raises(ModelError, match=r"is \[256, 64\], the model expects \[512, 64\]"):
        build_quantized_model(path, other)


@pytest.mark.parametrize("case", ["other_size", "transposed"])
def test_dense_tensors_that_do_not_match_the_model_are_model_errors(tmp_path: Path, case: str) -> None:
    config = tiny_config(vocab=VOCAB)
    source = random_qwen2(2, config)
    path = tmp_path / f"{case}.gguf"
    if case == "other_size":  # every matrix F16, 256 wide; the config wants 512
        model_to_gguf(path, source, {}, default=T.F16)
        config = tiny_config(vocab=VOCAB, intermediate=512)
    else:  # the gate as [64, 256] where the model's is [256, 64]
        gate = source.model.layers[0].mlp.gate_proj.weight.detach().numpy().T
        raw = np.ascontiguousarray(gate).astype(np.float16).view(np.uint8)
        model_to_gguf(path, source, {}, default=T.F16, drop=("blk.0.ffn_gate.weight",),
                      extra=[("blk.0.ffn_gate.weight", raw, T.F16)])
    with pytest.raises(ModelError, match="blk.0.ffn_gate.weight"):
        build_quantized_model(path, config)


# ------------------------------------------------------------------------------- (f) load_causal_lm
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, built: list[Built]) -> Path:
    """A local model dir: config.json and fp32 weights (the dequantized values), a tokenizer, the GGUF."""
    from dspark_lsp.testing.tiny import build_tiny_tokenizer

    dest = tmp_path_factory.mktemp("local-model")
    b = built[0]
    b.reference.save_pretrained(str(dest))
    build_tiny_tokenizer(dest, vocab_size=VOCAB)
    (dest / "model.gguf").write_bytes(b.path.read_bytes())
    return dest


@pytest.fixture
def no_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel as on a machine that cannot have it: load_kernel forgets its success (restored after)."""
    monkeypatch.setattr(build, "_loaded", None)
    monkeypatch.setattr(build, "_failure", None)
    monkeypatch.setenv(build.ENV_DISABLE, "1")


def test_load_causal_lm_gguf_dtype_is_quantized(model_dir: Path, built: list[Built]) -> None:
    from dspark_lsp.models.loader import gguf_source, load_causal_lm

    assert gguf_source(str(model_dir), model_dir) == model_dir / "model.gguf"
    ids = [int(t) for t in np.random.default_rng(9).integers(0, VOCAB, 12)]
    want = _logits(built[0].model, ids)
    for dtype in ("gguf", "auto"):
        model, tokenizer = load_causal_lm(str(model_dir), dtype=dtype)
        assert is_quantized(model), dtype
        assert weights_kind(model) == "gguf"
        assert not model.training and all(not p.requires_grad for p in model.parameters())
        assert len(tokenizer) <= VOCAB
        assert torch.equal(_logits(model, ids), want)  # the same file, the same layers: the same bits


def test_load_causal_lm_without_the_kernel(model_dir: Path, built: list[Built], no_kernel: None,
                                           caplog: pytest.LogCaptureFixture) -> None:
    from dspark_lsp.models.loader import load_causal_lm

    with pytest.raises(KernelUnavailable, match="disabled by DSPARK_NO_QKERNEL"):
        load_kernel()
    with caplog.at_level(logging.WARNING, logger="dspark_lsp.models.loader"):
        model, _ = load_causal_lm(str(model_dir), dtype="auto")
    assert not is_quantized(model)
    assert next(model.parameters()).dtype == torch.float32
    assert any("running fp32 weights" in r.getMessage() and "DSPARK_NO_QKERNEL" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    ids = [int(t) for t in np.random.default_rng(10).integers(0, VOCAB, 12)]
    got, want = _logits(model, ids), _logits(built[0].model, ids)
    torch.testing.assert_close(got, want, **QUANT_TOL)  # the fp32 weights are the file's values
    with pytest.raises(ModelError, match=r"dtype 'gguf' is unavailable: .*disabled by DSPARK_NO_QKERNEL"):
        load_causal_lm(str(model_dir), dtype="gguf")


def test_load_causal_lm_gguf_needs_one_gguf_file_and_the_cpu(model_dir: Path, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    import shutil

    from dspark_lsp.models.loader import gguf_source, load_causal_lm

    bare = tmp_path / "bare"
    shutil.copytree(model_dir, bare, ignore=shutil.ignore_patterns("*.gguf"))
    assert gguf_source(str(bare), bare) is None
    with pytest.raises(ModelError, match="no single .gguf file"):
        load_causal_lm(str(bare), dtype="gguf")
    with caplog.at_level(logging.WARNING, logger="dspark_lsp.models.loader"):
        model, _ = load_causal_lm(str(bare), dtype="auto")
    assert not is_quantized(model)
    assert any("running fp32 weights" in r.getMessage() for r in caplog.records)

    two = tmp_path / "two"
    shutil.copytree(model_dir, two)
    shutil.copy(two / "model.gguf", two / "other.gguf")
    assert gguf_source(str(two), two) is None
    with pytest.raises(ModelError, match="no single .gguf file"):
        load_causal_lm(str(two), dtype="gguf")

    with pytest.raises(ModelError, match="the quantized kernel runs on the CPU, not cuda"):
        load_causal_lm(str(model_dir), device="cuda", dtype="gguf")

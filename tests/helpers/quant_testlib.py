"""Helpers for the quantized-path tests (test_quant_*.py): random GGUF blocks and tiny Qwen2 GGUF files.

Not a test module (no ``test_`` prefix); the test modules import it by name (pytest puts ``tests/`` on
``sys.path``). Everything here is deterministic given its seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.quants import dequantize, quantize

T = gguf.GGMLQuantizationType

# The types the kernel holds, and the two the package quantizes itself (the rest get random blocks).
SUPPORTED = (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K)
SIMPLE = (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0)
K_QUANTS = (T.Q4_K, T.Q5_K, T.Q6_K)

# Byte offsets of the fp16 fields (d, and dmin / m) inside one block of each type (ggml-common.h).
F16_FIELDS: dict[T, tuple[int, ...]] = {
    T.Q4_0: (0,), T.Q4_1: (0, 2), T.Q5_0: (0,), T.Q5_1: (0, 2), T.Q8_0: (0,),
    T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,),
}

# fp16 values worth hitting on purpose: zeros of both signs, the smallest subnormal, the largest finite.
_SPECIAL_F16 = np.array([0.0, -0.0, 2.0**-24, -(2.0**-24), 6.1035e-05, 65504.0, -65504.0, 1.0, -1.0], np.float16)


def block_sizes(qtype: T) -> tuple[int, int]:
    """(values per block, bytes per block)."""
    return gguf.GGML_QUANT_SIZES[qtype]


def random_blocks(qtype: T, n: int, k: int, rng: np.random.Generator, scale: float = 0.05,
                  special: bool = False) -> np.ndarray:
    """Random raw blocks [n, row bytes] (uint8) of ``qtype``: random codes and sub-scales, finite fp16
    d/dmin fields drawn from [-scale, scale] (plus a sprinkling of edge values when ``special``)."""
    per, size = block_sizes(qtype)
    assert k % per == 0
    nb = n * k // per
    raw = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    for at in F16_FIELDS[qtype]:
        vals = (rng.uniform(-1.0, 1.0, nb) * scale).astype(np.float16)
        if special:
            pick = rng.random(nb) < 0.2
            vals[pick] = rng.choice(_SPECIAL_F16, int(pick.sum()))
        assert np.isfinite(vals).all()
        raw[:, at : at + 2] = vals.view(np.uint8).reshape(nb, 2)
    return raw.reshape(n, nb // n * size)


def quantized_bytes(qtype: T, values: np.ndarray | None, n: int, k: int, rng: np.random.Generator,
                    scale: float = 0.05) -> np.ndarray:
    """Raw bytes [n, row bytes] of an [n, k] matrix in ``qtype``: the package's own quantizer for the types
    it can quantize (``values`` or random normals), random valid blocks for the others."""
    if qtype in SIMPLE or qtype in (T.F16, T.BF16):
        if values is None:
            values = rng.standard_normal((n, k)).astype(np.float32)
        q = quantize(np.asarray(values, np.float32).reshape(n, k), qtype)
        if q.dtype != np.uint8:
            q = q.view(np.uint8)
        return np.ascontiguousarray(q).reshape(n, -1)
    return random_blocks(qtype, n, k, rng, scale=scale)


def reference_values(raw: np.ndarray, qtype: T, n: int, k: int) -> np.ndarray:
    """The gguf package's dequantization of ``raw`` as fp32 [n, k] (the reference everything is held to)."""
    return np.asarray(dequantize(np.ascontiguousarray(raw).reshape(n, -1), qtype), np.float32).reshape(n, k)


def write_gguf(path: Path, tensors: list[tuple[str, np.ndarray, T]], arch: str = "qwen2",
               kv: dict[str, Any] | None = None) -> Path:
    """A GGUF file holding ``tensors`` (name, raw uint8 bytes [rows, row bytes] or an fp32 array, type)."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in (kv or {}).items():
        if isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint32(key, int(value))
    for name, arr, qtype in tensors:
        if qtype == T.F32:
            w.add_tensor(name, np.ascontiguousarray(arr, np.float32))
        else:
            w.add_tensor(name, np.ascontiguousarray(arr, np.uint8), raw_shape=arr.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


# ------------------------------------------------------------------------------------------ tiny models
_LAYER_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
}
_TOP_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}

# Random K-quant / unsupported blocks: d scales giving weights of roughly the init's size (~0.05).
_RANDOM_SCALE = {T.Q4_K: 1e-4, T.Q5_K: 5e-5, T.Q6_K: 1e-5, T.Q2_K: 1e-3, T.Q3_K: 5e-4}


def gguf_name(hf_name: str) -> str:
    """'model.layers.1.mlp.down_proj.weight' -> 'blk.1.ffn_down.weight' (llama.cpp's qwen2 names)."""
    module, _, what = hf_name.rpartition(".")
    if module in _TOP_NAMES:
        return f"{_TOP_NAMES[module]}.{what}"
    parts = module.split(".")
    assert parts[:2] == ["model", "layers"], hf_name
    return f"blk.{parts[2]}.{_LAYER_NAMES['.'.join(parts[3:])]}.{what}"


def tiny_config(*, vocab: int = 320, hidden: int = 64, intermediate: int = 256, layers: int = 2,
                heads: int = 4, kv_heads: int = 2, tie: bool = False) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=512,
        tie_word_embeddings=tie, eos_token_id=None, pad_token_id=None, bos_token_id=None,
    )


def random_qwen2(seed: int, config: Any, head_scale: float = 8.0) -> Any:
    """A random Qwen2ForCausalLM of ``config`` (random biases too; the head scaled so argmaxes are decisive)."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        if not config.tie_word_embeddings:
            model.lm_head.weight.mul_(head_scale)
        else:
            model.model.embed_tokens.weight.mul_(head_scale ** 0.5)
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.05)
            elif name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    model.eval()
    model.requires_grad_(False)
    return model


def model_to_gguf(path: Path, model: Any, types: dict[str, T], default: T = T.Q8_0, seed: int = 0,
                  arch: str = "qwen2", drop: tuple[str, ...] = (),
                  extra: list[tuple[str, np.ndarray, T]] | None = None) -> dict[str, np.ndarray]:
    """Write ``model`` to a GGUF at ``path``: matrices in ``types[gguf name]`` (else ``default``), 1-D tensors
    F32. Types the package cannot quantize get random valid blocks instead of the model's values.

    Returns the fp32 values a faithful loader must end up with, per HF parameter name (the gguf
    package's dequantization of what was written)."""
    rng = np.random.default_rng(seed)
    tensors: list[tuple[str, np.ndarray, T]] = []
    expected: dict[str, np.ndarray] = {}
    tied = bool(model.config.tie_word_embeddings)
    for hf_name, tensor in model.state_dict().items():
        if tied and hf_name == "lm_head.weight":
            continue
        name = gguf_name(hf_name)
        if name in drop:
            continue
        arr = tensor.detach().float().numpy()
        if arr.ndim == 1:
            tensors.append((name, arr, T.F32))
            expected[hf_name] = arr.copy()
            continue
        qtype = types.get(name, default)
        n, k = arr.shape
        if qtype == T.F32:
            tensors.append((name, arr, T.F32))
            expected[hf_name] = arr.copy()
            continue
        raw = quantized_bytes(qtype, arr, n, k, rng, scale=_RANDOM_SCALE.get(qtype, 0.05))
        tensors.append((name, raw, qtype))
        expected[hf_name] = reference_values(raw, qtype, n, k)
    tensors += extra or []
    write_gguf(path, tensors, arch=arch)
    return expected


def reference_model(config: Any, expected: dict[str, np.ndarray]) -> Any:
    """A plain fp32 Qwen2ForCausalLM holding exactly ``expected`` (the dequantized file)."""
    import torch
    from transformers import Qwen2ForCausalLM

    model = Qwen2ForCausalLM(config)
    state = {name: torch.from_numpy(np.ascontiguousarray(v)) for name, v in expected.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if config.tie_word_embeddings:
        model.tie_weights()
    model.eval()
    model.requires_grad_(False)
    return model


# ------------------------------------------------------------------------------------------ kernel state
def prefill_scratch_made_in_inference_mode(k: int = 1 << 16, rows: int = 128) -> None:
    """Leave the kernel's kept prefill buffers as the engine's first prefill leaves them in a server: made
    inside ``torch.inference_mode`` (with bf16 prefill on, as under dtype auto on a CPU with native bf16).

    The buffers are per thread and only grow, so whatever ran earlier in this process may have left larger
    ones made outside that mode; a product of ``rows`` x ``k`` (8.4M activations, more than any model in
    the test suite prefills) makes them anew here. The switch is left on; the conftest turns it off
    before the next test.
    """
    import torch

    from dspark_lsp.quant import blocks
    from dspark_lsp.quant.linear import QuantLinear

    raw = quantized_bytes(T.Q8_0, None, 8, k, np.random.default_rng(0))
    lin = QuantLinear(blocks.pack_tensor(raw, int(T.Q8_0), 8, k))
    torch.ops.dspark_q.set_prefill_bf16(True)
    with torch.inference_mode():
        lin(torch.ones(rows, k))


def assert_same_logits_in_both(old: Any, new: Any, seed: int, vocab: int = 256) -> None:
    """Two builds of one GGUF (two kernel layouts) give identical logits: a 20-token prefill, then every
    forward width a verify uses, each on the same cached prefix."""
    import torch

    from dspark_lsp.engine import kv

    ids = [int(t) for t in np.random.default_rng(seed).integers(0, vocab, 40)]
    models = (old, new)
    with torch.inference_mode():
        caches = [kv.new_cache(m) for m in models]
        pre = [kv.forward(m, ids[:20], c) for m, c in zip(models, caches, strict=True)]
        assert torch.equal(pre[0], pre[1])
        for width in (1, 2, 4, 5, 6, 8):
            step = ids[20 : 20 + width]
            outs = [kv.forward(m, step, c) for m, c in zip(models, caches, strict=True)]
            assert torch.equal(outs[0], outs[1]), f"{width}-token forward differs between layouts"
            for c in caches:
                kv.crop(c, 20)

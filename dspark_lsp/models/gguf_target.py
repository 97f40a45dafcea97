"""Load a GGUF causal LM with its quantized weights kept quantized (the CPU's fast, exact path).

The model is transformers' own module tree (so the KV cache, attention masks, position ids and hidden
states the engine uses behave as for any HF model), built on the meta device and then given the file's
tensors: every quantized Linear becomes a :class:`~dspark_lsp.quant.linear.QuantLinear`, the embedding a
:class:`~dspark_lsp.quant.linear.QuantEmbedding`, norms and biases stay fp32. Nothing is ever held in
fp32 for the quantized tensors, and an embedding table that is not also the LM head is not held at all
(its rows are read from the file when looked up: ``quant/file_rows.py``), so the 0.5B target holds
~0.52 GB of weights instead of ~2.5 GB. A tensor type the kernel does not support is dequantized to fp32
(one log line names it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dspark_lsp.errors import ModelError
from dspark_lsp.models.lean_forward import use_lean_forward
from dspark_lsp.models.rowwise_attention import use_rowwise_attention
from dspark_lsp.quant import blocks
from dspark_lsp.quant.file_rows import FileRows
from dspark_lsp.quant.gguf_file import GGUFError, GGUFFile, TensorInfo, open_gguf
from dspark_lsp.quant.linear import (
    FusedProjections,
    ProjectionPart,
    QuantEmbedding,
    QuantLinear,
    kernel_layout,
)

# GGUF tensor name -> transformers module path, for the architectures whose tensors map one to one
# (llama-style GGUFs permute q/k rows for rope and would need that undone: not supported here).
_LAYER = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
SUPPORTED_ARCHS = ("qwen2",)


@dataclass
class LoadReport:
    """What the quantized load did, per GGUF tensor type (for logs and `complete --json`)."""

    quantized: dict[str, int] = field(default_factory=dict)  # type name -> tensors kept quantized
    dequantized: dict[str, int] = field(default_factory=dict)  # type name -> tensors loaded as fp32
    weight_bytes: int = 0  # held in memory
    file_bytes: int = 0  # read from the file when looked up (an untied embedding table)

    def summary(self) -> str:
        q = ", ".join(f"{n}×{t}" for t, n in sorted(self.quantized.items()))
        d = ", ".join(f"{n}×{t}" for t, n in sorted(self.dequantized.items()))
        rows = f" (+ {self.file_bytes / 2**20:.0f} MiB of embedding rows read from the file)" if self.file_bytes else ""
        return f"quantized [{q}]" + (f"; fp32 [{d}]" if d else "") + f"; {self.weight_bytes / 2**20:.0f} MiB" + rows


def _hf_path(name: str) -> tuple[str, str]:
    """'blk.3.attn_q.bias' -> ('model.layers.3.self_attn.q_proj', 'bias')."""
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", name)
    if m:
        if m.group(2) not in _LAYER:
            raise ModelError(f"GGUF tensor {name} has no counterpart in the model")
        return f"model.layers.{m.group(1)}.{_LAYER[m.group(2)]}", m.group(3)
    m = re.fullmatch(r"(\w+)\.(weight|bias)", name)
    if m and m.group(1) in _TOP:
        return _TOP[m.group(1)], m.group(2)
    raise ModelError(f"GGUF tensor {name} has no counterpart in the model")


def _type_name(qtype: int) -> str:
    if qtype in blocks.TYPE_NAMES:
        return blocks.TYPE_NAMES[qtype]
    try:
        import gguf

        return str(gguf.GGMLQuantizationType(qtype).name)
    except (ImportError, ValueError):
        return f"type {qtype}"


def _dense(g: GGUFFile, t: TensorInfo) -> torch.Tensor:
    """fp32 values of a GGUF tensor of any type, in the model's orientation (ggml's shape reversed)."""
    raw = g.read(t.name)
    shape = [int(x) for x in reversed(t.shape)]
    if t.qtype == blocks.F32:
        arr = raw.view(np.float32)
    elif t.qtype == blocks.F16:
        arr = raw.view(np.float16).astype(np.float32)
    elif t.qtype == blocks.BF16:
        arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        import gguf
        from gguf.quants import dequantize

        arr = dequantize(raw, gguf.GGMLQuantizationType(t.qtype)).astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(arr).reshape(shape).copy())


def read_gguf(path: Path) -> GGUFFile:
    """The file's header and tensor index, refusing a truncated or corrupt file with a clear error."""
    try:
        return open_gguf(path)
    except GGUFError as exc:
        raise ModelError(str(exc)) from None


def _expected_shape(target: nn.Module) -> tuple[int, ...] | None:
    """The weight shape the module at a tensor's path needs ([out, in] for a Linear), None if it has none."""
    if isinstance(target, nn.Linear):
        return (target.out_features, target.in_features)
    if isinstance(target, nn.Embedding):
        return (target.num_embeddings, target.embedding_dim)
    weight = getattr(target, "weight", None)
    return tuple(weight.shape) if isinstance(weight, torch.Tensor) else None


def _set(model: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, leaf = path.rpartition(".")
    setattr(model.get_submodule(parent_path) if parent_path else model, leaf, module)


def build_quantized_model(
    gguf_path: Path, config: Any, log: Callable[[str], None] | None = None
) -> tuple[nn.Module, LoadReport]:
    """The causal LM of ``config`` with the weights of ``gguf_path``, quantized tensors kept quantized.

    Raises ModelError for a file that is not a GGUF, an unsupported architecture, or tensors that do not
    match the config. The kernel must be loaded (``quant.build.load_kernel``) before the model runs.
    """
    from transformers import AutoModelForCausalLM

    say = log or (lambda _m: None)
    g = read_gguf(gguf_path)
    arch = g.arch
    if arch not in SUPPORTED_ARCHS:
        raise ModelError(f"quantized loading supports {', '.join(SUPPORTED_ARCHS)} GGUF files, not {arch!r}")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    report = LoadReport()
    embedding = _load_tensors(model, g, gguf_path, report, say)
    if "output.weight" not in g.tensors:  # a tied head reads the embedding table
        _tie_head(model, config, embedding, report)
    _finish(model, config)
    return model, report


def _load_tensors(model: nn.Module, g: GGUFFile, gguf_path: Path, report: LoadReport,
                  say: Callable[[str], None]) -> blocks.Packed | None:
    """Every tensor of ``g`` into ``model`` (quantized ones kept quantized); returns the embedding table's
    blocks when they are held in memory (a tied head reads them), else None."""
    tensors = g.tensors
    linears: dict[str, dict[str, Any]] = {}
    for name, t in tensors.items():
        path, what = _hf_path(name)
        linears.setdefault(path, {})[what] = t

    quant: dict[str, tuple[blocks.Packed, torch.Tensor | None]] = {}
    embedding: blocks.Packed | None = None
    for path, parts in linears.items():
        target = model.get_submodule(path)
        wt = parts.get("weight")
        if wt is None:
            raise ModelError(f"GGUF file has a bias for {path} but no weight")
        qtype = wt.qtype
        tname = _type_name(qtype)
        bias = _dense(g, parts["bias"]) if "bias" in parts else None
        if isinstance(target, nn.Linear | nn.Embedding) and qtype in blocks.QUANTIZED:
            n, k = wt.rows_cols
            expected = _expected_shape(target)
            if (n, k) != expected:
                raise ModelError(f"GGUF tensor {wt.name} is [{n}, {k}], the model expects {list(expected or ())}")
            report.quantized[tname] = report.quantized.get(tname, 0) + 1
            if isinstance(target, nn.Embedding) and "output.weight" in tensors:
                # Its own table, not also the head's: a lookup reads its few rows from the file (146 MB
                # of the default target that need not be resident; quant/file_rows.py).
                report.file_bytes += wt.nbytes
                _set(model, path, QuantEmbedding(rows=FileRows(gguf_path, wt)))
                continue
            packed = blocks.pack_tensor(g.read(wt.name), qtype, n, k)
            if isinstance(target, nn.Linear):
                # The products' layout now, so the row-major arrays go at once (not all at the end:
                # the load's peak memory would hold every weight twice).
                laid = kernel_layout(packed)
                report.weight_bytes += laid.nbytes  # what the products read (compact panels are smaller)
                quant[path] = (laid, bias)
            else:
                report.weight_bytes += packed.nbytes
                embedding = packed
                _set(model, path, QuantEmbedding(packed))
            continue
        _load_dense(model, path, target, _dense(g, wt), wt, bias, tname, report, say)
    _place_linears(model, quant)
    return embedding


def _tie_head(model: nn.Module, config: Any, embedding: blocks.Packed | None, report: LoadReport) -> None:
    """The LM head of a file without ``output.weight``: the embedding table's weights."""
    if embedding is not None:  # the same arrays (QuantLinear's tensors share the numpy memory)
        table = kernel_layout(embedding)
        report.weight_bytes += table.nbytes - embedding.nbytes
        model.lm_head = QuantLinear(table)
        if table is not embedding:  # the head's panel layout: the lookups read those arrays too
            _set(model, "model.embed_tokens", QuantEmbedding(table))
    else:
        lin = nn.Linear(config.hidden_size, config.vocab_size, bias=False, device="cpu")
        lin.weight = model.get_submodule("model.embed_tokens").weight  # type: ignore[assignment]
        model.lm_head = lin


def _finish(model: nn.Module, config: Any) -> None:
    """What the meta build left: rotary buffers, a check that every weight arrived, inference settings."""
    # Buffers the meta build left empty (rotary frequencies): rebuild those modules on the CPU.
    for path, module in list(model.named_modules()):
        if any(b.is_meta for b in module.buffers(recurse=False)) and "rotary" in type(module).__name__.lower():
            _set(model, path, type(module)(config=config))
    left = [n for n, p in list(model.named_parameters()) + list(model.named_buffers()) if p.is_meta]
    if left:
        raise ModelError(f"GGUF file lacks tensors the model needs: {', '.join(left[:4])}")
    model.eval()
    model.requires_grad_(False)
    # The quantized layers are batch invariant; with row-wise attention so is the whole forward.
    use_rowwise_attention(model)
    # The same operations without transformers' per-forward machinery (bit-identical results).
    use_lean_forward(model)


# Projections that read the same input in transformers' Qwen2 layers, fused into one kernel call each:
# fewer, larger calls stream the weights faster (a call costs ~25 us of overhead on 2 cores).
_FUSE = (("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj")))


def _place_linears(model: nn.Module, quant: dict[str, tuple[blocks.Packed, torch.Tensor | None]]) -> None:
    """Put QuantLinears where the quantized Linears were, fusing same-input projections when their
    layouts allow (otherwise each stays its own call). Consumes ``quant``: a fused part's arrays are
    dropped as soon as its group exists (load-time peak memory)."""
    for path in list(quant):
        owner, _, leaf = path.rpartition(".")
        for group_owner, names in _FUSE:
            paths = [f"{owner}.{n}" for n in names]
            if not owner.endswith(group_owner) or leaf not in names or any(p not in quant for p in paths):
                continue
            packed = blocks.concat_rows([quant[p][0] for p in paths])
            if packed is None:
                continue
            biases = [quant[p][1] for p in paths]
            bias = None
            if any(b is not None for b in biases):
                bias = torch.cat([b if b is not None else torch.zeros(quant[p][0].n) for b, p in zip(biases, paths,
                                                                                                    strict=True)])
            group = FusedProjections(QuantLinear(packed, bias), [quant[p][0].n for p in paths])
            for p in paths:
                del quant[p]
            parent = model.get_submodule(owner)
            parent.add_module("fused_" + "_".join(n.split("_")[0] for n in names), group)
            for i, n in enumerate(names):
                setattr(parent, n, ProjectionPart(group, i))
    for path, (packed, bias) in quant.items():
        _set(model, path, QuantLinear(packed, bias))


def _load_dense(model: nn.Module, path: str, target: nn.Module, dense: torch.Tensor, wt: TensorInfo,
                bias: torch.Tensor | None, tname: str, report: LoadReport, say: Callable[[str], None]) -> None:
    """A tensor kept in fp32: float types as they are, quantized types the kernel lacks dequantized."""
    expected = _expected_shape(target)
    if expected is None or tuple(dense.shape) != expected:
        raise ModelError(f"GGUF tensor {wt.name} is {list(dense.shape)}, {path} of the model expects "
                         f"{list(expected or ())}")
    if wt.qtype not in (blocks.F32, blocks.F16, blocks.BF16):
        say(f"GGUF tensor {wt.name}: type {tname} is not supported by the quantized kernel; loaded as fp32")
        report.dequantized[tname] = report.dequantized.get(tname, 0) + 1
    report.weight_bytes += dense.numel() * 4
    if isinstance(target, nn.Linear):
        lin = nn.Linear(target.in_features, target.out_features, bias=bias is not None, device="cpu")
        lin.weight = nn.Parameter(dense, requires_grad=False)
        if bias is not None:
            lin.bias = nn.Parameter(bias, requires_grad=False)
        _set(model, path, lin)
    elif isinstance(target, nn.Embedding):
        emb = nn.Embedding(target.num_embeddings, target.embedding_dim, device="cpu")
        emb.weight = nn.Parameter(dense, requires_grad=False)
        _set(model, path, emb)
    else:  # a norm
        target.weight = nn.Parameter(dense, requires_grad=False)


def is_quantized(model: nn.Module) -> bool:
    return any(isinstance(m, QuantLinear | QuantEmbedding) for m in model.modules())


def weights_kind(model: nn.Module) -> str:
    """What the model computes with, for stats and reports: "gguf" (its GGUF's quantized blocks) or the
    torch dtype of its parameters ("float32", "bfloat16", ...)."""
    if is_quantized(model):
        return "gguf"
    param = next(model.parameters(), None)
    return "float32" if param is None else str(param.dtype).removeprefix("torch.")

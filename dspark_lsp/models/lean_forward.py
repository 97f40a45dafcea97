"""A direct forward for the quantized Qwen2 target: the same operations as transformers', less machinery.

Measured on the 0.5B with the quantized kernel (2 cores): of a one-token forward, ~10 ms went to what no op
accounts for — mask construction, cache and attention dispatch, output capturing hooks, decorators, the
fused projections' bookkeeping — against ~25 ms of matmuls. This module walks the same modules in the same
order and calls the same tensor operations (RMSNorm, rotary, the row-wise attention, SiLU), so its
logits and hidden states equal transformers' forward bit for bit (tested), but with one fused kernel call
per projection group and no per-forward mask for decode and verify rows. When every layer's products are
the kernel's, decode and verify rows run each layer as one C++ op instead (``NativeLayer``), equal to
this to fp32 rounding.

Only what the engine asks of a target is handled here (input ids, a KV cache, ``logits_to_keep``,
``output_hidden_states``, an explicit 4-D mask and position ids for tree rows); any other argument, a
sliding-window or non-SiLU config, or a layer layout this does not know falls back to transformers' own
forward, so nothing is ever computed differently, only sooner.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dspark_lsp.engine.interrupt import check_interrupt
from dspark_lsp.models.rowwise_attention import ROWWISE_MAX, allowed_keys, rowwise_attention_forward
from dspark_lsp.quant.linear import FusedProjections, ProjectionPart, QuantLinear

Projector = Callable[[torch.Tensor], list[torch.Tensor]]
Linear = Callable[[torch.Tensor], torch.Tensor]


def _direct(module: nn.Module) -> Linear:
    """A quantized Linear's product without nn.Module's call overhead (unless someone hooked the module:
    then through its call, so the hooks fire); any other module as it is."""
    if not isinstance(module, QuantLinear):
        return module
    run = module.run

    def call(x: torch.Tensor) -> torch.Tensor:
        if module._forward_hooks or module._forward_pre_hooks:
            return module(x)  # type: ignore[no-any-return]
        return run(x)

    return call


def _output_cache_field() -> str:
    import dataclasses

    from transformers.modeling_outputs import CausalLMOutputWithPast

    names = {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
    return "cache" if "cache" in names else "past_key_values"  # renamed in transformers 5.x


_HANDLED = frozenset({"input_ids", "cache", "past_key_values", "use_cache", "logits_to_keep",
                      "output_hidden_states", "attention_mask", "position_ids", "return_dict"})


def _projector(owner: Any, names: tuple[str, ...]) -> Projector:
    """One call giving each named projection's output: a single kernel call when they are the parts of one
    fused group, else each module in turn (the results are the same either way)."""
    group = _fused_group(owner, names)
    if group is not None:
        fused, bounds = _direct(group.fused), group.bounds

        def run_fused(x: torch.Tensor) -> list[torch.Tensor]:
            y = fused(x)
            return [y[..., lo:hi] for lo, hi in bounds]

        return run_fused
    calls = [_direct(getattr(owner, n)) for n in names]
    return lambda x: [c(x) for c in calls]


def _fused_group(owner: Any, names: tuple[str, ...]) -> FusedProjections | None:
    """The fused group whose parts, in order, are exactly ``owner``'s projections ``names``, else None."""
    mods = [getattr(owner, n) for n in names]
    if not all(isinstance(m, ProjectionPart) for m in mods):
        return None
    group: FusedProjections = object.__getattribute__(mods[0], "_group")
    if any(object.__getattribute__(m, "_group") is not group for m in mods):
        return None
    return group if [m.index for m in mods] == list(range(len(group.bounds))) else None


def _rms(x: torch.Tensor, norm: Any) -> torch.Tensor:
    # Qwen2RMSNorm's exact sequence (fp32 in, so its dtype casts are no-ops).
    return norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))


def _prompt_mask(t: int, past: int) -> torch.Tensor | None:
    """Many rows after cached ones (a prompt's new part): sdpa's own causal flag aligns to the top left,
    so say which keys each row may see (row i: everything up to its own position). None otherwise."""
    if t <= ROWWISE_MAX or not past:
        return None
    keys = torch.arange(past + t)
    return (keys[None, :] <= (torch.arange(t) + past)[:, None])[None, None]


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # apply_rotary_pos_emb's exact sequence: x * cos + rotate_half(x) * sin.
    half = x.shape[-1] // 2
    return (x * cos) + (torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin)


class NativeLayer:
    """A layer whose products are all the quantized kernel's (no dense fallbacks): one call of
    ``torch.ops.dspark_q.decoder_layer`` runs it for decode and verify rows (quant/decoder_layer.cpp: the
    same computation as the Python path, its row operations and attention as loops of its own, so equal
    to fp32 rounding rather than bit for bit; batch invariant). q/k/v come as one fused product or, when
    their layouts do not fuse (the 1.5B's v is Q6_K where q/k are Q4_K in half its layers), as three the
    op runs in turn and joins; gate/up likewise as one or two."""

    def __init__(self, layer: Any, qkv: tuple[QuantLinear, ...], o: QuantLinear, gate_up: tuple[QuantLinear, ...],
                 down: QuantLinear, heads: int, kv_heads: int, head_dim: int) -> None:
        self.layer, self.qkv, self.gate_up = layer, qkv, gate_up
        self.parts: tuple[QuantLinear, ...] = (*qkv, o, *gate_up, down)
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.eps = float(layer.input_layernorm.variance_epsilon)
        self.scaling = float(layer.self_attn.scaling)
        self.norms = (layer.input_layernorm, layer.post_attention_layernorm)
        self._operands: tuple[tuple[Any, ...], list[torch.Tensor], list[int]] | None = None

    @property
    def fused(self) -> bool:
        """q/k/v and gate/up are one product each."""
        return len(self.qkv) == 1 and len(self.gate_up) == 1

    def hooked(self) -> bool:
        """Someone hooked one of the layer's products: the Python path calls hooked modules as modules."""
        return any(p._forward_hooks or p._forward_pre_hooks for p in self.parts)

    def operands(self) -> tuple[list[torch.Tensor], list[int]]:
        # Built again whenever a module's tensors were rebound since the last call (``model.to(...)``
        # rebinds the kernel operands, QuantLinear._bind), else the lists of the last call: assembling
        # them was ~1 ms of Python per forward.
        key = (*(p.__dict__["_op_args"] for p in self.parts), *(p.__dict__["_bias"] for p in self.parts),
               *(n._parameters["weight"] for n in self.norms))  # not through Module.__getattr__
        last = self._operands
        if last is not None and len(last[0]) == len(key) and all(a is b for a, b in zip(last[0], key, strict=True)):
            return last[1], last[2]
        weights, meta = self._assemble()
        self._operands = (key, weights, meta)
        return weights, meta

    def _assemble(self) -> tuple[list[torch.Tensor], list[int]]:
        # The op's layout (decoder_layer.cpp): norm1, q/k/v operands, their joined bias, o, norm2, gate/up
        # operands, down; meta: each operand's (kind, shift), the shapes, then the two groups' sizes.
        weights: list[torch.Tensor] = [self.layer.input_layernorm.weight]
        meta: list[int] = []

        def add(part: QuantLinear) -> None:
            kind, codes, scale, off, shift, _small = part.__dict__["_op_args"]
            weights.extend((codes, scale, off))
            meta.extend((kind, shift))

        for part in self.qkv:
            add(part)
        biases = [p.__dict__["_bias"] for p in self.qkv]
        if all(b is None for b in biases):
            weights.append(torch.empty(0))
        else:  # as the fused group's bias: zeros for a part without one
            weights.append(torch.cat([torch.zeros(p.out_features) if b is None else b
                                      for p, b in zip(self.qkv, biases, strict=True)]).contiguous())
        add(self.parts[len(self.qkv)])  # o
        weights.append(self.layer.post_attention_layernorm.weight)
        for part in self.gate_up:
            add(part)
        add(self.parts[-1])  # down
        meta += [self.heads, self.kv_heads, self.head_dim, self.parts[0].small_m, len(self.qkv), len(self.gate_up)]
        return weights, meta

    @staticmethod
    def plan(layer: Any, heads: int, kv_heads: int, head_dim: int, unfused: bool = False) -> NativeLayer | None:
        """The layer's native plan, or None where the op cannot run it (a dense product, a bias where the
        op takes none, shapes it does not know). ``unfused``: also for q/k/v or gate/up as separate products."""
        attn, mlp = layer.self_attn, layer.mlp
        q, kv = heads * head_dim, kv_heads * head_dim
        qkv: tuple[QuantLinear, ...] | None = None
        group = _fused_group(attn, ("q_proj", "k_proj", "v_proj"))
        if group is not None:
            if group.bounds == [(0, q), (q, q + kv), (q + kv, q + 2 * kv)]:
                qkv = (group.fused,)
        elif unfused:
            mods = (attn.q_proj, attn.k_proj, attn.v_proj)
            if all(isinstance(m, QuantLinear) for m in mods) and [m.out_features for m in mods] == [q, kv, kv]:
                qkv = mods
        gate_up: tuple[QuantLinear, ...] | None = None
        group = _fused_group(mlp, ("gate_proj", "up_proj"))
        if group is not None:
            inter = group.fused.out_features // 2
            if group.bounds == [(0, inter), (inter, 2 * inter)] and group.fused.bias is None:
                gate_up = (group.fused,)
        elif unfused:
            gu = (mlp.gate_proj, mlp.up_proj)
            if all(isinstance(m, QuantLinear) and m.bias is None for m in gu) \
                    and gu[0].out_features == gu[1].out_features:
                gate_up = gu
        o, down = attn.o_proj, mlp.down_proj
        if qkv is None or gate_up is None or not isinstance(o, QuantLinear) or not isinstance(down, QuantLinear):
            return None
        if o.bias is not None or down.bias is not None:
            return None
        if layer.input_layernorm.variance_epsilon != layer.post_attention_layernorm.variance_epsilon:
            return None
        if len({p.small_m for p in (*qkv, o, *gate_up, down)}) != 1:
            return None
        return NativeLayer(layer, qkv, o, gate_up, down, heads, kv_heads, head_dim)


def native_unfused_default() -> bool:
    """Whether layers whose q/k/v or gate/up did not fuse run natively too (``DSPARK_NATIVE_UNFUSED=0``
    keeps them on the Python layer loop).

    On by default: the 1.5B's GGUF has v in Q6_K beside q/k in Q4_K in half its layers, so nothing of it
    fused and all 28 layers ran the Python loop, 1.2-1.25x slower a token (issue 32). The C++ layer is
    transformers' forward to fp32 rounding, as it already is for every model that fuses (the 0.5B), and
    batch invariant like the Python loop, so speculative output still equals one-token decoding; the
    Python loop is transformers' bit for bit (tests/quant/test_quant_model.py holds it to that)."""
    return os.environ.get("DSPARK_NATIVE_UNFUSED", "1") != "0"


class LeanQwen2:
    """The per-model plan (projection groups, shapes) and the forward that uses it."""

    def __init__(self, model: Any, native_unfused: bool | None = None) -> None:
        # model: a transformers Qwen2ForCausalLM (untyped attributes); native_unfused: see
        # native_unfused_default, which None reads.
        cfg = model.config
        if native_unfused is None:
            native_unfused = native_unfused_default()
        self.model = model
        self.hf_forward: Callable[..., Any] = model.forward
        self.layers: list[tuple[Any, Projector, Linear, Projector, Linear]] = []
        for layer in model.model.layers:
            self.layers.append((layer, _projector(layer.self_attn, ("q_proj", "k_proj", "v_proj")),
                                _direct(layer.self_attn.o_proj), _projector(layer.mlp, ("gate_proj", "up_proj")),
                                _direct(layer.mlp.down_proj)))
        self.head = _direct(model.lm_head)
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        plans = [NativeLayer.plan(layer, cfg.num_attention_heads, cfg.num_key_value_heads, self.head_dim,
                                  unfused=native_unfused) for layer in model.model.layers]
        # All layers or none: a forward either runs every layer natively or every layer in Python.
        native = [p for p in plans if p is not None]
        self.native: list[NativeLayer] | None = native if len(native) == len(plans) else None
        self.cache_field = _output_cache_field()

    def __call__(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> Any:
        if input_ids is None or input_ids.dim() != 2 or input_ids.shape[0] != 1 or set(kwargs) - _HANDLED \
                or kwargs.get("use_cache") is False or kwargs.get("return_dict") is False or torch.is_grad_enabled():
            return self.hf_forward(input_ids=input_ids, **kwargs)
        from transformers import DynamicCache
        from transformers.modeling_outputs import CausalLMOutputWithPast

        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if cache is None:
            cache = DynamicCache(config=self.model.config)
        mask = kwargs.get("attention_mask")
        if mask is not None and mask.dim() != 4:  # a 2-D padding mask: transformers builds the real one
            return self.hf_forward(input_ids=input_ids, **kwargs)
        inner = self.model.model
        t = input_ids.shape[1]
        past = int(cache.get_seq_length())
        positions = kwargs.get("position_ids")
        if positions is None:
            positions = (torch.arange(t) + past).unsqueeze(0)
        if mask is None:
            mask = _prompt_mask(t, past)

        h = inner.embed_tokens(input_ids)
        cos, sin = inner.rotary_emb(h, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        want_hidden = bool(kwargs.get("output_hidden_states"))
        hidden: list[torch.Tensor] = [h] if want_hidden else []
        layer_caches = getattr(cache, "layers", None)
        if self.native is not None and t <= ROWWISE_MAX and layer_caches is not None \
                and len(layer_caches) == len(self.native) and all(hasattr(c, "reserve") for c in layer_caches) \
                and not any(plan.hooked() for plan in self.native):
            h = self._native_layers(h, t, cos, sin, layer_caches, mask, hidden if want_hidden else None)
        else:
            h = self._python_layers(h, t, cos, sin, cache, mask, hidden if want_hidden else None)
        h = _rms(h, inner.norm)
        if want_hidden:
            hidden[-1] = h  # as transformers reports it: the last entry is the normed output the head reads
        keep = int(kwargs.get("logits_to_keep") or 0)
        logits = self.head(h[:, -keep:] if keep else h)
        out = CausalLMOutputWithPast(logits=logits, hidden_states=tuple(hidden) if want_hidden else None)
        out[self.cache_field] = cache  # a ModelOutput is also a dict: the field by its name in this release
        return out

    def _native_layers(self, h: torch.Tensor, t: int, cos: torch.Tensor, sin: torch.Tensor, layer_caches: list[Any],
                       mask: torch.Tensor | None, hidden: list[torch.Tensor] | None) -> torch.Tensor:
        assert self.native is not None
        # The keys each row may see, once per forward (the mask is the same in every layer).
        row_keys = [] if mask is None else [allowed_keys(mask, i) for i in range(t)]
        op = torch.ops.dspark_q.decoder_layer.default
        first = self.native[0]
        like = h.new_empty((1, first.kv_heads, 0, first.head_dim))
        for plan, layer_cache in zip(self.native, layer_caches, strict=True):
            k_buf, v_buf, past = layer_cache.reserve(t, like, like)
            weights, meta = plan.operands()
            h = op(h, weights, meta, plan.eps, plan.scaling, cos, sin, k_buf, v_buf, past, row_keys)
            layer_cache.advance(t)
            if hidden is not None:
                hidden.append(h)
        return h

    def resume(self, h: torch.Tensor, first: int, cache: Any, keep: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Finish a forward that stopped before layer ``first`` (engine/interrupt.py): ``h`` [1, t, d] is
        what entered that layer, whose cache and every later one's lack these rows while the earlier
        layers' caches hold them. Returns the logits of the last ``keep`` rows (0: all) and the normed
        hidden states the head read, as a whole forward of the same rows would have."""
        inner = self.model.model
        t = h.shape[1]
        past = int(cache.layers[first].get_seq_length())
        cos, sin = inner.rotary_emb(h, (torch.arange(t) + past).unsqueeze(0))
        h = self._python_layers(h, t, cos.unsqueeze(1), sin.unsqueeze(1), cache, _prompt_mask(t, past), None,
                                first=first)
        h = _rms(h, inner.norm)
        return self.head(h[:, -keep:] if keep else h), h

    def _python_layers(self, h: torch.Tensor, t: int, cos: torch.Tensor, sin: torch.Tensor, cache: Any,
                       mask: torch.Tensor | None, hidden: list[torch.Tensor] | None, first: int = 0) -> torch.Tensor:
        hd = self.head_dim
        for i in range(first, len(self.layers)):
            layer, qkv, o_proj, gate_up, down_proj = self.layers[i]
            # A prompt's slice no longer wanted stops here, handing over what layer i would have read
            # so the slice can be finished later from this layer (engine/interrupt.py, engine/resume.py).
            check_interrupt(i, h)
            attn = layer.self_attn
            q, k, v = qkv(_rms(h, layer.input_layernorm))
            q = q.view(1, t, -1, hd).transpose(1, 2)
            k = k.view(1, t, -1, hd).transpose(1, 2)
            v = v.view(1, t, -1, hd).transpose(1, 2)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            k, v = cache.update(k, v, i)
            a, _ = rowwise_attention_forward(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling,
                                             sliding_window=None)
            h = h + o_proj(a.reshape(1, t, -1).contiguous())
            g, u = gate_up(_rms(h, layer.post_attention_layernorm))
            h = h + down_proj(F.silu(g) * u)
            if hidden is not None:
                hidden.append(h)
        return h


def supports_lean_forward(model: nn.Module) -> bool:
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "qwen2" or getattr(cfg, "hidden_act", None) != "silu":
        return False
    if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or ()):
        return False
    rope = getattr(cfg, "rope_parameters", None) or {}
    return rope.get("rope_type", "default") == "default" and hasattr(model, "model") and hasattr(model, "lm_head")


def use_lean_forward(model: nn.Module) -> bool:
    """Make ``model(...)`` take the direct path (when its config is one this module knows); True if it did."""
    if not supports_lean_forward(model):
        return False
    lean = LeanQwen2(model)
    model.__dict__["dspark_lean"] = lean  # the plan, for tests and reports (which layers run natively)
    # An instance attribute: nn.Module.__call__ looks `forward` up on the instance first, and the class's
    # signature (which the engine inspects for keyword names) stays transformers'.
    model.forward = types.MethodType(lambda _self, *a, **kw: lean(*a, **kw), model)  # type: ignore[method-assign]
    return True

"""Attention whose rows do not depend on how many queries share the forward.

torch's CPU attention kernels block the query rows, so a k-row query rounds differently (by ~1e-8) from
k one-row queries; the quantized layers are batch invariant (quant/qkernel.cpp), and this makes the rest
of the model so: up to ``ROWWISE_MAX`` query rows, each row is its own one-query attention over exactly
the keys its mask allows, which is the call a one-token decode makes. A k-token verify forward then gives
the logits of k one-token forwards bit for bit, and speculative output equals one-token decoding however
close a tie. Longer forwards (prefill) take the stock path at once. Cost: one attention call per row (on
the 0.5B, ~1 ms more for a 5-token verify forward).
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "dspark_rowwise"
ROWWISE_MAX = 16
_registered = False


def allowed_keys(mask: torch.Tensor, row: int) -> torch.Tensor:
    """Key positions row ``row`` may attend to, from a bool (True = attend) or additive float mask."""
    m = mask[0, 0, row] if mask.dim() == 4 else mask[row]
    keep = m if m.dtype == torch.bool else m == 0
    return torch.nonzero(keep, as_tuple=False).flatten()


def rowwise_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q_len, kv_len = query.shape[2], key.shape[2]
    if q_len == 1 or q_len > ROWWISE_MAX or query.shape[0] != 1:
        if q_len == 1 and attention_mask is not None:
            # One row: its own keys, as below (a mask may still exclude some, e.g. a tree row).
            idx = allowed_keys(attention_mask, 0)
            if idx.numel() != kv_len:
                key, value = key.index_select(2, idx), value.index_select(2, idx)
            attention_mask = None
        out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return out, None
    rows = []
    for i in range(q_len):
        if attention_mask is None:  # plain causal: the keys up to this row's own position
            n = kv_len - q_len + i + 1
            k_i, v_i = key[:, :, :n], value[:, :, :n]
        else:
            idx = allowed_keys(attention_mask, i)
            n = int(idx.numel())
            if n and int(idx[-1]) == n - 1:  # a prefix: a view, no copy
                k_i, v_i = key[:, :, :n], value[:, :, :n]
            else:
                k_i, v_i = key.index_select(2, idx), value.index_select(2, idx)
        out, _ = sdpa_attention_forward(module, query[:, :, i : i + 1], k_i, v_i, None, **{**kwargs, "is_causal": False})
        rows.append(out)
    return torch.cat(rows, dim=1), None


def use_rowwise_attention(model: Any) -> None:
    """Register the implementation (once) and switch ``model`` to it."""
    global _registered
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if not _registered:
        AttentionInterface.register(NAME, rowwise_attention_forward)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        _registered = True
    setter = getattr(model, "set_attn_implementation", None)
    if callable(setter):
        try:
            setter(NAME)
            return
        except (ValueError, TypeError, AttributeError):
            pass
    model.config._attn_implementation = NAME

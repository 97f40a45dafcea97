"""Our own fp32 weights (the trained drafts) in the quantized kernel's int8 layout.

Why: a draft's weights only shape its guesses — the target verifies every token, so output is unchanged
by how the draft rounds. On this project's CPU without native bf16 the feature draft ran its 18.7M fp32
weights (75 MB) per step, ~7.6 ms against a ~30 ms quantized target forward, which made drafting more than
one token rarely pay. In the kernel's kind-8 layout (one int8 code per weight, one fp32 scale per 32 —
the Q8_0 recipe: scale = max |w| / 127 per group) the same layer streams 21 MB.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dspark_lsp.quant.blocks import Q8_0, QK, Packed
from dspark_lsp.quant.linear import QuantLinear


def q8_packed(weight: torch.Tensor) -> Packed:
    """``weight`` [n, k] (k a multiple of 32) as int8 codes and a scale per 32 consecutive inputs."""
    w = weight.detach().float().cpu().numpy()
    n, k = w.shape
    if k % QK:
        raise ValueError(f"in_features {k} is not a multiple of {QK}")
    groups = w.reshape(n, k // QK, QK)
    scale = (np.abs(groups).max(axis=-1) / 127.0).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1.0))  # an all-zero group: codes 0, scale 0
    codes = np.clip(np.rint(groups / safe[..., None]), -127, 127).astype(np.int8)
    return Packed(8, np.ascontiguousarray(codes), scale, np.zeros(0, np.float32), 0, n, k, Q8_0)


def quantize_linears(model: nn.Module) -> int:
    """Replace every fp32/bf16 ``nn.Linear`` of ``model`` whose input width is a multiple of 32 by a
    :class:`QuantLinear` over :func:`q8_packed` weights; returns how many were replaced. The kernel
    must be loaded (``quant.build.load_kernel``)."""
    swaps: list[tuple[nn.Module, str, nn.Linear]] = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is nn.Linear and child.in_features % QK == 0 and child.weight.device.type == "cpu":
                swaps.append((parent, name, child))
    for parent, name, lin in swaps:
        setattr(parent, name, QuantLinear(q8_packed(lin.weight), lin.bias))
    return len(swaps)

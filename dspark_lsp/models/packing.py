"""Pre-packed CPU linear layers: what makes verifying several tokens cost what verifying one does.

Measured on this project's 2-core AMD EPYC CI machine with the default target in fp32 (one forward on a
128-token cache, ms): stock ``nn.Linear`` 183 / 373 / 351 / 301 for 1 / 2 / 4 / 8 tokens, because MKL's
sgemm re-packs every weight matrix on every call when M is tiny; with the weights reordered once into
oneDNN's blocked layout 113 / 132 / 110 / 114. A flat verify curve is the premise of speculative
decoding (docs/KERNEL.md), so on CPU we pack at load time. The numbers stay fp32 numbers: the packed and the
stock layer differ by float rounding only (about 2e-5 on the logits, the same size as the difference
between a one-token and a six-token forward of the stock model).
"""

from __future__ import annotations

import torch
from torch import nn

PACK_MODES: tuple[str, ...] = ("auto", "on", "off")

# The layout is chosen for this many rows; any row count works, this one is the common verify size.
BATCH_HINT = 8
_PACKABLE_DTYPES = (torch.float32, torch.bfloat16)


def packing_available() -> bool:
    """True when this torch build has oneDNN and its prepacked linear ops (all x86 CPU wheels do)."""
    if not torch.backends.mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    return hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")


class PackedLinear(nn.Module):
    """Inference-only stand-in for ``nn.Linear`` holding its weight in oneDNN's blocked layout."""

    def __init__(self, linear: nn.Linear, batch_hint: int = BATCH_HINT) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        weight = linear.weight.detach()
        self.dtype = weight.dtype
        # Buffers, not parameters: nothing trains these, and .to()/state_dict still see them.
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight, batch_hint))
        bias = None if linear.bias is None else linear.bias.detach().clone()
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        if flat.dtype != self.dtype:
            flat = flat.to(self.dtype)
        out = torch.ops.mkldnn._linear_pointwise(flat.contiguous(), self.packed_weight, self.bias, "none", [], "")
        return out.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed=oneDNN"


def _should_pack(model: nn.Module, mode: str) -> bool:
    if mode not in PACK_MODES:
        raise ValueError(f"pack must be one of {', '.join(PACK_MODES)}, not {mode!r}")
    if mode == "off":
        return False
    param = next(model.parameters(), None)
    if not packing_available():
        why = "oneDNN prepacked linear ops are missing from this torch build"
    elif param is None or param.device.type != "cpu" or param.dtype not in _PACKABLE_DTYPES:
        why = "only fp32/bf16 models on the CPU can be packed"
    else:
        return True
    if mode == "on":
        raise ValueError(f"cannot pack weights: {why}")
    return False


def pack_linears(model: nn.Module, mode: str = "auto", batch_hint: int = BATCH_HINT) -> int:
    """Replace every ``nn.Linear`` of ``model`` by a :class:`PackedLinear`; returns how many were replaced.

    ``auto`` packs on the CPU when the ops exist and leaves GPU models alone; ``on`` insists (ValueError
    when impossible); ``off`` does nothing. A tied output head (Qwen ties it to the embedding) gets its
    own packed copy, which costs vocab x hidden more memory (0.54 GB for the default target in fp32).
    """
    if not _should_pack(model, mode):
        return 0
    replaced = 0
    with torch.no_grad():
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    try:
                        packed = PackedLinear(child, batch_hint)
                    except RuntimeError as exc:
                        # oneDNN refuses some dtypes on some CPUs (bf16 reorder needs AVX512-BW/VL/DQ or
                        # AVX-NE-CONVERT; seen on an AVX2-only EPYC): leave the model as it is.
                        if mode == "on" or replaced:
                            raise ValueError(f"cannot pack weights: {str(exc).splitlines()[0]}") from None
                        return 0
                    setattr(parent, name, packed)
                    replaced += 1
    return replaced


def is_packed(model: nn.Module) -> bool:
    return any(isinstance(m, PackedLinear) for m in model.modules())

"""torch modules over the kernel's layout: a quantized Linear and a quantized Embedding.

Both compute with the GGUF file's exact fp32 weight values (see ``blocks``); neither keeps an fp32 copy.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from torch import nn

from dspark_lsp.quant.blocks import PANEL, Q6_K, Packed, can_compact, can_half, half_scales, interleave
from dspark_lsp.quant.file_rows import FileRows

# Up to this many rows a product runs as batch-invariant dot products (decode and verify forwards);
# above it, as tiles of expanded rows into a GEMM (prefill), which is faster for many rows but rounds
# differently. Verify forwards are at most k_max + 1 + alternates (<= 12) rows wide.
SMALL_M = 32


class _KernelOp:
    """``torch.ops.dspark_q.qmm`` resolved on first use (the library is loaded by quant.build, after import)."""

    op: Any = None

    def __call__(self, *args: Any) -> torch.Tensor:
        if self.op is None:
            self.op = torch.ops.dspark_q.qmm.default  # the overload itself: skips the packet's dispatch
        return self.op(*args)  # type: ignore[no-any-return]


_QMM = _KernelOp()

ENV_PANELS = "DSPARK_PANELS"  # 0: keep the row-major layout (A/B comparisons, debugging)


def panels_enabled() -> bool:
    """Whether new QuantLinears take the panel layout: the kernel has its products and it is not off."""
    if os.environ.get(ENV_PANELS, "1") == "0":
        return False
    try:
        return bool(torch.ops.dspark_q.panels())
    except (AttributeError, RuntimeError):  # the kernel is not loaded (or an older build): row-major
        return False


# 0: K-quant panels keep an fp32 scale (and offset) per group instead of the file's integer sub-block
# scales and per-256 factors (blocks.interleave's ``compact``; A/B comparisons, debugging).
ENV_COMPACT = "DSPARK_COMPACT_SCALES"


def compact_enabled() -> bool:
    return os.environ.get(ENV_COMPACT, "1") != "0"


# 1: compact Q6_K panels keep 6-bit codes (kind 16, blocks.pack_six) instead of a byte a code; 0: a byte;
# auto (the default): 6 bits on builds with VNNI, int8 activations on (AVX2 builds run them through the
# int8 products too, but were no faster at the verify's 2-4 tokens on a Zen 3, docs/KERNEL.md).
# There the 1.5B's forward reads 970 MiB instead of 1,073 and ran 0.89 / 0.94 / 0.94 / 1.02x the byte
# codes' time at 1 / 2 / 4 / 8 tokens, the 0.5B 0.97-1.00x (docs/KERNEL.md, "6-bit Q6_K codes"); with
# int16 products the extra instructions made 8-token forwards 1.04-1.06x slower.
ENV_SIX = "DSPARK_Q6K_6BIT"
SIX_DEFAULT = "auto"


def six_enabled() -> bool:
    want = os.environ.get(ENV_SIX, SIX_DEFAULT)
    if want != "auto":
        return want != "0"
    return act8_requested() and act8_available() and _act8_vnni()


def _act8_vnni() -> bool:
    try:
        return bool(torch.ops.dspark_q.act8_vnni())
    except (AttributeError, RuntimeError):  # the kernel is not loaded
        return False


# 1: panels of Q8_0, Q5_0 and Q4_0 keep the file's fp16 scales (blocks.half_scales); 0: fp32 scales.
ENV_HALF = "DSPARK_HALF_SCALES"
HALF_DEFAULT = "1"


def half_enabled() -> bool:
    if os.environ.get(ENV_HALF, HALF_DEFAULT) == "0":
        return False
    try:
        return bool(torch.ops.dspark_q.half_scales())
    except (AttributeError, RuntimeError):  # the kernel is not loaded (or an older build)
        return False


# 1: decode and verify products of panels round activations to int8 (qkernel.cpp "int8 activations":
# vpdpbusd with VNNI, vpmaddubsw on AVX2 without it; the same bits either way) instead of int16; row-major
# matrices and 6-bit Q6_K panels keep int16, and so do builds without AVX2.
# On by default since measured (bench/results/2026-12-06-act8/, -act8-eval/): the 1.5B's 4-token verify
# 1.56-1.65x -> 1.33-1.34x a 1-token forward, no width slower on either model; on 90 HumanEval holes the
# 1.5B's texts all the same, the 0.5B's 4 differ (one pass fewer). Read when a model loads
# (models.loader) or whenever apply_act8() is called. Process-wide, like the prefill switch.
ENV_ACT8 = "DSPARK_ACT8"
ACT8_DEFAULT = "1"


def act8_requested() -> bool:
    return os.environ.get(ENV_ACT8, ACT8_DEFAULT) not in ("", "0")


def act8_available() -> bool:
    """Whether the loaded kernel build has the int8-activation products (x86 with AVX2)."""
    try:
        return bool(torch.ops.dspark_q.act8_available())
    except (AttributeError, RuntimeError):  # the kernel is not loaded (or an older build)
        return False


def apply_act8(on: bool | None = None) -> bool:
    """Turn the kernel's int8 activations on or off (None: as ENV_ACT8 says); returns whether they are on
    (never where the build lacks them)."""
    want = act8_requested() if on is None else on
    if not act8_available():
        return False
    return bool(torch.ops.dspark_q.set_act8(want))


# How the bf16 prefill rebuilds its weight tiles (qkernel.cpp, "Fast bf16 rebuild of panels"): "fast" (AVX-512
# VBMI and BF16), "rows" (the 8-lane rebuild it replaced), "scratch" (fp32 rows rounded by c10, what a CPU
# without AVX512-BF16 runs). The same bits on every path; the switch is for A/B timings and tests.
REBUILD_PATHS = ("fast", "rows", "scratch")


def set_rebuild_path(path: str) -> str:
    """Select the prefill rebuild path; returns the one in effect (the next one down where the kernel build
    lacks the one asked for). Process-wide, like the bf16 prefill switch."""
    got = int(torch.ops.dspark_q.set_prefill_rebuild(REBUILD_PATHS.index(path)))
    return REBUILD_PATHS[got]


def kernel_layout(packed: Packed, compact: bool | None = None, six: bool | None = None,
                  half: bool | None = None) -> Packed:
    """``packed`` as the few-row products run it fastest: in panels of 8 rows where it can be, K-quants
    with their compact super-block scales (unless ``compact`` is False, or None and ENV_COMPACT is 0),
    compact Q6_K with 6-bit codes when ``six`` (None: ENV_SIX), and the plain types' scales as fp16 when
    ``half`` (None: ENV_HALF)."""
    if packed.kind in (4, 8) and packed.n % PANEL == 0 and panels_enabled():
        cs = (compact_enabled() if compact is None else compact) and can_compact(packed)
        six_ = cs and packed.source_type == Q6_K and (six_enabled() if six is None else six)
        out = interleave(packed, compact=cs, six=six_)
        if (half_enabled() if half is None else half) and can_half(out):
            out = half_scales(out)
        return out
    return packed


def kernel_tensors(p: Packed) -> dict[str, torch.Tensor]:
    """The kernel's operands of ``p``: codes, scale and off as tensors over the same memory."""
    return {
        # from_numpy shares the arrays' memory: the parsers made them fresh (never views of the file).
        "codes": torch.from_numpy(np.ascontiguousarray(p.codes).reshape(-1)),
        "scale": torch.from_numpy(np.ascontiguousarray(p.scale).reshape(p.n, -1)),
        "off": torch.from_numpy(np.ascontiguousarray(p.off).reshape(-1)),
    }


class _QuantWeights(nn.Module):
    def __init__(self, packed: Packed) -> None:
        super().__init__()
        self.kind = packed.kind
        self.shift = packed.shift
        self.source_type = packed.source_type
        for name, t in kernel_tensors(packed).items():
            self.register_buffer(name, t, persistent=False)

    def _args(self) -> tuple[object, ...]:
        return (self.kind, self.codes, self.scale, self.off, self.shift)


class QuantLinear(_QuantWeights):
    """``y = x W^T + b`` with W held as quantized codes; fp32 in, fp32 out (any input dtype is cast)."""

    def __init__(self, packed: Packed, bias: torch.Tensor | None = None, small_m: int = SMALL_M) -> None:
        packed = kernel_layout(packed)
        super().__init__(packed)
        self.in_features = packed.k
        self.out_features = packed.n
        self.small_m = small_m
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone(), persistent=False)
        self._bind()

    def _bind(self) -> None:
        # The kernel's operands in a plain tuple in __dict__: reading buffers through nn.Module.__getattr__
        # and going through Module.__call__ cost ~20 us a call, as much as the kernel call itself for the
        # small projections (97 calls per 0.5B forward). Rebound whenever the buffers are replaced.
        self.__dict__["_op_args"] = (*self._args(), self.small_m)
        self.__dict__["_bias"] = self.bias

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> QuantLinear:
        super()._apply(fn, *args, **kwargs)
        self._bind()
        return self

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """The product, without nn.Module's call machinery (same result as calling the module)."""
        lead = x.shape[:-1]
        out = _QMM(x.reshape(-1, x.shape[-1]), *self.__dict__["_op_args"])
        bias = self.__dict__["_bias"]
        if bias is not None:
            out = out + bias
        return out.view(*lead, out.shape[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, codes={self.kind}-bit"


class QuantEmbedding(nn.Module):
    """An embedding table looked up straight from its quantized rows (exact fp32 row values).

    The rows come from the kernel's layout in memory (``packed``: a table that is also the tied LM head,
    which reads every row) or from the GGUF file itself (``rows``: see ``file_rows``; the default target's
    table is then 146 MB that is not resident), the same values either way.
    """

    def __init__(self, packed: Packed | None = None, *, rows: FileRows | None = None) -> None:
        super().__init__()
        if (packed is None) == (rows is None):
            raise ValueError("QuantEmbedding takes either packed rows or a file to read rows from")
        self.rows = rows
        if packed is not None:
            self.kind, self.shift, self.source_type = packed.kind, packed.shift, packed.source_type
            for name, t in kernel_tensors(packed).items():
                self.register_buffer(name, t, persistent=False)
            self.num_embeddings, self.embedding_dim = packed.n, packed.k
        else:
            assert rows is not None
            self.source_type = rows.info.qtype
            self.num_embeddings, self.embedding_dim = rows.n, rows.k
        # transformers reads `.weight` of the input embeddings for its dtype and device; a 1-element
        # stand-in answers those questions without holding the table in fp32.
        self.register_buffer("weight", torch.zeros(1, self.embedding_dim), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.rows is not None:
            return self.rows.lookup(ids)
        rows = torch.ops.dspark_q.qrows(ids.reshape(-1), self.kind, self.codes, self.scale, self.off, self.shift,
                                        self.embedding_dim)
        return rows.reshape(*ids.shape, self.embedding_dim)

    def extra_repr(self) -> str:
        where = f"rows read from {self.rows.path.name}" if self.rows is not None else "in memory"
        return f"{self.num_embeddings}, {self.embedding_dim}, {where}"


class FusedProjections(nn.Module):
    """Several projections of the same input (q/k/v, or gate/up) as one kernel call.

    transformers calls ``q_proj(h)``, ``k_proj(h)``, ``v_proj(h)`` one after the other with the same
    tensor: the first call computes all of them, the others take their columns from that result. A call
    with any other input recomputes, so a different caller order is slower, never wrong.
    """

    def __init__(self, fused: QuantLinear, sizes: list[int]) -> None:
        super().__init__()
        self.fused = fused
        self.bounds: list[tuple[int, int]] = []
        start = 0
        for s in sizes:
            self.bounds.append((start, start + s))
            start += s
        # The last input and its result, in a plain dict: nn.Module's __setattr__ costs microseconds a call.
        self._memo: dict[str, Any] = {"input": None, "version": -1, "output": None, "served": 0}

    def part(self, index: int, x: torch.Tensor) -> torch.Tensor:
        memo = self._memo
        # Same tensor object AND no in-place change since (torch's version counter; inference-mode tensors
        # have none, and transformers never edits the projections' input in place), or compute again.
        version = _version(x)
        if memo["input"] is not x or memo["output"] is None or version != memo["version"]:
            memo.update(input=x, output=self.fused(x), served=0, version=version)
        lo, hi = self.bounds[index]
        out = memo["output"][..., lo:hi]
        memo["served"] += 1
        if memo["served"] >= len(self.bounds):  # every part served: drop the references
            memo.update(input=None, output=None)
        return out


def _version(x: torch.Tensor) -> int:
    # Inference-mode tensors track no version (asking raises, and a raised exception costs ~45 us: it was
    # a tenth of a decode forward).
    return -2 if x.is_inference() else int(x._version)


class ProjectionPart(nn.Module):
    """Stands where one projection's Linear stood; answers from its :class:`FusedProjections`."""

    def __init__(self, group: FusedProjections, index: int) -> None:
        super().__init__()
        # Not a submodule (the group is registered once, on its first part's parent): a plain reference.
        object.__setattr__(self, "_group", group)
        self.index = index
        lo, hi = group.bounds[index]
        self.in_features = group.fused.in_features
        self.out_features = hi - lo

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        group: FusedProjections = object.__getattribute__(self, "_group")
        return group.part(self.index, x)

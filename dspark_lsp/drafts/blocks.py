"""The layers both drafts are built from: pre-norm causal transformer blocks (RMSNorm, RoPE, SwiGLU)
and a croppable KV cache.

Written out by hand rather than borrowed from transformers so that the two things a draft needs are
explicit and cheap: arbitrary position ids plus a boolean 4-D attention mask (the masked-parallel
training step appends mask blocks whose positions repeat those of real tokens), and a KV cache that can
be cropped to any length (re-sync after the decode loop rejects tokens).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from dspark_lsp.errors import UserError

C = TypeVar("C", bound="BlockConfig")


class BlockConfig:
    """What both drafts' configs (dataclasses saved as JSON beside the weights) share: the shape a block
    reads, ``head_dim``, and reading and writing the JSON (``KIND`` names the draft in errors)."""

    KIND: ClassVar[str] = "draft"
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # set by @dataclass on each config
    d_model: int
    n_heads: int
    d_ff: int
    norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise UserError(f"unknown {cls.KIND} config keys: {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def load(cls: type[C], path: Path) -> C:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"cannot read {cls.KIND} config {path}: {exc}") from exc
        return cls.from_dict(data)


class KVCache:
    """Keys/values of every layer for one sequence (batch 1), croppable to any length."""

    def __init__(self, n_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

    @property
    def length(self) -> int:
        k = self.keys[0]
        return 0 if k is None else int(k.shape[2])

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        old_k, old_v = self.keys[layer], self.values[layer]
        if old_k is not None and old_v is not None:
            k = torch.cat([old_k, k], dim=2)
            v = torch.cat([old_v, v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (no-op when already shorter)."""
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k is not None and v is not None:
                self.keys[i], self.values[i] = k[:, :, :length], v[:, :, :length]


def causal_mask(past: int, t: int, device: torch.device) -> torch.Tensor:
    """Bool [1, 1, t, past + t]: new position i sees everything cached and new positions <= i."""
    cols = torch.arange(past + t, device=device)
    rows = torch.arange(t, device=device)[:, None] + past
    return (cols[None, :] <= rows)[None, None]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, H, T, D]; cos/sin: [B, 1, T, D/2]. Rotate the two halves (the Llama/Qwen convention).
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        cache: KVCache | None,
        layer: int,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.norm1 = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.norm2 = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        cache: KVCache | None,
        layer: int,
    ) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, mask, cache, layer)
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    """The rotary embedding's inverse frequencies for heads of ``head_dim``."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))

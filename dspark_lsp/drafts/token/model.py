"""The DSpark token draft network: a tiny pre-norm causal transformer with tied embeddings over the
reduced draft vocabulary (drafts.vocab), built from the common blocks (drafts.blocks)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dspark_lsp.drafts.blocks import Block, KVCache, RMSNorm, causal_mask, rope_inv_freq
from dspark_lsp.drafts.token.config import DraftNetConfig


class DraftNet(nn.Module):
    """``forward(ids, positions, mask, cache) -> logits`` over the reduced draft vocabulary."""

    def __init__(self, cfg: DraftNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope_theta), persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg.n_layers)

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """ids, positions: [B, T] int64. mask: bool [B, 1, T, S] (True = may attend), where S is the
        cached length + T; None means causal attention (everything cached plus new positions <= i)."""
        if mask is None:
            mask = causal_mask(0 if cache is None else cache.length, ids.shape[1], ids.device)
        angles = positions[..., None].float() * self.inv_freq  # [B, T, D/2]
        cos, sin = angles.cos()[:, None].to(self.embed.weight.dtype), angles.sin()[:, None].to(
            self.embed.weight.dtype
        )
        x = self.embed(ids)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask, cache, i)
        return F.linear(self.norm(x), self.embed.weight)  # tied output head

"""The feature draft network.

Input at position j: the target's feature f_j (its last hidden state, after the final norm) and the
embedding of token j+1 (the token the target produced from f_j). Output g_j: a prediction of f_{j+1},
and logits over the reduced vocabulary for token j+2. Drafting further feeds g_j back in as the next
feature, so the layer must cope with its own predictions: training unrolls it (see training/feat_train).
"""

from __future__ import annotations

import torch
from torch import nn

from dspark_lsp.draftnet.model import Block, KVCache, RMSNorm, causal_mask
from dspark_lsp.featdraft.config import FeatDraftConfig


class FeatDraft(nn.Module):
    def __init__(self, cfg: FeatDraftConfig) -> None:
        super().__init__()
        self.cfg = cfg
        bcfg = cfg.block_config()
        # Target embeddings and features live on different scales: normalise each before mixing.
        self.norm_e = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.norm_f = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.fc = nn.Linear(2 * cfg.d_model, cfg.d_model, bias=False)
        self.blocks = nn.ModuleList(Block(bcfg) for _ in range(cfg.n_layers))
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, bcfg.head_dim, 2).float() / bcfg.head_dim))
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", inv, persistent=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg.n_layers)

    def forward(
        self,
        emb: torch.Tensor,
        feat: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """emb, feat: [B, T, d]; positions [B, T]; mask bool [B|1, 1, T, S] or None (causal).
        Returns g [B, T, d], the predicted next features (``logits(g)`` gives tokens)."""
        if mask is None:
            mask = causal_mask(0 if cache is None else cache.length, emb.shape[1], emb.device)
        dtype = self.norm_e.weight.dtype  # (fc may be a packed stand-in without .weight)
        angles = positions[..., None].float() * self.inv_freq
        cos, sin = angles.cos()[:, None].to(dtype), angles.sin()[:, None].to(dtype)
        x = self.fc(torch.cat([self.norm_e(emb.to(dtype)), self.norm_f(feat.to(dtype))], dim=-1))
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask, cache, i)
        return x

    def logits(self, g: torch.Tensor) -> torch.Tensor:
        return self.head(g)

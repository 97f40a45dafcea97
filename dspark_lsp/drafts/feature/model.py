"""The feature draft network.

Input at position j: the target's feature f_j (its last hidden state, after the final norm) and the
embedding of token j+1 (the token the target produced from f_j). Output g_j: a prediction of f_{j+1},
and logits over the reduced vocabulary for token j+2. Drafting further feeds g_j back in as the next
feature, so the layer must cope with its own predictions: training unrolls it (see training/feat_train).

Optional parts (docs/ALGORITHM.md, *Block drafting*; trained by training/block_train): a *block step* — ``block_size - 1``
masked positions after the last true one, each fed a learned input, run in the same forward, so one
draft call guesses a whole block; a low-rank *Markov head* adding ``W2 · W1[prev]`` to each position's
logits (``prev``: the token chosen just before it), which chains a parallel block's guesses for the price
of a row lookup and an R × V product; and a *confidence head* predicting whether the target will accept
a position's token, from the position's output and ``W1[prev]``.
"""

from __future__ import annotations

import torch
from torch import nn

from dspark_lsp.drafts.blocks import Block, KVCache, RMSNorm, causal_mask, rope_inv_freq
from dspark_lsp.drafts.feature.config import FeatDraftConfig


class FeatDraft(nn.Module):
    def __init__(self, cfg: FeatDraftConfig) -> None:
        super().__init__()
        self.cfg = cfg
        # Target embeddings and features live on different scales: normalise each before mixing.
        width = cfg.width
        self.norm_e = RMSNorm(width, cfg.norm_eps)
        self.norm_f = RMSNorm(width, cfg.norm_eps)
        self.fc = nn.Linear(2 * width, cfg.d_model, bias=False)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        # A layer narrower than the target's features hands its output back up to their size, so the
        # output is still read as the next feature (fed back, and scored by the target-shaped head).
        self.out = nn.Linear(cfg.d_model, width, bias=False) if width != cfg.d_model else None
        self.head = nn.Linear(width, cfg.vocab_size, bias=False)
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope_theta), persistent=False)
        # A block after an anchor: offset 1 reads the anchor's predicted feature (the draft's guess of the
        # next true feature) and the embedding of the token the anchor chose - exactly an autoregressive
        # step's inputs. Offsets 2 .. block_size - 1 cannot know their token yet: they read the same
        # feature with a learned stand-in for the embedding, one per offset, and see offset 1's key.
        self.block_in = nn.Parameter(torch.zeros(cfg.block_size - 2, width)) if cfg.block_size >= 3 else None
        rank = cfg.markov_rank
        self.markov_in = nn.Embedding(cfg.vocab_size, rank) if rank else None
        self.markov_out = nn.Linear(rank, cfg.vocab_size, bias=False) if rank else None
        # The confidence head is a plain weight vector, not an nn.Linear, so the CPU int8 pass over the
        # draft's products (quant/requantize) leaves its calibration alone. Its bias is one per
        # (kind, step): kind 0 = autoregressive steps (and a block's anchor), 1 = masked offsets.
        self.conf = nn.Parameter(torch.zeros(width + rank)) if cfg.confidence_head else None
        self.conf_step = nn.Parameter(torch.zeros(2, 16)) if cfg.confidence_head else None
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        if self.markov_out is not None:
            nn.init.zeros_(self.markov_out.weight)  # a new Markov head starts as no change to the logits
        if self.block_in is not None:
            nn.init.normal_(self.block_in, std=0.02)

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
        """emb, feat: [B, T, width]; positions [B, T]; mask bool [B|1, 1, T, S] or None (causal).
        Returns g [B, T, width], the predicted next features (``logits(g)`` gives tokens)."""
        dtype = self.norm_e.weight.dtype  # (fc may be a packed stand-in without .weight)
        x = self.fc(torch.cat([self.norm_e(emb.to(dtype)), self.norm_f(feat.to(dtype))], dim=-1))
        return self.body(x, positions, mask, cache)

    def body(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
             cache: KVCache | None) -> torch.Tensor:
        """The decoder layer(s) over inputs ``x`` [B, T, d_model] (after ``fc``, or a block's learned inputs),
        then ``out`` where the layer is narrower than the features: [B, T, width]."""
        if mask is None:
            mask = causal_mask(0 if cache is None else cache.length, x.shape[1], x.device)
        dtype = self.norm_e.weight.dtype
        angles = positions[..., None].float() * self.inv_freq
        cos, sin = angles.cos()[:, None].to(dtype), angles.sin()[:, None].to(dtype)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask, cache, i)
        return x if self.out is None else self.out(x)

    @property
    def has_block(self) -> bool:
        return self.cfg.block_size >= 2

    def block_inputs(self, n: int, g_anchor: torch.Tensor, first_emb: torch.Tensor) -> torch.Tensor:
        """The inputs of offsets 1..n after an anchor whose output is ``g_anchor`` [..., d] and whose
        chosen token embeds as ``first_emb`` [..., d]: [..., n, d], ready for :meth:`body`."""
        if not self.has_block or not 1 <= n <= self.cfg.block_size - 1:
            raise ValueError(f"this draft's block has {max(self.cfg.block_size - 1, 0)} offsets, asked for {n}")
        dtype = self.norm_e.weight.dtype
        lead = g_anchor.shape[:-1]
        emb = first_emb.to(dtype)[..., None, :]
        if n > 1 and self.block_in is not None:
            emb = torch.cat([emb, self.block_in[: n - 1].to(dtype).expand(*lead, n - 1, -1)], dim=-2)
        feat = g_anchor.to(dtype)[..., None, :].expand(*lead, n, -1)
        return self.fc(torch.cat([self.norm_e(emb), self.norm_f(feat)], dim=-1))

    def markov(self, prev: torch.Tensor) -> torch.Tensor | None:
        """The Markov head's logit bias for draft-vocabulary ids ``prev`` [...] -> [..., V]; None without one."""
        if self.markov_in is None or self.markov_out is None:
            return None
        return self.markov_out(self.markov_in(prev))

    def logits(self, g: torch.Tensor, prev: torch.Tensor | None = None) -> torch.Tensor:
        """Logits over the reduced vocabulary; with ``prev`` (the draft ids chosen just before each
        position) the Markov head's bias is added."""
        out = self.head(g)
        bias = self.markov(prev) if prev is not None else None
        return out if bias is None else out + bias.to(out.dtype)

    def confidence_logit(self, g: torch.Tensor, prev: torch.Tensor, kind: int, step: torch.Tensor | int,
                         detach: bool = False) -> torch.Tensor:
        """The confidence head's logit that the target accepts the position's token, [...]. ``detach``:
        its inputs carry no gradient back (training fits the head as a probe of a draft it leaves alone)."""
        if self.conf is None or self.conf_step is None:
            raise ValueError("this draft has no confidence head")
        w = self.conf
        parts = [g.to(w.dtype)]
        if self.markov_in is not None:
            parts.append(self.markov_in(prev).to(w.dtype))
        if detach:
            parts = [t.detach() for t in parts]
        step_t = torch.as_tensor(step, device=g.device).clamp(max=self.conf_step.shape[1] - 1)
        return torch.cat(parts, dim=-1) @ w + self.conf_step[kind][step_t]

    def confidence_slot(self, kind: int, step: int) -> int:
        """The flat index of the (kind, step) bias :meth:`confidence_logit` adds (steps past the last
        share it), as the decoder records it beside each judged token."""
        assert self.conf_step is not None
        n = self.conf_step.shape[1]
        return kind * n + min(step, n - 1)

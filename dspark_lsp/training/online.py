"""Target features made on the fly, for training the feature draft where the target runs fast.

On the 2-core CPU the target's features are extracted once into shards (``training.features``, ~0.5M
tokens an hour) and trained on for several epochs. On an accelerator the target makes features far
faster than they could be stored (896 bf16 values per token: 1.8 KB, so 10M tokens would be 18 GB), so
there each training batch is drawn fresh: corpus samples -> one batched target forward -> the same rows
a shard holds. Every row is then seen once, which is what a data-limited draft wants.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch

from dspark_lsp.training.samples import MIN_SAMPLE_TOKENS, Sample


class OnlineRows:
    """Rows ``{tokens, feat, pred, middle_start}`` (the shard format) from ``draw`` and ``target``."""

    def __init__(self, target: Any, draw: Callable[[random.Random], Sample], seed: int) -> None:
        self.target = target
        self.draw = draw
        self.rng = random.Random(seed)
        self.tokens_made = 0

    @torch.inference_mode()
    def take(self, n: int) -> list[dict[str, Any]]:
        samples: list[Sample] = []
        while len(samples) < n:
            s = self.draw(self.rng)
            if len(s.tokens) >= MIN_SAMPLE_TOKENS:
                samples.append(s)
        device = next(self.target.parameters()).device
        width = max(len(s.tokens) for s in samples)
        # Right padding needs no attention mask: causal attention keeps every real token from seeing
        # the padding after it, so real positions get exactly their unpadded states.
        x = torch.zeros(n, width, dtype=torch.long, device=device)
        for i, s in enumerate(samples):
            x[i, : len(s.tokens)] = torch.tensor(s.tokens, dtype=torch.long)
        # The base model's last state is what the LM head reads (after the final norm); the head runs
        # one sample at a time so the batch never holds [n, width, vocab] logits at once.
        h = self.target.get_decoder()(input_ids=x, use_cache=False).last_hidden_state
        head = self.target.get_output_embeddings()
        rows: list[dict[str, Any]] = []
        for i, s in enumerate(samples):
            m = len(s.tokens)
            feat = h[i, :m]
            rows.append({
                "tokens": torch.tensor(s.tokens, dtype=torch.int32),
                "feat": feat.to(torch.bfloat16).cpu(),
                "pred": head(feat).argmax(-1).to(torch.int32).cpu(),
                "middle_start": s.middle_start,
            })
            self.tokens_made += m
        return rows

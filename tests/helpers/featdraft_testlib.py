"""Shared by the feature-draft tests: target features of repetitive sequences, written as training shards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


class Embed(torch.nn.Module):
    """A stand-in for the target's input embedding module (what a feature draft reads its tokens through)."""

    def __init__(self, vocab: int, d: int) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(vocab, d)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


def write_shards(target: Any, out: Path, n_shards: int, seqs: int, length: int, vocab: int) -> None:
    from dspark_lsp.training.features import target_features

    out.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for s in range(n_shards):
        rows = []
        for _ in range(seqs):
            # Repetitive sequences, so there is something a draft can learn in a few steps.
            base = torch.randint(0, vocab, (6,), generator=g).tolist()
            ids = (base * (length // 6 + 1))[:length]
            h, a = target_features(target, ids)
            rows.append({"tokens": torch.tensor(ids, dtype=torch.int32), "feat": h.to(torch.bfloat16),
                         "pred": a.to(torch.int32), "middle_start": 0})
        torch.save(rows, out / f"shard_{s:05d}.pt")

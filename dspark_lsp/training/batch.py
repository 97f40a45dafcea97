"""Batches for the joint objective: the normal next-token (AR) loss on every real position plus the
PARD-style masked-parallel loss.

For each of ``anchors`` positions ``a`` in a sample, ``n_parallel - 1`` MASK tokens are appended after
the real sequence with position ids ``a+1 .. a+n-1``. The j-th mask of a block sees the real tokens
``0..a`` and the masks of its own block up to itself, and is trained to predict token ``a+1+j``: exactly
what it sees at inference, where the context ends at ``a`` and the masks follow it. Real tokens never see
masks, so one forward trains both objectives without disturbing the AR path.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from dspark_lsp.drafts.vocab import MASK_ID, UNK_ID
from dspark_lsp.training.samples import Sample

IGNORE = -100


@dataclass
class Batch:
    ids: torch.Tensor  # [B, L] draft ids (real tokens then mask blocks)
    positions: torch.Tensor  # [B, L]
    mask: torch.Tensor  # [B, 1, L, L] bool
    labels: torch.Tensor  # [B, L] draft ids or IGNORE
    n_real: int  # the first n_real columns are real tokens
    n_parallel: int


def pick_anchors(rng: random.Random, sample: Sample, count: int) -> list[int]:
    """Anchors with at least two following tokens; half of them inside the FIM middle when it has room,
    because that is where the server drafts."""
    n = len(sample.tokens)
    if n < 3:
        return []
    anchors: list[int] = []
    lo = sample.middle_start - 1 if sample.middle_start else 0
    for i in range(count):
        if i % 2 == 0 and 0 < lo < n - 2:
            anchors.append(rng.randrange(lo, n - 2))
        else:
            anchors.append(rng.randrange(0, n - 2))
    return anchors


def build_batch(
    rng: random.Random,
    samples: list[Sample],
    to_draft: torch.Tensor,
    seq_len: int,
    n_parallel: int,
    anchors: int,
) -> Batch:
    n_masks = n_parallel - 1
    total = seq_len + anchors * n_masks
    b = len(samples)
    ids = torch.full((b, total), UNK_ID, dtype=torch.long)
    positions = torch.zeros((b, total), dtype=torch.long)
    labels = torch.full((b, total), IGNORE, dtype=torch.long)
    mask = torch.zeros((b, 1, total, total), dtype=torch.bool)
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    block = torch.ones(n_masks, n_masks, dtype=torch.bool).tril()
    for r, sample in enumerate(samples):
        toks = to_draft[torch.as_tensor(sample.tokens[:seq_len], dtype=torch.long)]
        n = int(toks.numel())
        ids[r, :n] = toks
        positions[r, :seq_len] = torch.arange(seq_len)
        labels[r, : n - 1] = toks[1:]
        mask[r, 0, :seq_len, :seq_len] = causal  # padding rows see themselves, so no row is all-False
        if n_masks == 0:
            continue
        chosen = pick_anchors(rng, Sample(sample.tokens[:seq_len], sample.middle_start), anchors)
        if not chosen:  # too short for any anchor: blocks still need one visible key (no NaN rows)
            mask[r, 0, seq_len:, 0] = True
        for i, a in enumerate(chosen):
            s = seq_len + i * n_masks
            ids[r, s : s + n_masks] = MASK_ID
            positions[r, s : s + n_masks] = torch.arange(a + 1, a + 1 + n_masks)
            mask[r, 0, s : s + n_masks, : a + 1] = True
            mask[r, 0, s : s + n_masks, s : s + n_masks] = block
            for j in range(n_masks):
                if a + 2 + j < n:
                    labels[r, s + j] = toks[a + 2 + j]
    return Batch(ids, positions, mask, labels, seq_len, n_parallel)

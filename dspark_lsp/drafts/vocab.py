"""The reduced draft vocabulary (FR-Spec): draft id <-> target id.

Draft id 0 is UNK (any target token not kept) and 1 is MASK (the parallel step's placeholder); neither
maps to a target token, so the draft masks them out before proposing and can only ever propose real
target ids. Ids 2.. are target tokens: the FIM/EOS specials first, then the most frequent corpus tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch

from dspark_lsp.engine.draft import Proposal, runner_ups

UNK_ID = 0
MASK_ID = 1
N_RESERVED = 2


class DraftVocab:
    def __init__(self, target_ids: Sequence[int], target_vocab_size: int) -> None:
        ids = torch.as_tensor(list(target_ids), dtype=torch.long)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= target_vocab_size):
            raise ValueError("draft vocabulary maps outside the target vocabulary")
        if ids.unique().numel() != ids.numel():
            raise ValueError("draft vocabulary has duplicate target ids")
        self.target_vocab_size = target_vocab_size
        # draft id -> target id; -1 for UNK and MASK.
        self.to_target = torch.cat([torch.full((N_RESERVED,), -1, dtype=torch.long), ids])
        # target id -> draft id; UNK for tokens not kept.
        self.to_draft = torch.full((target_vocab_size,), UNK_ID, dtype=torch.long)
        self.to_draft[ids] = torch.arange(N_RESERVED, N_RESERVED + ids.numel())

    @property
    def size(self) -> int:
        return int(self.to_target.numel())

    @property
    def target_ids(self) -> torch.Tensor:
        """The kept target ids, in draft-id order (what is saved beside the weights)."""
        return self.to_target[N_RESERVED:]

    def encode(self, target_tokens: Sequence[int] | torch.Tensor) -> torch.Tensor:
        t = torch.as_tensor(target_tokens, dtype=torch.long)
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.target_vocab_size):
            raise ValueError("token id outside the target vocabulary")
        return self.to_draft[t]


def pick_token(
    vocab: DraftVocab, logits: torch.Tensor, temperature: float, generator: torch.Generator | None
) -> tuple[int, float, torch.Tensor | None]:
    """From draft logits over the reduced vocabulary: (target id, draft probability, distribution over
    the target vocabulary when sampling, else None). UNK and MASK are never proposed: they are not
    target tokens."""
    logits = _without_reserved(logits)
    if temperature <= 0:
        probs = torch.softmax(logits, -1)
        d = int(probs.argmax())
        return int(vocab.to_target[d]), float(probs[d]), None
    probs = torch.softmax(logits / temperature, -1)
    d = int(torch.multinomial(probs, 1, generator=generator))
    dist = torch.zeros(vocab.target_vocab_size)
    dist[vocab.to_target[N_RESERVED:]] = probs[N_RESERVED:]
    return int(vocab.to_target[d]), float(probs[d]), dist


def append_pick(out: Proposal, vocab: DraftVocab, logits: torch.Tensor, temperature: float,
                generator: torch.Generator | None) -> float:
    """Pick one token from draft ``logits`` (:func:`pick_token`) and append it to ``out`` with its
    probability, its distribution when sampling and its runner-ups when greedy; returns the probability."""
    tok, p, dist = pick_token(vocab, logits, temperature, generator)
    out.add(tok, p, dist, partial(draft_runner_ups, vocab, logits))
    return p


def draft_runner_ups(vocab: DraftVocab, logits: torch.Tensor) -> list[tuple[int, float]]:
    """The draft's runner-up target ids after its greedy pick (reserved ids excluded), with probabilities."""
    return [(int(vocab.to_target[d]), p) for d, p in runner_ups(torch.softmax(_without_reserved(logits), -1))]


def _without_reserved(logits: torch.Tensor) -> torch.Tensor:
    """fp32 copy of draft logits with UNK and MASK ruled out: they are not target tokens."""
    out = logits.float().clone()
    out[:N_RESERVED] = float("-inf")
    return out

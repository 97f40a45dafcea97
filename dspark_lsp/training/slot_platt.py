"""Platt scaling with one bias per confidence slot, folded into a feature draft's confidence head.

One (a, b) for the whole head left it 0.07-0.18 over-confident in the middle bins of held-out decoding
(MODEL_CARD.md of dspark-feat-qwc05): the head states its confidence from a (kind, step) bias plus a
shared probe, and the decode loop reaches a chain's later steps and the block's offsets in proportions
the training shards do not have. Here the scale ``a`` stays shared (the probe's weights are shared, so
only a shared scale folds exactly) and each slot, a (kind, step) pair the decoder recorded beside the
judged token (Proposal.slots), gets its own bias, pulled toward the global one in proportion to how few
tokens it saw.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dspark_lsp.drafts.feature.model import FeatDraft


@dataclass
class SlotPlatt:
    """``sigmoid(a * logit + bias[slot])``, ``bias`` falling back to ``b`` for a slot never seen."""

    a: float
    b: float
    bias: dict[int, float]
    counts: dict[int, int]


def fit_slot_platt(logits: torch.Tensor, labels: torch.Tensor, slots: torch.Tensor,
                   prior: float = 10.0) -> SlotPlatt:
    """Fit a shared scale and a bias per slot by log loss; ``prior``: how many tokens' worth of pull
    toward the global bias each slot's bias gets (a slot with 5 judged tokens stays near it, one with
    500 follows its own)."""
    from dspark_lsp.training.block_train import fit_platt

    a0, b0 = fit_platt(logits, labels)
    uniq, index = torch.unique(slots, return_inverse=True)
    keys = [int(s) for s in uniq.tolist()]
    a = torch.tensor(a0, requires_grad=True)
    bias = torch.full((len(keys),), b0, requires_grad=True)
    # The log loss's curvature in a bias is about n * p * (1 - p) <= n / 4: a quadratic pull of
    # prior / 4 weighs as much as ``prior`` tokens at p = 0.5.
    strength = prior / 4.0
    opt = torch.optim.LBFGS([a, bias], lr=0.5, max_iter=300)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        z = a * logits + bias[index]
        loss = F.binary_cross_entropy_with_logits(z, labels, reduction="sum")
        loss = loss + strength / 2 * ((bias - b0) ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)  # type: ignore[no-untyped-call]
    counts = torch.bincount(index, minlength=len(keys)).tolist()
    return SlotPlatt(a=float(a.detach()), b=b0, bias={k: float(bias[i].detach()) for i, k in enumerate(keys)},
                     counts={k: int(counts[i]) for i, k in enumerate(keys)})


def fold_slot_platt(model: FeatDraft, fit: SlotPlatt) -> None:
    """Make the head compute ``fit.a * logit + bias[slot]`` itself: the probe scaled by ``a``, each
    (kind, step) bias mapped the same way plus its slot's bias (the global one for unseen slots)."""
    if model.conf is None or model.conf_step is None:
        raise ValueError("this draft has no confidence head")
    with torch.no_grad():
        model.conf.mul_(fit.a)
        model.conf_step.mul_(fit.a).add_(fit.b)
        # A slot is the flat index of its (kind, step) bias (FeatDraft.confidence_slot); NO_SLOT (-1)
        # names none and must not wrap around to the last one.
        flat = model.conf_step.view(-1)
        for slot, b in fit.bias.items():
            if 0 <= slot < flat.numel():
                flat[slot] += b - fit.b

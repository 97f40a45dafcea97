"""Which draft tokens a verify forward keeps: the three acceptance rules as pure functions.

Each rule reads the target's logits for one verify forward, ``[pending] + chain (+ alternates)``, where
row i predicts the token after input i, so chain token i (0-based) is judged by row i. Each returns a
:class:`Verdict`: how many chain tokens were accepted and the target's own next token (the correction at
the first rejection, or the bonus token after a fully accepted chain), so every round yields at least
one token. Nothing here touches a KV cache or the scheduler; the decode loop does the rollback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

if TYPE_CHECKING:  # alternates uses tree_accept: a type-only import keeps the modules free of a cycle
    from dspark_lsp.engine.alternates import VerifyLayout


class Verdict(NamedTuple):
    accepted: int  # chain tokens accepted (a prefix of the chain)
    next_token: int  # the target's token after them: a correction, or the bonus when all were accepted
    alt_row: int | None = None  # the verify row of the accepted alternate (tree acceptance only)


def greedy_accept(
    logits: torch.Tensor, chain: list[int], vocab_size: int, relaxed_threshold: float | None = None
) -> Verdict:
    """The longest prefix of ``chain`` equal to the target's argmax, then the argmax after it.

    ``relaxed_threshold`` (lossy, opt-in) also keeps a token whose target probability reaches it. The
    softmax is computed only at the first mismatch: lossless decoding never pays for it."""
    preds = torch.argmax(logits[:, :vocab_size], dim=-1).tolist()
    m = 0
    probs: torch.Tensor | None = None
    for i, d in enumerate(chain):
        if preds[i] == d:
            m += 1
            continue
        if relaxed_threshold is not None:
            if probs is None:
                probs = torch.softmax(logits[:, :vocab_size], dim=-1)
            if float(probs[i, d]) >= relaxed_threshold:
                m += 1
                continue
        break
    return Verdict(m, int(preds[m]))


def tree_accept(preds: list[int], layout: VerifyLayout) -> Verdict:
    """Greedy acceptance over a chain with runner-up leaves, from the target's argmax per row.

    The chain is walked as in :func:`greedy_accept`; at the first mismatch, an alternate for that
    position carrying the target's own token is accepted too, and its row predicts the next token.
    Only that position can take an alternate: before it the target agreed with the chain, after it
    nothing was verified with the right context, so the output stays exactly the target's."""
    chain = layout.chain
    m = 0
    while m < len(chain) and preds[m] == chain[m]:
        m += 1
    if m < len(chain):
        first_alt_row = 1 + len(chain)
        for j, alt in enumerate(layout.alternates):
            if alt.index == m and alt.token == preds[m]:
                return Verdict(m, preds[first_alt_row + j], first_alt_row + j)
    return Verdict(m, preds[m])


def sampled_accept(
    logits: torch.Tensor,
    chain: list[int],
    dists: list[torch.Tensor | None],
    temperature: float,
    vocab_size: int,
    generator: torch.Generator | None,
) -> Verdict:
    """Speculative sampling: keep d_i with probability min(1, p(d_i) / q(d_i)); at the first rejection
    sample the correction from norm(max(p - q, 0)), which makes the output distributed exactly as the
    target's own samples; after a fully accepted chain sample the bonus from p.

    ``dists[i]`` is the draft's q for token i; a missing q (a lookup, which proposes with certainty)
    reads as q = one-hot(d_i), whose residual is p with d_i removed."""
    p_all = torch.softmax(logits[:, :vocab_size] / temperature, dim=-1)
    for i, d in enumerate(chain):
        p = p_all[i]
        q = dists[i] if i < len(dists) else None
        q_d = 1.0 if q is None else float(q[d])
        r = float(torch.rand((), generator=generator))
        if q_d > 0 and r < min(1.0, float(p[d]) / q_d):
            continue
        return Verdict(i, _sample(_residual(p, q, d), generator))
    return Verdict(len(chain), _sample(p_all[len(chain)], generator))


def _residual(p: torch.Tensor, q: torch.Tensor | None, d: int) -> torch.Tensor:
    """norm(max(p - q, 0)); p itself when that is empty (q covers p everywhere: a rounding corner)."""
    if q is None:
        residual = p.clone()
        residual[d] = 0.0
    else:
        residual = torch.clamp(p - q.to(p.dtype), min=0.0)
    total = float(residual.sum())
    return residual / total if total > 0 else p


def _sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator).item())


def pick_token(logits: torch.Tensor, temperature: float, vocab_size: int, generator: torch.Generator | None) -> int:
    """The target's own next token from one row of logits (the prefill's): argmax, or a sample."""
    logits = logits[:vocab_size]
    if temperature > 0:
        return _sample(torch.softmax(logits / temperature, dim=-1), generator)
    return int(torch.argmax(logits).item())

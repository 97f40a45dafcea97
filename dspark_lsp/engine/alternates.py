"""Runner-up draft tokens verified in the same target forward as the draft chain (a one-level tree).

On a CPU the verify forward costs about the same for 1 to 6 tokens (docs/KERNEL.md; the bench's measured
curve), and the decoder already pads short forwards up to a cheaper width with copies of the last
token. Those slots can carry the draft's second and third choices instead: an alternate for chain
position i is a sibling of draft token i (same parent, same position id) that attends to the cached
prefix, the pending token and draft tokens before i, and itself. When the target rejects draft token i
but its own token there is an alternate, that token is accepted too, and the alternate's row gives the
next token, so the round yields one more token at no extra forward.

The first token the target disagrees with is the only place an alternate can be accepted (before it the
target agreed with the chain, after it nothing is verified), so greedy output stays exactly the target's.
Alternates are leaves: nothing is drafted below them, which keeps the draft's cost unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dspark_lsp.engine.acceptance import tree_accept


@dataclass(frozen=True)
class Alternate:
    """A runner-up token for chain position ``index`` (0-based draft index) and its value: the draft's
    probability that the chain before it holds and that this token is the right one."""

    index: int
    token: int
    value: float


@dataclass
class VerifyLayout:
    """The rows of one verify forward: ``[pending] + chain + alternates``."""

    chain: list[int]
    alternates: list[Alternate] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return self.chain + [a.token for a in self.alternates]

    @property
    def width(self) -> int:
        """Rows fed to the target, the pending token included."""
        return 1 + len(self.chain) + len(self.alternates)

    def positions(self, base: int, width: int) -> list[int]:
        """Position id of each of ``width`` rows (rows past this layout are padding, placed after it)."""
        n = 1 + len(self.chain)
        pos = [base + i for i in range(n)]
        pos += [base + 1 + a.index for a in self.alternates]
        pos += [base + n + j for j in range(width - len(pos))]
        return pos

    def attention_mask(self, base: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask [1, 1, width, base + width]: 0 where a row may attend, the dtype's minimum
        elsewhere (additive works for both eager and SDPA attention). Chain rows and padding rows are
        causal; alternate rows see the prefix up to their parent and themselves."""
        allowed = torch.zeros(width, base + width, dtype=torch.bool)
        allowed[:, :base] = True
        causal = torch.tril(torch.ones(width, width, dtype=torch.bool))
        allowed[:, base:] = causal
        n = 1 + len(self.chain)
        for j, alt in enumerate(self.alternates):
            r = n + j
            allowed[r, base:] = False
            allowed[r, base : base + 1 + alt.index] = True  # pending .. draft token index-1
            allowed[r, base + r] = True
        # Padding after the alternates would otherwise read them as if they were context: keep padding
        # on the chain only (what it sees is irrelevant, its rows are dropped, but this keeps it sane).
        for r in range(n + len(self.alternates), width):
            allowed[r, base + n : base + n + len(self.alternates)] = False
        mask = torch.zeros(1, 1, width, base + width, dtype=dtype)
        return mask.masked_fill(~allowed, torch.finfo(dtype).min)

    def accept(self, preds: list[int]) -> tuple[int, int | None, int]:
        """Greedy walk over the target's argmax per row: (chain tokens accepted, row of the accepted
        alternate or None, the target's next token); the rule is engine.acceptance.tree_accept."""
        v = tree_accept(preds, self)
        return v.accepted, v.alt_row, v.next_token


def choose_alternates(
    candidates: list[Alternate], free: int, extra_price: list[float], limit: int
) -> list[Alternate]:
    """The most valuable candidates: up to ``free`` slots that cost nothing (padding would fill them),
    then one more per entry of ``extra_price`` (the added verify cost of that slot, in target forwards)
    while a candidate's value covers it; at most ``limit`` in all."""
    ranked = sorted(candidates, key=lambda a: -a.value)
    out = ranked[: min(free, limit)]
    for price, alt in zip(extra_price, ranked[len(out) :], strict=False):
        if len(out) >= limit or alt.value < price:
            break
        out.append(alt)
    return out

"""A stand-in target that replays a known greedy continuation: offline evaluation of draft policies.

Greedy decoding is deterministic, so once the real target's continuation of a prompt is known, any
drafting policy can be replayed against it exactly — same proposals, same acceptances, same number of
target forwards — without running the 0.5B model. Only time is not replayed: a cost model (ms per
forward of n tokens, measured on the real target) turns forward counts into an estimated speed-up.
This is how the scheduler's defaults were tuned; the real benchmark still decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache

from dspark_lsp.engine.costs import interpolate_cost


@dataclass
class _Cfg:
    vocab_size: int


class ReplayTarget(nn.Module):
    """Logits at position p are one-hot on ``sequence[p + 1]`` (``eos`` past the end).

    ``features`` (optional, [len(sequence), d]): the real target's last hidden states over ``sequence``,
    returned as the last of ``hidden_states`` when asked, so a feature draft can be replayed too. Rows
    for a fed token that differs from the sequence are wrong, but the decode loop keeps only the rows of
    accepted tokens, which match it."""

    def __init__(self, sequence: list[int], vocab_size: int, eos: int,
                 features: torch.Tensor | None = None) -> None:
        super().__init__()
        self.sequence = list(sequence)
        self.eos = eos
        self.features = features
        self.config = _Cfg(vocab_size)
        self._dummy = nn.Parameter(torch.zeros(1), requires_grad=False)
        self.forward_sizes: list[int] = []

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: DynamicCache | None = None,
        use_cache: bool = True,
        output_hidden_states: bool = False,
        position_ids: torch.Tensor | None = None,
        **_: Any,
    ) -> Any:
        assert cache is not None
        n = int(input_ids.shape[1])
        start = int(cache.get_seq_length())
        kv = torch.zeros(1, 1, n, 1)
        cache.update(kv, kv, 0)
        self.forward_sizes.append(n)
        # Rows may be a chain plus alternates (engine.alternates): each row answers for its position id.
        pos = list(range(start, start + n)) if position_ids is None else [int(x) for x in position_ids[0]]
        logits = torch.full((1, n, self.config.vocab_size), -1e4)
        for i, at in enumerate(pos):
            p = at + 1
            tok = self.sequence[p] if p < len(self.sequence) else self.eos
            logits[0, i, tok] = 0.0

        class _Out:
            pass

        out = _Out()
        out.logits = logits  # type: ignore[attr-defined]
        if output_hidden_states:
            if self.features is None:
                raise ValueError("this replay target has no features")
            known = self.features.shape[0]
            # Rows fed past the known sequence are padding, never kept: zeros.
            rows = torch.stack([self.features[at] if at < known else self.features.new_zeros(self.features.shape[1])
                                for at in pos])
            out.hidden_states = (rows[None],)  # type: ignore[attr-defined]
        return out


def estimated_ms(forward_sizes: list[int], cost_ms: dict[int, float]) -> float:
    """Total ms for a list of forward sizes under a cost table (see engine.costs.interpolate_cost)."""
    return sum(interpolate_cost(cost_ms, n) for n in forward_sizes)

"""How closely a method's greedy outputs follow a reference's (``target_fp32``: the GGUF file's weights,
dequantized, in plain fp32 arithmetic), prompt by prompt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def first_divergence(output: Sequence[int], reference: Sequence[int]) -> int:
    """Index of the first token where ``output`` and ``reference`` differ.

    Where one is a prefix of the other (one stopped at EOS first) they differ at the shorter one's end;
    identical outputs count as their full length.
    """
    for i, (a, b) in enumerate(zip(output, reference, strict=False)):
        if a != b:
            return i
    return min(len(output), len(reference))


def fidelity(outputs: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Share of prompts with identical output, and the first-divergence position (mean, min) over prompts."""
    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs against {len(reference)} reference outputs")
    n = len(outputs)
    if n == 0:
        return {"prompts": 0, "identical_prompts": 0, "identical_share": None, "mean_first_divergence": None,
                "min_first_divergence": None, "mean_reference_tokens": None}
    same = sum(list(a) == list(b) for a, b in zip(outputs, reference, strict=True))
    div = [first_divergence(a, b) for a, b in zip(outputs, reference, strict=True)]
    return {
        "prompts": n,
        "identical_prompts": same,
        "identical_share": round(same / n, 4),
        "mean_first_divergence": round(sum(div) / n, 2),
        "min_first_divergence": min(div),
        "mean_reference_tokens": round(sum(len(r) for r in reference) / n, 2),
    }

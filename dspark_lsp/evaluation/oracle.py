"""The oracle cut: the best place to end the model's raw output, chosen knowing the answer.

Any stop rule that ends the completion at a line boundary produces one of these cuts, so the best of them
(by pass@1 where tests exist, then edit similarity) bounds what stop rules can reach with this model and
prompt. Candidates: nothing, the raw text up to each line break, and the whole raw text (the model's own
end). Identical candidates (after the metrics' normalisation) are judged once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dspark_lsp.evaluation.metrics import edit_similarity, normalise


@dataclass(frozen=True)
class OracleCut:
    text: str
    passed: bool | None  # None: the problem has no tests
    similarity: float
    candidates: int  # distinct cuts judged


def line_cuts(raw: str) -> list[str]:
    """Every line-boundary prefix of ``raw``, shortest first, without duplicates."""
    cuts = [""]
    cuts += [raw[:i] for i, ch in enumerate(raw) if ch == "\n"]
    cuts.append(raw)
    seen: set[str] = set()
    out: list[str] = []
    for c in cuts:
        key = normalise(c)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def oracle_cut(raw: str, reference: str, check: Callable[[str], bool] | None = None) -> OracleCut:
    """The best cut of ``raw``: one that passes ``check`` if any does (the most similar of those), else
    the most similar overall. Ties go to the shorter cut. Tests run most-similar first and stop at the
    first pass among equals, so a problem costs few test runs unless nothing passes."""
    cuts = line_cuts(raw)
    scored = [(edit_similarity(c, reference), -i, c) for i, c in enumerate(cuts)]
    scored.sort(reverse=True)
    best_sim, _, best = scored[0]
    if check is None:
        return OracleCut(best, None, best_sim, len(cuts))
    for sim, _, c in scored:
        if check(c):
            return OracleCut(c, True, sim, len(cuts))
    return OracleCut(best, False, best_sim, len(cuts))

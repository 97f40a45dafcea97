"""Text metrics of one completion against the hole it fills, and the aggregates the report needs.

Both strings are normalised the same way first: ``\\r\\n`` to ``\\n`` and trailing blank space dropped
(the editor shows no difference, and the service itself strips it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def normalise(text: str) -> str:
    return text.replace("\r\n", "\n").rstrip()


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insert, delete, substitute; unit costs), two rows of the DP table."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def edit_similarity(completion: str, reference: str) -> float:
    """1 - distance / longer length, in [0, 1] (1 = identical; two empty strings are identical)."""
    a, b = normalise(completion), normalise(reference)
    longest = max(len(a), len(b))
    return 1.0 if longest == 0 else 1.0 - edit_distance(a, b) / longest


def exact_match(completion: str, reference: str) -> bool:
    return normalise(completion) == normalise(reference)


def line_count(text: str) -> int:
    """Lines of text a completion shows (0 for an empty or blank one)."""
    t = normalise(text)
    return 0 if not t else t.count("\n") + 1


@dataclass(frozen=True)
class Length:
    """Completion vs hole, in lines: where a stop rule ends the text too late or too early."""

    completion_lines: int
    reference_lines: int

    @property
    def too_long(self) -> bool:
        return self.completion_lines > self.reference_lines

    @property
    def too_short(self) -> bool:
        return self.completion_lines < self.reference_lines


def length_of(completion: str, reference: str) -> Length:
    return Length(line_count(completion), line_count(reference))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None

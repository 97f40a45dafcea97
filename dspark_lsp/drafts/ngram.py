"""Prompt-lookup drafting: propose what followed the latest earlier occurrence of the current n-gram.

Free (no forward pass) and strong on code, which repeats identifiers and whole lines. Besides the
context itself it can search an extra token corpus (e.g. the rest of the document outside the prompt
window), given by the caller, and the target's own recent outputs for the document (``set_recent``).

The recent outputs are searched first, for each n-gram length. While the user types, consecutive requests
ask the target about nearly the same place: the answer it gave at the last pause (the rest of the line,
the next lines) mostly reappears in the next one, shifted by what was typed, and the typed-through cache
only catches the case where the user typed exactly its first characters. Where the user typed something
else and then resumed the suggested code (the next line, the rest of a call), the lookup finds where the
old answer resumes and proposes what followed there: the target's own words, which it tends to accept.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from dspark_lsp.engine.draft import DraftSource, Proposal, RecentOutputs


class NgramDraftSource(DraftSource):
    name = "ngram"
    supports_parallel = True

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1, extra_corpus: list[int] | None = None) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.extra_corpus = list(extra_corpus or [])
        self.set_recent(None)

    @property
    def extra_corpus(self) -> list[int]:
        return self._extra

    @extra_corpus.setter
    def extra_corpus(self, tokens: list[int]) -> None:
        # The corpus (up to thousands of tokens of the document outside the prompt window) is set once
        # per request but searched at every draft step: index each n-gram's latest continuation once
        # rather than scanning the whole corpus on the decode hot path.
        self._extra = list(tokens)
        self._extra_index: dict[tuple[int, ...], int] = {}
        for n in range(self.min_ngram, self.max_ngram + 1):
            for i in range(len(self._extra) - n + 1):
                self._extra_index[tuple(self._extra[i : i + n])] = i + n

    def set_corpus(self, corpus: Callable[[], list[int]]) -> None:
        self.extra_corpus = corpus()

    def set_recent(self, recent: RecentOutputs | None) -> None:
        """Index the document's recent outputs (oldest first): each n-gram's continuation in the newest
        output that has one (a later output, and a later place in it, wins). Only n-grams followed by at
        least one token are indexed, so a match at an output's very end does not hide an earlier one."""
        self._recent = recent
        self._recent_index: dict[tuple[int, ...], tuple[int, int]] = {}
        for which, out in enumerate(recent.outputs if recent is not None else ()):
            for n in range(self.min_ngram, self.max_ngram + 1):
                for i in range(len(out) - n):
                    self._recent_index[tuple(out[i : i + n])] = (which, i + n)

    def reset(self) -> None:
        pass

    @staticmethod
    def _confidence(n: int) -> float:
        # A longer matched n-gram predicts its continuation better; 1-gram matches are weak, so they
        # fall below the default tau and only their first token is proposed.
        return min(1.0, 0.35 + 0.2 * n)

    def _lookup(self, haystack: list[int], pattern: list[int], exclude_end: int) -> int | None:
        """Start index (in haystack) of the token after the latest match of ``pattern`` before exclude_end."""
        n = len(pattern)
        first = pattern[0]
        for i in range(exclude_end - n, -1, -1):
            if haystack[i] == first and haystack[i : i + n] == pattern:
                return i + n
        return None

    def propose(
        self,
        context: list[int],
        max_tokens: int,
        *,
        parallel: bool,
        tau: float,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Proposal:
        if max_tokens <= 0 or not context:
            return Proposal()
        want = max_tokens if parallel else 1
        recent = self._recent if self._recent_index else None
        tail = recent.tail(context) if recent is not None else []
        for n in range(min(self.max_ngram, len(context)), self.min_ngram - 1, -1):
            pattern = context[-n:]
            hit = self._recent_index.get(tuple(tail[-n:])) if len(tail) >= n else None
            if hit is not None and recent is not None:
                said = list(recent.outputs[hit[0]][hit[1] : hit[1] + want])
                conf = self._confidence(n)
                return Proposal(tokens=said, confidence=[conf] * len(said), dists=None, forwards=0)
            # The context itself, excluding the trailing occurrence that is the pattern.
            start = self._lookup(context, pattern, len(context) - 1)
            source = context
            if start is None and self._extra:
                start = self._extra_index.get(tuple(pattern))
                source = self._extra
            if start is None:
                continue
            tokens = source[start : start + want]
            if not tokens:
                continue
            conf = self._confidence(n)
            return Proposal(tokens=list(tokens), confidence=[conf] * len(tokens), dists=None, forwards=0)
        return Proposal()

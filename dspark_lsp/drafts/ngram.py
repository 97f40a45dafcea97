"""Prompt-lookup drafting: propose what followed the latest earlier occurrence of the current n-gram.

Free (no forward pass) and strong on code, which repeats identifiers and whole lines. Besides the
context itself it can search an extra token corpus (e.g. the rest of the document outside the prompt
window), given by the caller.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from dspark_lsp.engine.draft import DraftSource, Proposal


class NgramDraftSource(DraftSource):
    name = "ngram"
    supports_parallel = True

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1, extra_corpus: list[int] | None = None) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.extra_corpus = list(extra_corpus or [])

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
        for n in range(min(self.max_ngram, len(context)), self.min_ngram - 1, -1):
            pattern = context[-n:]
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

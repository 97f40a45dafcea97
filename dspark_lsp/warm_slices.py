"""How many prompt tokens a background warm-up prefills between checks for a waiting request.

A request that arrives while a warm-up runs waits for the warm-up's current slice to finish. A fixed
slice of 128 tokens is 0.25-0.6 s on the 0.5B, but the 1.5B prefills 4-5 times slower, so the same slice
kept a request waiting 1.3-1.9 s. The slice is sized instead from the measured prefill rate so that one
slice takes about ``target_ms``, never more than the 128 tokens it was (the 0.5B keeps them) and never
under 64: smaller slices cost throughput, each re-reading the weights (the 1.5B warmed at 9.9 ms a token
in 128-token slices and 15.1 in 32-48-token ones, bench/results/2026-12-04-1p5b-server/).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WarmSlices:
    target_ms: float = 600.0  # the longest a 128-token slice took on the 0.5B
    smallest: int = 64
    largest: int = 128
    first: int = 128  # before any warm-up has been timed
    ms_per_token: float | None = None  # smoothed over the warm-ups so far

    def size(self) -> int:
        if self.ms_per_token is None or self.ms_per_token <= 0:
            return self.first
        tokens = int(self.target_ms / self.ms_per_token) // 16 * 16
        return max(self.smallest, min(self.largest, tokens))

    def observe(self, tokens: int, seconds: float) -> None:
        """A finished (or cancelled) warm-up prefilled ``tokens`` in ``seconds``; runs shorter than two
        slices of the smallest size say more about fixed costs than the rate, and are not counted."""
        if tokens < 2 * self.smallest or seconds <= 0:
            return
        rate = seconds * 1000.0 / tokens
        self.ms_per_token = rate if self.ms_per_token is None else 0.5 * self.ms_per_token + 0.5 * rate

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
    ms_per_token: float | None = None  # smoothed over the warm-ups so far (or estimated, see below)
    measured: bool = False  # ms_per_token comes from a timed warm-up

    def size(self) -> int:
        if self.ms_per_token is None or self.ms_per_token <= 0:
            return self.first
        tokens = int(self.target_ms / self.ms_per_token) // 16 * 16
        return max(self.smallest, min(self.largest, tokens))

    @classmethod
    def from_verify_cost(cls, cost_ms: dict[int, float]) -> WarmSlices:
        """Slices priced before any warm-up is timed, from the verify-cost curve measured at load: its
        widest forward's ms per token (the 1.5B's 8-token forward, ~10 ms a token, is its warm-up rate;
        the 0.5B's ~3.4 overstates its ~2 and still gives it 128). Without it, the first warm-up ran at
        the untimed 128 tokens, and the 1.5B's first request after opening a file waited ~0.8 s behind it."""
        slices = cls()
        widest = max((n for n in cost_ms if n > 0 and cost_ms[n] > 0), default=0)
        if widest >= 4:  # a one- or two-token forward is mostly fixed cost, not a rate
            slices.ms_per_token = cost_ms[widest] / widest
        return slices

    def observe(self, tokens: int, seconds: float) -> None:
        """A finished (or cancelled) warm-up prefilled ``tokens`` in ``seconds``; runs shorter than two
        slices of the smallest size say more about fixed costs than the rate, and are not counted."""
        if tokens < 2 * self.smallest or seconds <= 0:
            return
        rate = seconds * 1000.0 / tokens
        # The first measured rate replaces the verify curve's estimate; later ones are smoothed.
        self.ms_per_token = rate if not self.measured else 0.5 * (self.ms_per_token or rate) + 0.5 * rate
        self.measured = True

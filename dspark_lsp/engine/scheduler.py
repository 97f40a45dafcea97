"""The confidence scheduler: how many tokens to draft per round and the draft-confidence threshold."""

from __future__ import annotations

from dspark_lsp.engine.config import SchedulerConfig


class ConfidenceScheduler:
    """k from an exponential average of recent accepted lengths; tau adapted from streaks.

    k = round(ema of accepted tokens) + 1: a draft that keeps being accepted in full earns a longer next
    draft (up to k_max); a rejection early in the draft shrinks it towards k_min, where a wasted draft
    costs least. One scheduler lives for one decode call; the caller may seed it from the last call's
    final state so a document keeps what was learnt.
    """

    def __init__(self, config: SchedulerConfig) -> None:
        config.validate()
        self.config = config
        self.tau = config.tau
        self._ema = float(config.k_start - 1)
        self._reject_run = 0
        self._accept_run = 0
        self.k_trace: list[int] = []
        self.tau_trace: list[float] = []

    def next_k(self) -> int:
        c = self.config
        if c.fixed_k is not None:
            k = c.fixed_k
        else:
            k = max(c.k_min, min(c.k_max, int(round(self._ema)) + 1))
        self.k_trace.append(k)
        self.tau_trace.append(self.tau)
        return k

    def update(self, proposed: int, accepted: int) -> None:
        """Record one round: ``proposed`` draft tokens, of which the first ``accepted`` matched."""
        c = self.config
        if proposed == 0:
            return
        self._ema = (1 - c.ema_alpha) * self._ema + c.ema_alpha * accepted
        if accepted < proposed:
            self._reject_run += 1
            self._accept_run = 0
            if self._reject_run >= c.reject_streak:
                self.tau = max(c.tau_min, self.tau * c.tau_down)
                self._reject_run = 0
        else:
            self._accept_run += 1
            self._reject_run = 0
            if self._accept_run >= c.accept_streak:
                self.tau = min(c.tau_max, self.tau * c.tau_up)
                self._accept_run = 0

    def state(self) -> tuple[float, float]:
        return self._ema, self.tau

    def restore(self, state: tuple[float, float]) -> None:
        self._ema, self.tau = state

"""The confidence scheduler: how many tokens to draft per round and the draft-confidence threshold."""

from __future__ import annotations

from dataclasses import dataclass

from dspark_lsp.engine.config import SchedulerConfig
from dspark_lsp.engine.costs import interpolate_cost


@dataclass(frozen=True)
class DraftCost:
    """What drafting k tokens costs a round, for the cost-aware choice of k: ``ms`` per draft forward
    times the forwards a k-token draft takes, ``per_round + per_token * k``.

    A draft that steps one token per forward (an autoregressive model, or a chain whose model link is
    one) has ``per_token`` ~1 (below 1 when a lookup in front drafts some tokens for free) and
    ``per_round`` 0; one that drafts a block per forward has ``per_round`` ~1 (the forwards a round
    takes, measured) and ``per_token`` 0. A lookup costs nothing (``ms`` 0): the default.
    """

    ms: float = 0.0
    per_token: float = 0.0
    per_round: float = 0.0

    def ms_for(self, k: int) -> float:
        """Draft ms of a round that drafts ``k`` tokens (none for k = 0: no draft is asked)."""
        if k <= 0 or self.ms <= 0.0:
            return 0.0
        return self.ms * (self.per_round + self.per_token * k)


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
        self._hits = 0.0  # decayed count of accepted draft tokens
        self._tries = 0.0  # decayed count of draft tokens tried (accepted + the first rejected)
        self._idle = 0
        self._probing = False  # this round's k is the idle probe's (see _cost_aware_k)
        self._draft = DraftCost()  # the current draft's price (set_draft_cost); free until told
        self.k_trace: list[int] = []
        self.tau_trace: list[float] = []

    def next_k(self) -> int:
        c = self.config
        self._probing = False
        if c.fixed_k is not None:
            k = c.fixed_k
        elif c.verify_cost_ms:
            k = self._cost_aware_k()
        else:
            k = max(c.k_min, min(c.k_max, int(round(self._ema)) + 1))
        self.k_trace.append(k)
        self.tau_trace.append(self.tau)
        return k

    def set_draft_cost(self, cost: DraftCost) -> None:
        """The price of the draft the next rounds use (the decoder measures it per source). Cost-aware
        mode only: it shortens k for a draft whose forward is not free, down to drafting nothing where
        no draft length earns its draft and verify time."""
        self._draft = cost

    def _cost(self, n: int) -> float:
        return interpolate_cost(self.config.verify_cost_ms or {1: 1.0}, n)

    def _value(self, k: int, *, drafting: bool = True) -> float:
        """Expected tokens per ms of a round that drafts k tokens at the running acceptance rate: the
        verify of k + 1 tokens plus (``drafting``) the draft forwards k tokens take."""
        r = min(max(self._rate, 0.0), 0.999)
        ms = self._cost(k + 1) + (self._draft.ms_for(k) if drafting else 0.0)
        return (1.0 + sum(r**j for j in range(1, k + 1))) / ms

    def pays(self, n_draft: int, p_reach: float, draft_ms: float) -> bool:
        """Cost-aware mode: is draft token number ``n_draft`` worth its cost?

        It is worth ``p_reach`` expected tokens (the draft's probability that it and every token
        before it are right) and costs ``draft_ms`` to draft plus what verifying it adds, both in units
        of one target forward. Without a cost model (the plain rule, fixed_k) nothing pays and tau
        alone decides.
        """
        if not self.config.verify_cost_ms or n_draft <= 0:
            return False
        one = self._cost(1)
        extra = max(0.0, self._cost(n_draft + 1) - self._cost(n_draft))
        # 2% of a forward is below the noise of a measured curve: a token that costs that little is free.
        price = (draft_ms + extra) / one
        return price <= 0.02 or p_reach >= price

    def pays_at_rate(self, n_draft: int, p_reach: float, draft_ms: float) -> bool:
        """For calibrated confidences: is draft token number ``n_draft`` (1-based) worth drafting and
        verifying? Its expected yield, ``p_reach`` tokens, must match what the time it adds (its draft
        forward plus the verify rows it adds) would produce at the best rate the running acceptance
        promises (expected tokens per ms of the best draft length, its draft time included: the rate a
        round really achieves). :meth:`pays` prices a token in
        forwards, which undercharges it when a forward yields more than one token."""
        if not self.config.verify_cost_ms or n_draft <= 0:
            return p_reach >= self.tau
        extra = max(0.0, self._cost(n_draft + 1) - self._cost(n_draft))
        rate = max(self._value(k) for k in range(0, self.config.k_max + 1))
        return p_reach >= (draft_ms + extra) * rate

    def slot_price(self, width: int) -> float | None:
        """What one more row costs a verify forward of ``width`` rows, in target forwards (None without
        a cost model: then only slots that padding would fill anyway are free)."""
        if not self.config.verify_cost_ms:
            return None
        return max(0.0, self._cost(width + 1) - self._cost(width)) / self._cost(1)

    def worth(self, proposed: int) -> bool:
        """Cost-aware mode: is verifying a draft of this length better than no draft at all? A probe's
        draft always is: the probe exists to measure acceptance, which only a verify does (were it
        dropped, a low estimate could never rise again and the call would stop drafting for good).
        The draft's own time is spent by now, whatever is decided: only the verify is weighed."""
        if not self.config.verify_cost_ms or proposed == 0 or self._probing:
            return True
        return self._value(proposed, drafting=False) >= self._value(0)

    def _cost_aware_k(self) -> int:
        """argmax over k of E[tokens per round] / (cost(k + 1) + draft ms of k tokens), with geometric
        acceptance at rate r.

        E[tokens] = 1 + r + r^2 + ... + r^k: the target always adds one token, and draft token j is
        kept only if all before it were. The draft's time (set_draft_cost) is what makes a long draft
        from a model whose step is not free cost more than its verify alone says.
        """
        c = self.config
        best_k, best = c.k_min, self._value(c.k_min)
        for k in range(c.k_min + 1, c.k_max + 1):
            value = self._value(k)
            if value > best + 1e-12:  # ties go to the shorter draft
                best_k, best = k, value
        # When even the cheapest draft costs more than it is expected to save (a CPU where verifying 2
        # tokens costs twice one, or a draft forward priced near the target's), draft nothing; every 4th
        # such round still probes (with the best k) so the acceptance estimate can recover when the text
        # turns repetitive; `worth` lets the probe's draft through to the verify, the only thing that
        # moves the estimate.
        if self._value(0) > best:
            self._idle += 1
            if self._idle % 4 != 0:
                return 0
            self._probing = True
        else:
            self._idle = 0
        return best_k

    def update(self, proposed: int, accepted: int) -> None:
        """Record one round: ``proposed`` draft tokens, of which the first ``accepted`` matched."""
        c = self.config
        if proposed == 0:
            return
        self._ema = (1 - c.ema_alpha) * self._ema + c.ema_alpha * accepted
        # Per-token acceptance: a round that kept m of n tokens saw m successes and (n > m) one failure.
        trials = accepted + (1 if accepted < proposed else 0)
        self._hits = c.accept_rate_decay * self._hits + accepted
        self._tries = c.accept_rate_decay * self._tries + trials
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

    @property
    def _rate(self) -> float:
        c = self.config
        return (self._hits + c.accept_rate_prior * c.accept_rate_start) / (self._tries + c.accept_rate_prior)

    def state(self) -> tuple[float, float, float, float]:
        """What the scheduler learnt (accepted-length average, tau, decayed accepted / tried counts)."""
        return self._ema, self.tau, self._hits, self._tries

    def restore(self, state: tuple[float, ...]) -> None:
        self._ema, self.tau = state[0], state[1]
        if len(state) > 3:
            self._hits, self._tries = state[2], state[3]

"""The draft half of a decode round: fill up to k positions, step by step, and stop where guessing on
stops paying (docs/ALGORITHM.md, *One round*, step 2).

A step is autoregressive (one token) at a key position and parallel (several tokens from one draft
forward or a lookup) elsewhere. After every token the stop rule asks whether the next one is worth its
draft forward and verify slot: the seed's tau rule (an unsure token ends the round unless the cost model
says it pays), or, for a calibrated draft, the cost rule at the running acceptance rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import torch

from dspark_lsp.engine.config import DecodeConfig, DraftMode
from dspark_lsp.engine.draft import NO_SLOT, DraftSource, Proposal
from dspark_lsp.engine.scheduler import ConfidenceScheduler, DraftCost
from dspark_lsp.engine.stats import DecodeStats

KeyFn = Callable[[list[int]], bool]  # generated ids so far -> is the next position a key position?

T = TypeVar("T")


def _at(items: Sequence[T] | None, i: int, default: T) -> T:
    """``items[i]``, or ``default`` where a source left its optional list short or out."""
    return items[i] if items is not None and i < len(items) else default


def _smooth(table: dict[str, float], name: str, sample: float) -> None:
    old = table.get(name)
    table[name] = sample if old is None else 0.8 * old + 0.2 * sample


@dataclass
class DraftMeter:
    """What drafting costs, per draft source name, smoothed over rounds and kept across calls (so a
    call prices its first round with what earlier calls measured): ms per draft forward, draft forwards
    per round and per drafted token, and tokens per forward of the steps that could draft several.

    The scheduler's :class:`DraftCost` comes from these. Whether a draft pays per token or per round
    is the step's shape: an autoregressive draft (``supports_parallel`` False, or draft_mode "ar") pays
    one forward per token. A parallel-capable one is measured, since a chain (n-gram lookup in front of
    an autoregressive model: the 1.5B's 0.5B draft) says it supports parallel steps for its lookup's
    sake, while its model still drafts one token per forward; a source whose forwards yield (smoothed)
    at most one token each is priced per token too. Otherwise a round costs its measured forwards
    whatever k is. Semi-autoregressive mode sits in between (a parallel block, plus one forward per
    key position the round crosses); its measured forwards per round include those AR steps, but are
    charged as a constant: the lower bound, since key positions are a minority of a round's tokens and
    a per-token charge would make a parallel draft look as dear as an autoregressive one.
    """

    ms: dict[str, float] = field(default_factory=dict)
    per_round: dict[str, float] = field(default_factory=dict)
    per_token: dict[str, float] = field(default_factory=dict)
    per_forward: dict[str, float] = field(default_factory=dict)  # tokens per forward, parallel steps

    def cost(self, draft: DraftSource, mode: DraftMode) -> DraftCost:
        name = draft.name
        ms = self.ms.get(name, 0.0)
        stepwise = mode == "ar" or not draft.supports_parallel or self.per_forward.get(name, 2.0) <= 1.0
        if stepwise:
            # Before a round is measured: one forward per token, as an autoregressive model takes.
            return DraftCost(ms, per_token=self.per_token.get(name, 1.0))
        return DraftCost(ms, per_round=self.per_round.get(name, 1.0))

    def step(self, name: str, ms: float, forwards: int, tokens: int, could_batch: bool) -> None:
        """One draft call: ``ms`` of it spent on ``forwards`` forwards that drafted ``tokens`` tokens
        (``could_batch``: a parallel step asked for more than one)."""
        if forwards <= 0:
            return  # a lookup: free, and it says nothing about the model behind it
        _smooth(self.ms, name, ms / forwards)
        if could_batch:
            _smooth(self.per_forward, name, tokens / forwards)

    def round(self, name: str, forwards: int, tokens: int) -> None:
        """One round's drafting: ``forwards`` draft forwards for the ``tokens`` it kept."""
        if forwards <= 0 and tokens <= 0:
            return
        _smooth(self.per_round, name, float(forwards))
        if tokens > 0:
            _smooth(self.per_token, name, forwards / tokens)


class DraftRound:
    """One round's drafting: the proposal built so far and what the stop rule needs to judge it.

    ``meter`` is the decoder's :class:`DraftMeter` (kept across calls, so the cost rule prices a
    forward before this call has measured one); this round updates it."""

    def __init__(
        self,
        draft: DraftSource,
        sched: ConfidenceScheduler,
        config: DecodeConfig,
        is_key: KeyFn | None,
        stats: DecodeStats,
        meter: DraftMeter,
        generator: torch.Generator | None,
    ) -> None:
        self.draft, self.sched, self.config, self.is_key = draft, sched, config, is_key
        self.stats, self.meter, self.generator = stats, meter, generator
        self.forwards = 0  # draft forwards this round
        self.name = draft.name
        self.calibrated = draft.calibrated
        self.by_cost = self.calibrated and sched.config.calibrated_stop == "cost"
        self.tau = sched.tau  # fixed for the round: the scheduler moves tau only between rounds
        self.cum = 1.0  # the draft's own probability that every token so far is right
        self.out = Proposal(dists=[] if config.temperature > 0 else None, alternates=[])

    def run(self, ids: list[int], generated: list[int], k: int) -> Proposal:
        """Up to ``k`` tokens after ``ids`` (``generated``: its tail this call produced, which the
        key-position test reads)."""
        key_cut = False  # the last block stopped at a position already classified as key
        while len(self.out.tokens) < k:
            parallel = self._parallel(generated, key_cut)
            want = k - len(self.out.tokens) if parallel else 1
            p = self._step(ids, want, parallel)
            if not p.tokens:
                break
            key_cut, low_confidence = self._keep(p, want, parallel, generated)
            # Neither a key cut (the next step drafts that key position) nor a source that returned
            # fewer tokens than asked (a lookup that ran out, a draft that stopped at its own tau) ends
            # the round: whether to draft on is the stop rule's call, and the next step starts from an
            # exact context instead of a blind mask guess.
            if low_confidence:
                break
        self.meter.round(self.name, self.forwards, len(self.out.tokens))
        return self.out

    def _parallel(self, generated: list[int], key_cut: bool) -> bool:
        """Whether the next step drafts several tokens at once: never at a key position in semi mode
        (a block there was just cut, or the syntax says so)."""
        if self.config.draft_mode == "ar" or not self.draft.supports_parallel:
            return False
        if self.config.draft_mode == "parallel":
            return True
        if key_cut:
            return False
        return not (self.is_key(generated + self.out.tokens) if self.is_key is not None else False)

    def _step(self, ids: list[int], want: int, parallel: bool) -> Proposal:
        """One draft call, timed per forward for the cost rule and counted in the stats."""
        t0 = time.perf_counter()
        p = self.draft.propose(ids + self.out.tokens, want, parallel=parallel, tau=self.tau,
                               temperature=self.config.temperature, generator=self.generator)
        ms = (time.perf_counter() - t0) * 1000
        self.meter.step(self.name, ms, p.forwards, len(p.tokens[:want]), parallel and want > 1)
        self.forwards += p.forwards
        self.stats.draft_forwards += p.forwards
        if parallel:
            self.stats.draft_steps_parallel += 1
        else:
            self.stats.draft_steps_ar += 1
        return p

    def _keep(self, p: Proposal, want: int, parallel: bool, generated: list[int]) -> tuple[bool, bool]:
        """Move the step's tokens into the round while the stop rule allows: (cut at a key position,
        stopped for low confidence)."""
        tokens = p.tokens[:want]
        for i, tok in enumerate(tokens):
            conf = _at(p.confidence, i, 1.0)
            n = len(self.out.tokens)
            # Semi-autoregressive: a parallel block ends where the text reaches a key position (a guess
            # there, made blind to the tokens before it, is the least likely to land); the next step
            # drafts that position autoregressively. A free lookup is not cut.
            if (
                i > 0 and parallel and p.forwards > 0 and self.config.draft_mode == "semi"
                and self.is_key is not None and self.is_key(generated + self.out.tokens)
            ):
                return True, False
            self.cum *= conf
            if self._stop_before(n, conf):
                return False, True
            self._append(p, i, int(tok), conf)
            # A token already in this step costs no further draft forward; the next step would.
            more_ms = 0.0 if i + 1 < len(tokens) else self.meter.ms.get(self.name, 0.0)
            if self._stop_after(n, conf, more_ms):
                return False, True
        return False, False

    def _stop_before(self, n: int, conf: float) -> bool:
        """Is token number n + 1 (confidence ``conf``) not worth keeping? The first token of a round is
        always kept under tau: verifying 2 tokens costs about what 1 does on a memory-bound CPU, so a
        weak guess is nearly free; a calibrated confidence is trusted to say when even that is not."""
        if self.by_cost:
            return not self.sched.pays_at_rate(n + 1, self.cum, 0.0)
        return conf < self.tau and (n > 0 or self.calibrated) and not self.sched.pays(n + 1, self.cum, 0.0)

    def _stop_after(self, n: int, conf: float, more_ms: float) -> bool:
        """Having kept token n + 1, is drafting token n + 2 not worth ``more_ms`` of draft time and its
        verify slot? Its own confidence is not known yet: this one's is the best guess of it."""
        if self.by_cost:
            return not self.sched.pays_at_rate(n + 2, self.cum * conf, more_ms)
        return conf < self.tau and not self.sched.pays(n + 2, self.cum, more_ms)

    def _append(self, p: Proposal, i: int, tok: int, conf: float) -> None:
        self.out.add(tok, conf, _at(p.dists, i, None), partial(_at, p.alternates, i, []), _at(p.slots, i, NO_SLOT),
                     _at(p.sources, i, "") or self.name)

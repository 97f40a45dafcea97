"""Issue 32: in cost-aware mode a draft whose forward is not free (the 0.5B drafting for the 1.5B) is
scheduled by its measured cost: k shrinks as the draft's forward gets dearer, down to drafting nothing,
while a free draft (n-gram lookup) is scheduled exactly as before."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dspark_lsp.drafts.causal_lm import ModelDraftSource
from dspark_lsp.drafts.hybrid import HybridDraftSource
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource, Proposal
from dspark_lsp.engine.scheduler import ConfidenceScheduler, DraftCost

# A GPU-like curve: a 1.5B target forward of 1 token ~40 ms, each further verified token +2 ms... +4 ms.
VERIFY = {1: 40.0, 2: 44.0, 4: 52.0, 6: 60.0}


def fixed_rate(rate: float, table: dict[int, float] = VERIFY, k_max: int = 5) -> SchedulerConfig:
    # A prior of 1e9 pseudo-trials pins the acceptance estimate at `rate` whatever the rounds say.
    return SchedulerConfig(k_min=1, k_max=k_max, verify_cost_ms=table, accept_rate_start=rate,
                           accept_rate_prior=1e9)


def k_for(draft: DraftCost, rate: float = 0.8) -> int:
    sched = ConfidenceScheduler(fixed_rate(rate))
    sched.set_draft_cost(draft)
    return sched.next_k()


def test_k_shrinks_as_an_autoregressive_drafts_forward_gets_dearer() -> None:
    # At 80% acceptance: free drafting verifies 5; 5 ms a draft forward makes the 5th not worth it, 20 ms
    # every token past the first; at 60 ms (more than a target forward) nothing pays.
    ks = [k_for(DraftCost(ms, per_token=1.0)) for ms in (0.0, 5.0, 20.0, 60.0)]
    assert ks == [5, 4, 1, 0]


def test_the_chosen_k_is_the_best_value_with_the_draft_time_in() -> None:
    """Brute force: k maximises E[tokens] / (verify(k + 1) + ms * k) over 0..k_max for an AR draft."""
    verify = {1: 40.0, 2: 44.0, 3: 48.0, 4: 52.0, 5: 56.0, 6: 60.0}  # VERIFY, interpolated
    for rate in (0.3, 0.6, 0.8, 0.95):
        for ms in (0.0, 2.0, 5.0, 10.0, 20.0):
            values = {k: sum(rate**j for j in range(k + 1)) / (verify[k + 1] + ms * k) for k in range(6)}
            k = k_for(DraftCost(ms, per_token=1.0), rate)
            assert values[k] == pytest.approx(max(values.values()), rel=1e-9), (rate, ms)


def test_where_no_draft_pays_only_every_4th_round_probes() -> None:
    sched = ConfidenceScheduler(fixed_rate(0.8))
    sched.set_draft_cost(DraftCost(60.0, per_token=1.0))
    ks = []
    for _ in range(8):
        ks.append(sched.next_k())
        # The probe's draft is verified (it is what moves the estimate); an idle round has none.
        assert sched.worth(1) or ks[-1] == 0
    assert ks == [0, 0, 0, 1, 0, 0, 0, 1]


def test_a_draft_that_is_already_paid_for_is_judged_by_its_verify_alone() -> None:
    # At 60 ms no draft pays up front, but once one token is drafted (a probe's, say) its time is spent:
    # verifying it (44 ms for 1.8 expected tokens) beats verifying none (40 ms for 1).
    sched = ConfidenceScheduler(fixed_rate(0.8))
    sched.set_draft_cost(DraftCost(60.0, per_token=1.0))
    assert sched.next_k() == 0
    assert sched.worth(1)


def test_a_parallel_draft_pays_per_round_not_per_token() -> None:
    # One forward drafts the whole block: its 20 ms do not grow with k, so the long draft still wins.
    assert k_for(DraftCost(20.0, per_round=1.0)) == 5
    assert k_for(DraftCost(20.0, per_token=1.0)) == 1
    # A chain drafting half its tokens by free lookup pays half the autoregressive price.
    assert k_for(DraftCost(10.0, per_token=1.0)) == k_for(DraftCost(20.0, per_token=0.5))


@pytest.mark.parametrize("table", [VERIFY, {1: 128.0, 2: 126.0, 4: 245.0, 8: 265.0}, {1: 10.0, 2: 20.0}])
def test_a_free_draft_is_scheduled_as_before(table: dict[int, float]) -> None:
    """A lookup (0 ms) or a draft not measured yet: the same k and idle rounds as with no draft price."""
    rounds = [(3, 3), (3, 0), (2, 1), (5, 5), (1, 0), (1, 0), (1, 0), (4, 2)] * 3
    traces = []
    for cost in (None, DraftCost(), DraftCost(0.0, per_token=1.0), DraftCost(0.0, per_round=2.0)):
        sched = ConfidenceScheduler(SchedulerConfig(verify_cost_ms=table))
        if cost is not None:
            sched.set_draft_cost(cost)
        for proposed, accepted in rounds:
            sched.next_k()
            sched.update(proposed, accepted)
        traces.append(sched.k_trace)
    assert traces[0] == traces[1] == traces[2] == traces[3]


# --------------------------------------------------------------------------- inside the decode loop
class SlowDraft(DraftSource):
    """The target itself as an autoregressive draft, made wrong where the context length is a multiple of
    3 (so some drafts are rejected) and ``delay`` seconds slower per draft forward."""

    supports_parallel = False

    def __init__(self, target: Any, delay: float, name: str = "slow") -> None:
        self.model, self.delay, self.name = ModelDraftSource(target, 48), delay, name

    def propose(self, context: list[int], max_tokens: int, **kw: Any) -> Proposal:
        p = self.model.propose(context, max_tokens, parallel=False, tau=0.0)
        p.tokens = [(t * 7 + 1) % 48 if (len(context) + i) % 3 == 0 else t for i, t in enumerate(p.tokens)]
        time.sleep(self.delay * p.forwards)
        return p

    def reset(self) -> None:
        self.model.reset()


@pytest.fixture(scope="module")
def target(random_lm: Any) -> Any:
    return random_lm(7, vocab_size=48, hidden=32, layers=1, head_scale=16.0)


def test_a_slow_draft_drafts_less_and_the_output_stays_the_targets(target: Any) -> None:
    prompt = [5, 9, 5, 9, 11, 3, 2]
    cfg = DecodeConfig(max_new_tokens=30, draft_mode="ar", alternates=0, scheduler=SchedulerConfig(verify_cost_ms=VERIFY))
    alone = SpeculativeDecoder(target).generate(prompt, config=cfg)
    free = SpeculativeDecoder(target).generate(prompt, config=cfg, draft=SlowDraft(target, 0.0))
    slow = SpeculativeDecoder(target).generate(prompt, config=cfg, draft=SlowDraft(target, 0.06))
    assert free.tokens == slow.tokens == alone.tokens  # lossless, whatever the draft costs
    assert free.stats.accepted > 0 and 0 not in free.stats.k_trace  # a free draft pays every round
    # A 60 ms draft forward costs more than a 40 ms target forward: after the first (unpriced) round only
    # the probes draft, one token each.
    assert slow.stats.proposed < free.stats.proposed / 2
    assert slow.stats.k_trace.count(0) > len(slow.stats.k_trace) / 2


def test_a_lookup_in_front_of_an_autoregressive_model_is_priced_per_token(target: Any) -> None:
    """The 1.5B's 0.5B draft is a hybrid: a chain that supports parallel steps (its lookup does) but whose
    model spends one forward per token. The meter must see that, or a round would cost one forward."""
    decoder = SpeculativeDecoder(target)
    draft = HybridDraftSource(SlowDraft(target, 0.01, name="slow-model"))
    cfg = DecodeConfig(max_new_tokens=24, draft_mode="semi", scheduler=SchedulerConfig(verify_cost_ms=VERIFY))
    decoder.generate([5, 9, 11, 3, 2], config=cfg, draft=draft)
    cost = decoder._draft_meter.cost(draft, "semi")
    assert cost.ms >= 10.0
    assert cost.per_round == 0.0 and 0.0 < cost.per_token <= 1.0

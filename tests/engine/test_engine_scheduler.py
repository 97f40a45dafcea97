"""The confidence scheduler: k within [k_min, k_max], tau adapted by streaks and clamped, fixed_k."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_lsp.drafts.causal_lm import ModelDraftSource
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource, Proposal
from dspark_lsp.engine.scheduler import ConfidenceScheduler

COST_TABLES = [
    {1: 128.0, 2: 126.0, 4: 245.0, 6: 230.0, 8: 265.0},  # CPU fp32 (docs/KERNEL.md)
    {1: 1.0, 4: 1.02, 8: 1.05},  # GPU: flat
    {1: 10.0, 2: 20.0, 3: 30.0},  # linear
    {3: 5.0},  # a single point
]


@st.composite
def configs(draw: st.DrawFn) -> SchedulerConfig:
    k_min = draw(st.integers(1, 4))
    k_max = draw(st.integers(k_min, 8))
    tau_min = draw(st.floats(0.05, 0.6))
    tau_max = draw(st.floats(tau_min, 1.0))
    return SchedulerConfig(
        k_min=k_min,
        k_max=k_max,
        k_start=draw(st.integers(0, 10)),
        tau=draw(st.floats(tau_min, tau_max)),
        tau_min=tau_min,
        tau_max=tau_max,
        ema_alpha=draw(st.floats(0.05, 1.0)),
        verify_cost_ms=draw(st.one_of(st.none(), st.sampled_from(COST_TABLES))),
        accept_rate_start=draw(st.floats(0.0, 1.0)),
    )


@settings(max_examples=60, deadline=None)
@given(config=configs(), rounds=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), max_size=60))
def test_k_and_tau_stay_in_their_ranges(config: SchedulerConfig, rounds: list[tuple[int, int]]) -> None:
    sched = ConfidenceScheduler(config)
    for proposed, accepted in rounds:
        k = sched.next_k()
        # 0 = "no draft this round": only the cost-aware rule may say so (drafting would not pay).
        assert config.k_min <= k <= config.k_max or (k == 0 and config.verify_cost_ms is not None)
        assert config.tau_min - 1e-12 <= sched.tau <= config.tau_max + 1e-12
        sched.update(proposed, min(accepted, proposed))
    last = sched.next_k()
    assert config.k_min <= last <= config.k_max or (last == 0 and config.verify_cost_ms is not None)
    assert len(sched.k_trace) == len(sched.tau_trace) == len(rounds) + 1


def test_tau_falls_after_three_rejecting_rounds_in_a_row() -> None:
    sched = ConfidenceScheduler(SchedulerConfig(tau=0.9))
    sched.update(3, 1)
    sched.update(3, 0)
    assert sched.tau == pytest.approx(0.9)  # two are not enough
    sched.update(3, 2)
    assert sched.tau == pytest.approx(0.9 * 0.95)
    # The streak restarts: three more rejections for the next step down.
    sched.update(2, 0)
    sched.update(2, 0)
    assert sched.tau == pytest.approx(0.855)
    sched.update(2, 0)
    assert sched.tau == pytest.approx(0.855 * 0.95)


def test_a_fully_accepted_round_breaks_a_rejection_streak() -> None:
    sched = ConfidenceScheduler(SchedulerConfig(tau=0.9))
    for proposed, accepted in [(3, 0), (3, 1), (3, 3), (3, 0), (3, 0)]:
        sched.update(proposed, accepted)
    assert sched.tau == pytest.approx(0.9)


def test_tau_rises_after_five_fully_accepted_rounds_in_a_row() -> None:
    sched = ConfidenceScheduler(SchedulerConfig(tau=0.8, tau_max=0.99))
    for _ in range(4):
        sched.update(2, 2)
    assert sched.tau == pytest.approx(0.8)
    sched.update(4, 4)
    assert sched.tau == pytest.approx(0.84)
    sched.update(3, 1)  # a rejection resets the accept streak
    for _ in range(4):
        sched.update(1, 1)
    assert sched.tau == pytest.approx(0.84)
    sched.update(1, 1)
    assert sched.tau == pytest.approx(0.882)


def test_tau_is_clamped() -> None:
    sched = ConfidenceScheduler(SchedulerConfig(tau=0.9, tau_min=0.8, tau_max=0.92))
    for _ in range(30):
        sched.update(3, 0)
    assert sched.tau == pytest.approx(0.8)
    for _ in range(50):
        sched.update(3, 3)
    assert sched.tau == pytest.approx(0.92)


def test_empty_rounds_change_nothing() -> None:
    sched = ConfidenceScheduler(SchedulerConfig(tau=0.9))
    before = sched.state()
    for _ in range(10):
        sched.update(0, 0)
    assert sched.state() == before


def test_k_follows_recent_acceptance() -> None:
    sched = ConfidenceScheduler(SchedulerConfig(k_min=1, k_max=5, k_start=3))
    assert sched.next_k() == 3
    for _ in range(10):
        sched.update(5, 5)
    assert sched.next_k() == 5  # long drafts keep being accepted: draft more
    for _ in range(10):
        sched.update(5, 0)
    assert sched.next_k() == 1  # early rejections: draft less


def test_fixed_k_ignores_history() -> None:
    sched = ConfidenceScheduler(SchedulerConfig(fixed_k=2))
    for proposed, accepted in [(2, 2)] * 8 + [(2, 0)] * 8:
        assert sched.next_k() == 2
        sched.update(proposed, accepted)


def test_state_round_trip() -> None:
    a = ConfidenceScheduler(SchedulerConfig())
    for _ in range(3):
        a.update(3, 0)
    b = ConfidenceScheduler(SchedulerConfig())
    b.restore(a.state())
    assert b.state() == a.state()
    assert b.next_k() == a.next_k()


def test_cost_aware_k_drafts_long_when_verifying_more_is_free_and_drafts_land() -> None:
    sched = ConfidenceScheduler(SchedulerConfig(k_min=1, k_max=5, verify_cost_ms={1: 10.0, 8: 10.0}))
    for _ in range(20):
        sched.update(5, 5)
    assert sched.next_k() == 5


def test_cost_aware_k_drafts_short_when_drafts_fail() -> None:
    sched = ConfidenceScheduler(SchedulerConfig(k_min=1, k_max=5, verify_cost_ms={1: 10.0, 2: 10.0, 6: 30.0}))
    for _ in range(20):
        sched.update(3, 0)
    assert sched.next_k() == 1


def test_cost_aware_k_follows_the_acceptance_rate() -> None:
    """Under a linear cost, extra draft tokens pay only when they are nearly always accepted."""
    cfg = SchedulerConfig(k_min=1, k_max=5, verify_cost_ms={1: 10.0, 2: 10.0, 4: 14.0, 8: 40.0})
    good, bad = ConfidenceScheduler(cfg), ConfidenceScheduler(cfg)
    for _ in range(30):
        good.update(4, 4)
        bad.update(4, 1)
    assert good.next_k() > bad.next_k()
    assert bad.next_k() >= cfg.k_min and good.next_k() <= cfg.k_max


@pytest.mark.parametrize("table", COST_TABLES)
def test_cost_aware_k_is_the_best_value_for_its_rate(table: dict[int, float]) -> None:
    """Brute force: the chosen k maximises E[tokens] / cost(k + 1) over {0} and [k_min, k_max], where
    E[tokens] = 1 + r + ... + r^k and the cost is interpolated (extrapolated linearly past the table);
    k = 0 (no draft) wins only when no draft length pays for its verification."""

    def cost(n: int) -> float:
        keys = sorted(table)
        if n <= keys[0]:
            return table[keys[0]]
        if n >= keys[-1]:
            return table[keys[-1]] * n / keys[-1]
        a = max(x for x in keys if x <= n)
        b = min(x for x in keys if x >= n)
        return table[a] if a == b else table[a] + (table[b] - table[a]) * (n - a) / (b - a)

    for rate in (0.0, 0.3, 0.6, 0.9, 0.99):
        sched = ConfidenceScheduler(
            SchedulerConfig(k_min=1, k_max=7, verify_cost_ms=table, accept_rate_start=rate)
        )
        values = {k: sum(rate**j for j in range(k + 1)) / cost(k + 1) for k in range(0, 8)}
        assert values[sched.next_k()] == pytest.approx(max(values.values()), rel=1e-9)


# --------------------------------------------------------------------------- inside the decode loop
class AlwaysWrong(DraftSource):
    name = "wrong"
    supports_parallel = True

    def propose(self, context: list[int], max_tokens: int, **kw: Any) -> Proposal:
        n = max_tokens if kw.get("parallel") else 1
        return Proposal(tokens=[(context[-1] * 7 + 1) % 48] * n, confidence=[1.0] * n)

    def reset(self) -> None:
        pass


@pytest.fixture(scope="module")
def target(random_lm: Any) -> Any:
    return random_lm(41, vocab_size=48, hidden=32, layers=1, head_scale=16.0)


def test_decode_traces_show_tau_falling_on_rejections(target: Any) -> None:
    decoder = SpeculativeDecoder(target)
    # Make sure the "always wrong" draft really is wrong for this target: its token must never be the argmax.
    res = decoder.generate([1, 2, 3], config=DecodeConfig(max_new_tokens=12), draft=AlwaysWrong())
    assert res.stats.accepted == 0, "the test's draft happened to be right; pick another rule"
    assert res.stats.tau_trace[:7] == [0.9, 0.9, 0.9, 0.855, 0.855, 0.855, 0.8122]
    assert res.stats.k_trace[:4] == [3, 2, 1, 1]
    # The next call of the same document continues from the state the scheduler ended in.
    again = decoder.generate(
        [1, 2, 3],
        config=DecodeConfig(max_new_tokens=3),
        draft=AlwaysWrong(),
        scheduler_state=res.scheduler_state,
    )
    assert res.scheduler_state is not None
    assert again.stats.tau_trace[0] == pytest.approx(res.scheduler_state[1], abs=1e-4)


def test_decode_traces_show_tau_rising_on_full_acceptance(target: Any) -> None:
    decoder = SpeculativeDecoder(target)
    cfg = DecodeConfig(
        max_new_tokens=40, draft_mode="ar", scheduler=SchedulerConfig(tau=0.5, tau_min=0.5, k_max=3)
    )
    res = decoder.generate([1, 2, 3], config=cfg, draft=ModelDraftSource(target, 48))
    assert res.stats.accepted == res.stats.proposed > 0
    assert res.stats.tau_trace[:7] == [0.5] * 5 + [0.525] * 2
    assert max(res.stats.k_trace) == 3 and min(res.stats.k_trace) >= 1


@pytest.mark.parametrize("fixed_k", [0, 1, 4])
def test_fixed_k_in_the_decode_loop(target: Any, fixed_k: int) -> None:
    cfg = DecodeConfig(
        max_new_tokens=30, draft_mode="ar", scheduler=SchedulerConfig(fixed_k=fixed_k, tau=0.5, tau_min=0.5)
    )
    res = SpeculativeDecoder(target).generate([1, 2, 3], config=cfg, draft=ModelDraftSource(target, 48))
    assert set(res.stats.k_trace) == {fixed_k}
    assert res.stats.proposed <= fixed_k * len(res.stats.k_trace)
    if fixed_k == 0:
        assert res.stats.proposed == 0 and res.stats.target_forwards == 30


def test_cost_aware_drafts_nothing_when_verifying_costs_more_than_it_saves() -> None:
    # A CPU where 2 tokens cost twice one and acceptance is poor: no draft, except a periodic probe.
    costly = SchedulerConfig(verify_cost_ms={1: 100.0, 2: 200.0, 4: 180.0, 8: 200.0}, accept_rate_start=0.2)
    sched = ConfidenceScheduler(costly)
    ks = [sched.next_k() for _ in range(7)]
    assert ks.count(0) == 6 and all(k >= costly.k_min for k in ks if k)
    assert not sched.worth(1)  # a round that is not a probe: its draft would not pay
    assert sched.next_k() >= costly.k_min and sched.worth(1)  # the 8th round probes: its draft is verified
    # Where verification is nearly free, the same poor acceptance still drafts every round.
    cheap = SchedulerConfig(verify_cost_ms={1: 100.0, 8: 104.0}, accept_rate_start=0.2)
    sched = ConfidenceScheduler(cheap)
    assert all(sched.next_k() >= 1 for _ in range(8)) and sched.worth(1)


def test_pays_weighs_the_chance_of_landing_against_draft_and_verify_cost() -> None:
    flat_after_two = ConfidenceScheduler(SchedulerConfig(verify_cost_ms={1: 100.0, 2: 112.0, 4: 112.0, 8: 113.0}))
    # Draft token 1 makes the forward 2 tokens: +12% of a forward, so it needs a 12% chance to land.
    assert not flat_after_two.pays(1, 0.1, 0.0) and flat_after_two.pays(1, 0.2, 0.0)
    # Tokens 2..7 add no verify time: a free lookup token is kept at any confidence ...
    assert all(flat_after_two.pays(n, 0.001, 0.0) for n in range(2, 8))
    # ... a model-drafted one must cover its draft forward (5 ms = 5% of a target forward).
    assert not flat_after_two.pays(3, 0.04, 5.0) and flat_after_two.pays(3, 0.06, 5.0)
    linear = ConfidenceScheduler(SchedulerConfig(verify_cost_ms={1: 10.0, 2: 20.0, 3: 30.0}))
    assert not any(linear.pays(n, 0.99, 0.0) for n in range(0, 6))  # each token costs a whole forward
    assert not ConfidenceScheduler(SchedulerConfig()).pays(3, 1.0, 0.0)  # no cost model: tau decides


class LowConfidenceLookup(DraftSource):
    """A free (0-forward) source whose guesses are all low-confidence: tau would cut them at 1 token."""

    name = "lookup"
    supports_parallel = True

    def propose(self, context: list[int], max_tokens: int, **kw: Any) -> Proposal:
        n = max_tokens if kw.get("parallel") else 1
        return Proposal(tokens=[(context[-1] * 7 + 1) % 48] * n, confidence=[0.3] * n, forwards=0)

    def reset(self) -> None:
        pass


def test_free_lookups_are_not_cut_by_tau_where_verifying_more_is_free(target: Any) -> None:
    def proposed(costs: dict[int, float] | None) -> int:
        # A fixed, optimistic acceptance estimate isolates the tau rule from `worth`.
        sched = SchedulerConfig(fixed_k=4, verify_cost_ms=costs, accept_rate_start=0.99, accept_rate_prior=1e9)
        res = SpeculativeDecoder(target).generate(
            [1, 2, 3], config=DecodeConfig(max_new_tokens=20, scheduler=sched), draft=LowConfidenceLookup()
        )
        assert res.stats.accepted == 0  # the guesses are wrong: one new token per round
        return res.stats.proposed

    # 19 rounds after the prefill; the last 18 have room for min(4, room) draft tokens.
    full = sum(min(4, room) for room in range(18, 0, -1))
    assert proposed({1: 100.0, 8: 100.0}) == full  # flat: all 4 guesses verified every round
    assert proposed({1: 100.0, 2: 100.0, 3: 200.0, 8: 700.0}) == 18  # 2nd guess costs: tau stops at 1
    assert proposed(None) == 18  # no cost model: tau alone decides


def test_a_run_of_misses_does_not_stop_drafting_where_one_token_in_four_lands() -> None:
    # Each draft token adds ~15% to the verify forward: a draft pays only if it lands > ~15% of the time.
    sched = ConfidenceScheduler(SchedulerConfig(verify_cost_ms={1: 89.0, 2: 102.0, 3: 115.0, 4: 128.0, 8: 180.0}))
    ks = []
    for _ in range(12):  # 1 of every 4 single-token drafts lands, misses come in runs of 3
        for accepted in (0, 0, 0, 1):
            ks.append(sched.next_k())
            sched.update(1, accepted)
    assert 0.15 < sched.state()[2] / sched.state()[3] < 0.35  # the counts see ~1 in 4
    assert ks.count(0) == 0  # drafting pays at 25% and never stops


class WrongAtFirst(DraftSource):
    """Right (the target's own greedy choice) after its first ``wrong`` calls, wrong before."""

    name = "wrong-at-first"
    supports_parallel = False

    def __init__(self, target: Any, wrong: int) -> None:
        self.model, self.calls, self.wrong = ModelDraftSource(target, 48), 0, wrong

    def propose(self, context: list[int], max_tokens: int, **kw: Any) -> Proposal:
        self.calls += 1
        p = self.model.propose(context, max_tokens, parallel=False, tau=0.0)
        if self.calls <= self.wrong:
            p.tokens = [(t * 7 + 1) % 48 for t in p.tokens]
        return p

    def reset(self) -> None:
        self.model.reset()


def test_a_probe_is_verified_so_a_call_that_stopped_drafting_can_start_again(target: Any) -> None:
    """After a run of misses the rate estimate says no draft pays (each draft token adds 15% to a
    forward); every 4th round probes with one token. The probe's draft must be verified, or the estimate
    never moves again: the draft below turns right after 14 calls, and drafting resumes."""
    sched = SchedulerConfig(verify_cost_ms={1: 100.0, 2: 115.0, 4: 145.0, 8: 205.0})
    src = WrongAtFirst(target, wrong=14)
    res = SpeculativeDecoder(target).generate(
        [1, 2, 3], config=DecodeConfig(max_new_tokens=80, draft_mode="ar", scheduler=sched), draft=src
    )
    assert src.calls > 14
    assert 0 in res.stats.k_trace  # it did stop drafting for a while
    assert res.stats.accepted >= 20  # and then drafted again, right

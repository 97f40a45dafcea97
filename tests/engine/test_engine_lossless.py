"""Greedy speculative decoding is lossless: for random tiny models, prompts, schedules, draft modes and
draft sources, SpeculativeDecoder's output equals the target alone (draft=None) and HF's greedy generate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dspark_lsp.drafts.causal_lm import ModelDraftSource
from dspark_lsp.drafts.hybrid import HybridDraftSource
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource

DRAFT_KINDS = ("ngram", "model", "self", "hybrid")


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    vocab = draw(st.sampled_from([32, 48, 64]))
    # A small alphabet makes prompts repetitive, so n-gram lookup actually finds matches.
    alphabet = draw(st.integers(2, vocab))
    prompt = draw(st.lists(st.integers(0, alphabet - 1), min_size=1, max_size=24))
    k_min = draw(st.integers(1, 3))
    k_max = draw(st.integers(k_min, 6))
    fixed_k = draw(st.one_of(st.none(), st.integers(0, 6)))
    tau = draw(st.floats(0.1, 0.99))
    key_rule = draw(st.one_of(st.none(), st.tuples(st.integers(1, 7), st.integers(1, 4))))
    return {
        "vocab": vocab,
        "target_seed": draw(st.integers(0, 2**16)),
        "draft_seed": draw(st.integers(0, 2**16)),
        "target_layers": draw(st.integers(1, 2)),
        "target_hidden": draw(st.sampled_from([16, 32])),
        "prompt": prompt,
        "max_new_tokens": draw(st.integers(1, 24)),
        "draft_kind": draw(st.sampled_from(DRAFT_KINDS)),
        "draft_mode": draw(st.sampled_from(["semi", "ar", "parallel"])),
        "scheduler": SchedulerConfig(
            k_min=k_min,
            k_max=k_max,
            k_start=draw(st.integers(k_min, k_max)),
            tau=tau,
            tau_min=0.05,
            tau_max=1.0,
            fixed_k=fixed_k,
            # The cost-aware k rule (the service's default) or the plain "accepted + 1" rule.
            verify_cost_ms=draw(
                st.sampled_from([None, {1: 128.0, 2: 126.0, 4: 245.0, 8: 265.0}, {1: 1.0, 8: 1.05}])
            ),
        ),
        "key_rule": key_rule,
        "eos": draw(st.one_of(st.none(), st.integers(0, vocab - 1))),
        "max_ngram": draw(st.integers(1, 4)),
        "extra_corpus": draw(st.lists(st.integers(0, alphabet - 1), max_size=16)),
    }


def _key_fn(rule: tuple[int, int] | None) -> Callable[[list[int]], bool] | None:
    if rule is None:
        return None
    a, m = rule
    return lambda ids: (a * sum(ids) + len(ids)) % m == 0


def _draft(kind: str, case: dict[str, Any], target: Any, random_lm: Any) -> DraftSource:
    vocab = case["vocab"]
    ngram = NgramDraftSource(max_ngram=case["max_ngram"], extra_corpus=case["extra_corpus"])
    if kind == "ngram":
        return ngram
    if kind == "self":
        return ModelDraftSource(target, vocab, name="self")
    other = random_lm(case["draft_seed"], vocab_size=vocab, hidden=16, layers=1, head_scale=16.0)
    if kind == "model":
        return ModelDraftSource(other, vocab, name="other")
    return HybridDraftSource(ModelDraftSource(other, vocab, name="other"), ngram)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_speculative_greedy_equals_target_alone_and_hf_generate(
    case: dict[str, Any], random_lm: Any, greedy_reference: Any
) -> None:
    target = random_lm(
        case["target_seed"],
        vocab_size=case["vocab"],
        hidden=case["target_hidden"],
        layers=case["target_layers"],
        head_scale=16.0,
    )
    draft = _draft(case["draft_kind"], case, target, random_lm)
    eos = () if case["eos"] is None else (case["eos"],)
    sched: SchedulerConfig = case["scheduler"]
    config = DecodeConfig(
        max_new_tokens=case["max_new_tokens"], draft_mode=case["draft_mode"], scheduler=sched
    )
    decoder = SpeculativeDecoder(target)

    alone = decoder.generate(
        case["prompt"], config=DecodeConfig(max_new_tokens=case["max_new_tokens"]), eos_ids=eos
    )
    spec = decoder.generate(
        case["prompt"], config=config, draft=draft, eos_ids=eos, is_key=_key_fn(case["key_rule"])
    )
    hf = greedy_reference(target, case["prompt"], case["max_new_tokens"], eos_token_id=case["eos"])

    assert alone.tokens == hf
    assert spec.tokens == alone.tokens
    assert spec.stop_reason == alone.stop_reason
    if len(spec.tokens) < case["max_new_tokens"]:
        assert spec.stop_reason == "eos"
    else:
        assert spec.stop_reason == "max_tokens"

    # Per-call stats are consistent with what happened.
    s = spec.stats
    rounds = s.target_forwards - 1  # one prefill chunk (prompts here are short)
    assert s.new_tokens == len(spec.tokens)
    assert s.prompt_tokens == len(case["prompt"])
    assert sum(s.accepted_hist.values()) == rounds
    assert 0 <= s.accepted <= s.proposed
    assert s.new_tokens <= 1 + s.accepted + rounds
    assert s.proposed <= sum(s.k_trace)
    assert len(s.k_trace) == len(s.tau_trace) <= rounds
    if sched.fixed_k is not None:
        assert set(s.k_trace) <= {sched.fixed_k}
    else:
        # k = 0 ("no draft this round") is the cost-aware rule's call when drafting would not pay.
        lowest = 0 if sched.verify_cost_ms else sched.k_min
        assert all(lowest <= k <= sched.k_max for k in s.k_trace)
    assert all(sched.tau_min <= t <= sched.tau_max for t in s.tau_trace)
    if case["draft_kind"] == "ngram":
        assert s.draft_forwards == 0
    # Target-only decoding is exactly one token per target forward.
    if alone.stop_reason == "max_tokens":
        assert alone.stats.target_forwards == len(alone.tokens)
        assert alone.stats.tokens_per_forward == 1.0


def test_self_draft_is_fully_accepted(random_lm: Any) -> None:
    """The target drafting for itself agrees with its own verification (and so saves forwards)."""
    target = random_lm(7, vocab_size=64, hidden=32, layers=2, head_scale=16.0)
    decoder = SpeculativeDecoder(target)
    config = DecodeConfig(
        max_new_tokens=30, draft_mode="ar", scheduler=SchedulerConfig(fixed_k=4, tau=0.05, tau_min=0.05)
    )
    res = decoder.generate([1, 2, 3, 4], config=config, draft=ModelDraftSource(target, 64, name="self"))
    alone = decoder.generate([1, 2, 3, 4], config=DecodeConfig(max_new_tokens=30))
    assert res.tokens == alone.tokens
    assert res.stats.proposed > 0
    assert res.stats.accepted == res.stats.proposed
    # 1 prefill token + rounds of (4 accepted + 1 bonus): far fewer forwards than tokens.
    assert res.stats.target_forwards < alone.stats.target_forwards // 2


def test_wrong_draft_costs_forwards_but_not_output(random_lm: Any) -> None:
    """A draft that is always wrong is rejected every round; the output is still the target's."""

    class WrongDraft(DraftSource):
        name = "wrong"
        supports_parallel = True

        def __init__(self, prompt: list[int], reference: list[int]) -> None:
            self.prompt, self.reference = prompt, reference
            self.calls = 0

        def propose(self, context: list[int], max_tokens: int, **kw: Any) -> Any:
            from dspark_lsp.engine.draft import Proposal

            self.calls += 1
            want = max_tokens if kw.get("parallel") else 1
            # The target's own next token at this context shifted by one: never its argmax.
            done = len(context) - len(self.prompt)
            nxt = self.reference[done] if done < len(self.reference) else 0
            return Proposal(tokens=[(nxt + 1) % 64] * want, confidence=[1.0] * want)

        def reset(self) -> None:
            pass

    target = random_lm(11, vocab_size=64, hidden=16, layers=1, head_scale=16.0)
    decoder = SpeculativeDecoder(target)
    prompt = [5, 6, 7]
    reference = decoder.generate(prompt, config=DecodeConfig(max_new_tokens=20)).tokens
    draft = WrongDraft(prompt, reference)
    res = decoder.generate(prompt, config=DecodeConfig(max_new_tokens=20), draft=draft)
    assert res.tokens == reference
    assert draft.calls > 0
    assert res.stats.accepted == 0
    assert res.stats.target_forwards == 20  # no saving: one token per forward
    assert res.stats.accepted_hist[0] == 19

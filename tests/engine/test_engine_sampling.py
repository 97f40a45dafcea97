"""Speculative sampling (temperature > 0) keeps the target's output distribution.

Many decode calls with different seeds draw the first tokens; the empirical distribution of the tokens
decided by speculative acceptance is compared with the exact target distribution by a chi-square test
(fixed seeds: deterministic). Broken acceptance rules run through the same check and must fail it,
which shows the check has the power to catch them.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from dspark_lsp.drafts.causal_lm import ModelDraftSource
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource, Proposal

V = 12
TEMPERATURE = 0.7


# ------------------------------------------------------------------------------------------ helpers
def chi2_pvalue(samples: list[int], probs: torch.Tensor) -> float:
    """Pearson chi-square goodness-of-fit p-value; cells expecting < 5 samples are pooled."""
    n = len(samples)
    counts = Counter(samples)
    expected = (probs.double() * n).tolist()
    observed = [counts.get(i, 0) for i in range(len(expected))]
    assert sum(observed) == n, "a sample outside the vocabulary"
    big = [i for i, e in enumerate(expected) if e >= 5]
    small = [i for i, e in enumerate(expected) if e < 5]
    cells = [(observed[i], expected[i]) for i in big]
    if small:
        rest = (sum(observed[i] for i in small), sum(expected[i] for i in small))
        if rest[1] >= 5 or not cells:
            cells.append(rest)
        else:  # pool the leftovers into the smallest real cell
            j = min(range(len(cells)), key=lambda c: cells[c][1])
            cells[j] = (cells[j][0] + rest[0], cells[j][1] + rest[1])
    stat = sum((o - e) ** 2 / e for o, e in cells)
    df = len(cells) - 1
    assert df >= 2, "too few cells for a meaningful test"
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2)))


def assert_follows(samples: list[int], probs: torch.Tensor, alpha: float = 1e-3) -> None:
    p = chi2_pvalue(samples, probs)
    assert p > alpha, f"samples do not follow the target distribution (chi-square p = {p:.3g})"


class BigramTarget(torch.nn.Module):
    """A transparent 'language model': next-token logits depend on the last token only.

    Exact marginals are matrix products, and a forward costs microseconds, so thousands of decode calls
    stay cheap. It speaks the HF interface the engine uses (input_ids, past_key_values, .logits).
    """

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        from transformers import Qwen2Config

        self.table = torch.nn.Parameter(table.float(), requires_grad=False)
        # Only used to build a DynamicCache with one layer.
        self.config = Qwen2Config(
            vocab_size=table.shape[0],
            num_hidden_layers=1,
            hidden_size=8,
            num_attention_heads=1,
            num_key_value_heads=1,
        )

    def forward(self, input_ids: torch.Tensor, past_key_values: Any = None, use_cache: bool = True) -> Any:
        if past_key_values is not None:
            z = torch.zeros(1, 1, input_ids.shape[1], 1)
            past_key_values.update(z, z, 0)  # keeps the cache length in step with the tokens fed
        return SimpleNamespace(logits=self.table[input_ids])

    def next_probs(self) -> torch.Tensor:
        """Row-stochastic transition matrix at TEMPERATURE."""
        return torch.softmax(self.table.double() / TEMPERATURE, dim=-1)


class FixedQDraft(DraftSource):
    """A deliberately wrong draft: every proposed token is sampled from one fixed distribution q."""

    name = "fixed-q"
    supports_parallel = True

    def __init__(self, q: torch.Tensor) -> None:
        self.q = q / q.sum()

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
        want = max_tokens if parallel else 1
        toks = [int(torch.multinomial(self.q, 1, generator=generator).item()) for _ in range(want)]
        return Proposal(tokens=toks, confidence=[1.0] * want, dists=[self.q] * want, forwards=0)

    def reset(self) -> None:
        pass


def peaked_q(avoid: torch.Tensor) -> torch.Tensor:
    """q putting 85% on the token ``avoid`` (a distribution) likes least."""
    q = torch.full((V,), 0.15 / (V - 1))
    q[int(torch.argmin(avoid))] = 0.85
    return q


def sample_tokens(
    decoder: SpeculativeDecoder, prompt: list[int], draft: Any, n: int, *, k: int, keep: int
) -> list[list[int]]:
    """The first ``keep`` generated tokens of ``n`` calls with seeds 0..n-1 (k draft tokens a round)."""
    config = SchedulerConfig(fixed_k=k, tau=0.5, tau_min=0.5)
    out = []
    for seed in range(n):
        res = decoder.generate(
            prompt,
            config=DecodeConfig(
                max_new_tokens=keep + 1,
                temperature=TEMPERATURE,
                seed=seed,
                scheduler=config,
                draft_mode="parallel",
            ),
            draft=draft,
            stop=lambda ids: len(ids) >= keep,
        )
        assert len(res.tokens) >= keep
        out.append(res.tokens[:keep])
    return out


# -------------------------------------------------------------------------- broken rules (test-side)
class AlwaysAccept(SpeculativeDecoder):
    """BROKEN: accepts every draft token (what a lossy 'trust the draft' shortcut would do)."""

    def _accept_sampled(self, logits, draft, dists, config, generator):  # type: ignore[no-untyped-def]
        p_all = torch.softmax(logits[:, : self.vocab_size] / config.temperature, dim=-1)
        return len(draft), int(torch.multinomial(p_all[len(draft)], 1, generator=generator).item())


class ResampleFromTarget(SpeculativeDecoder):
    """BROKEN: the right acceptance test, but a rejection resamples from p instead of norm(max(p - q, 0))."""

    def _accept_sampled(self, logits, draft, dists, config, generator):  # type: ignore[no-untyped-def]
        p_all = torch.softmax(logits[:, : self.vocab_size] / config.temperature, dim=-1)
        for i, d in enumerate(draft):
            q = dists[i] if i < len(dists) else None
            q_d = 1.0 if q is None else float(q[d])
            if float(torch.rand((), generator=generator)) < min(1.0, float(p_all[i, d]) / q_d):
                continue
            return i, int(torch.multinomial(p_all[i], 1, generator=generator).item())
        return len(draft), int(torch.multinomial(p_all[len(draft)], 1, generator=generator).item())


# -------------------------------------------------------------------------------- the real target
@pytest.fixture(scope="module")
def qwen_case(random_lm: Any) -> dict[str, Any]:
    """A tiny random Qwen2 target, a prompt, and the exact distributions of generated tokens 1 and 2."""
    target = random_lm(5, vocab_size=V, hidden=16, layers=1, head_scale=8.0)
    prompt = [3, 1, 4, 1, 5]
    with torch.no_grad():
        p1 = torch.softmax(target(torch.tensor([prompt])).logits[0, -1].double() / TEMPERATURE, -1)
        batch = torch.tensor([prompt + [t] for t in range(V)])
        p2_given = torch.softmax(target(batch).logits[:, -1].double() / TEMPERATURE, -1)
    return {"target": target, "prompt": prompt, "p1": p1, "p2": p1 @ p2_given}


def test_sampled_second_token_follows_target_with_a_different_draft(qwen_case: dict[str, Any]) -> None:
    """1000 calls on a real (tiny) Qwen2 target: token 1 comes from the prefill, token 2 is decided by
    speculative acceptance of a draft that puts 85% of its mass where the target puts the least.
    (The 2000-sample tests below use a cheaper bigram target and check more positions.)"""
    p1, p2 = qwen_case["p1"], qwen_case["p2"]
    draft = FixedQDraft(peaked_q(p2))
    decoder = SpeculativeDecoder(qwen_case["target"])
    samples = sample_tokens(decoder, qwen_case["prompt"], draft, 1000, k=1, keep=2)
    assert_follows([s[0] for s in samples], p1)
    assert_follows([s[1] for s in samples], p2)
    # The draft's favourite token is drafted ~85% of the time but must appear at its target rate.
    fav = int(torch.argmax(draft.q))
    rate = sum(s[1] == fav for s in samples) / len(samples)
    assert abs(rate - float(p2[fav])) < 0.02


def test_always_accept_fails_the_same_check(qwen_case: dict[str, Any]) -> None:
    draft = FixedQDraft(peaked_q(qwen_case["p2"]))
    samples = sample_tokens(AlwaysAccept(qwen_case["target"]), qwen_case["prompt"], draft, 300, k=1, keep=2)
    with pytest.raises(AssertionError, match="do not follow"):
        assert_follows([s[1] for s in samples], qwen_case["p2"])


# ------------------------------------------------------------------ bigram target: more positions
@pytest.fixture(scope="module")
def bigram() -> BigramTarget:
    g = torch.Generator().manual_seed(1234)
    return BigramTarget(torch.randn(V, V, generator=g) * 1.5)


def _marginals(target: BigramTarget, last: int, steps: int) -> list[torch.Tensor]:
    P = target.next_probs()
    cur = P[last]
    out = [cur]
    for _ in range(steps - 1):
        cur = cur @ P
        out.append(cur)
    return out


CYCLIC_PROMPT = list(range(V)) + [0]  # every token has an earlier successor: n-gram always proposes


@pytest.mark.parametrize(("draft_kind", "k"), [("ngram", 2), ("fixed_q", 2), ("self", 1)])
def test_tokens_decided_by_drafts_follow_target(bigram: BigramTarget, draft_kind: str, k: int) -> None:
    """Tokens 2 and 3 follow the target whichever way they were decided: an accepted draft token, a
    resampled correction, or the bonus token after a fully accepted round.

    * ngram, k=2: no q (one-hot), accepted with probability p(d);
    * fixed_q, k=2: a q far from p, so mostly corrections;
    * self, k=1: the target drafting for itself (q = p: always accepted), so token 3 is always the bonus.
    """
    m = _marginals(bigram, CYCLIC_PROMPT[-1], 3)
    draft = _bigram_draft(draft_kind, m, bigram)
    samples = sample_tokens(SpeculativeDecoder(bigram), CYCLIC_PROMPT, draft, 2000, k=k, keep=3)
    for pos in range(3):
        assert_follows([s[pos] for s in samples], m[pos])


def _bigram_draft(kind: str, marginals: list[torch.Tensor], target: BigramTarget | None = None) -> Any:
    if kind == "ngram":
        return NgramDraftSource(max_ngram=1)
    if kind == "self":
        return ModelDraftSource(target, V, name="self")
    return FixedQDraft(peaked_q(marginals[1]))


# Sample sizes: always accepting is caught with a few hundred samples; resampling from p instead of the
# residual is a subtler bias and needs the full 2000 (chi-square p ~ 1e-9 there).
@pytest.mark.parametrize(
    ("broken", "draft_kind", "n"),
    [(AlwaysAccept, "ngram", 300), (AlwaysAccept, "fixed_q", 300), (ResampleFromTarget, "ngram", 2000)],
)
def test_broken_acceptance_rules_fail_the_check(
    bigram: BigramTarget, broken: type, draft_kind: str, n: int
) -> None:
    m = _marginals(bigram, CYCLIC_PROMPT[-1], 3)
    samples = sample_tokens(broken(bigram), CYCLIC_PROMPT, _bigram_draft(draft_kind, m), n, k=2, keep=3)
    with pytest.raises(AssertionError, match="do not follow"):
        for pos in (1, 2):
            assert_follows([s[pos] for s in samples], m[pos])


def test_model_draft_sampled_proposal_carries_its_distribution(random_lm: Any) -> None:
    """ModelDraftSource under sampling: q = softmax(draft logits / T) over the target vocab, the token
    is drawn from it (reproducibly with the generator) and its confidence is q(token)."""
    draft_model = random_lm(9, vocab_size=V, hidden=16, layers=1, head_scale=8.0)
    src = ModelDraftSource(draft_model, V)
    ctx = [1, 2, 3]
    p = src.propose(
        ctx, 3, parallel=False, tau=0.0, temperature=TEMPERATURE, generator=torch.Generator().manual_seed(0)
    )
    again = ModelDraftSource(draft_model, V).propose(
        ctx, 3, parallel=False, tau=0.0, temperature=TEMPERATURE, generator=torch.Generator().manual_seed(0)
    )
    assert p.tokens == again.tokens and len(p.tokens) == 3
    assert p.dists is not None and len(p.dists) == 3
    with torch.no_grad():
        for i, tok in enumerate(p.tokens):
            logits = draft_model(torch.tensor([ctx + p.tokens[:i]])).logits[0, -1]
            expected = torch.softmax(logits / TEMPERATURE, -1)
            q = p.dists[i]
            assert q is not None and torch.allclose(q, expected, atol=1e-5)
            assert p.confidence[i] == pytest.approx(float(expected[tok]), abs=1e-5)


def test_feature_draft_sampled_tokens_follow_target(qwen_case: dict[str, Any]) -> None:
    """A feature draft (reading the tiny target's hidden states) under sampling: its proposals carry
    q over the target vocabulary, and token 2, decided by speculative acceptance of its guess, follows
    the target's distribution."""
    from dspark_lsp.drafts.feature.config import FeatDraftConfig
    from dspark_lsp.drafts.feature.model import FeatDraft
    from dspark_lsp.drafts.feature.source import FeatureDraftSource
    from dspark_lsp.drafts.vocab import DraftVocab

    target = qwen_case["target"]
    torch.manual_seed(11)
    vocab = DraftVocab(list(range(V)), V)
    model = FeatDraft(FeatDraftConfig(d_model=16, n_heads=2, d_ff=32, vocab_size=vocab.size, target_vocab_size=V))
    with torch.no_grad():
        model.head.weight.mul_(30.0)  # a confident, mostly wrong draft: many rejections to resample
    draft = FeatureDraftSource(model.eval(), vocab, target.get_input_embeddings())
    samples = sample_tokens(SpeculativeDecoder(target), qwen_case["prompt"], draft, 1000, k=1, keep=2)
    assert_follows([s[1] for s in samples], qwen_case["p2"])
    draft.set_features(0, torch.randn(4, 16))
    p = draft.propose([1, 2, 3, 4, 5], 2, parallel=False, tau=0.0, temperature=TEMPERATURE,
                      generator=torch.Generator().manual_seed(0))
    assert p.dists is not None and len(p.dists) == len(p.tokens) == 2
    assert all(d is not None and abs(float(d.sum()) - 1.0) < 1e-5 for d in p.dists)

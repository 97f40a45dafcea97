"""The acceptance rules on hand-made logits: greedy (and its lossy relaxed mode), tree (runner-up
alternates) and speculative sampling, each with known accepted lengths, corrections and bonus tokens."""

from __future__ import annotations

import pytest
import torch

from dspark_lsp.engine.acceptance import Verdict, greedy_accept, pick_token, sampled_accept, tree_accept
from dspark_lsp.engine.alternates import Alternate, VerifyLayout

V = 8


def argmax_logits(preds: list[int], vocab: int = V) -> torch.Tensor:
    """One row per prediction, decisive: row i's argmax is preds[i]."""
    logits = torch.zeros(len(preds), vocab)
    for i, t in enumerate(preds):
        logits[i, t] = 5.0
    return logits


def prob_logits(rows: list[list[float]]) -> torch.Tensor:
    """Logits whose softmax is exactly the given probability rows (log p; a zero becomes -inf)."""
    return torch.log(torch.tensor(rows, dtype=torch.float64))


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------- greedy
def test_greedy_full_chain_takes_the_bonus_from_the_last_row() -> None:
    # Rows predict [3, 1, 4, 6]: the chain [3, 1, 4] holds, row 3 gives the bonus 6.
    assert greedy_accept(argmax_logits([3, 1, 4, 6]), [3, 1, 4], V) == Verdict(3, 6)


@pytest.mark.parametrize(("chain", "expected"), [([2, 1, 4], Verdict(0, 3)), ([3, 2, 4], Verdict(1, 1)),
                                                 ([3, 1, 5], Verdict(2, 4))])
def test_greedy_stops_at_the_first_mismatch_with_the_target_s_correction(chain: list[int], expected: Verdict) -> None:
    assert greedy_accept(argmax_logits([3, 1, 4, 6]), chain, V) == expected


def test_greedy_rejects_after_a_mismatch_even_where_later_tokens_match() -> None:
    # Token 2 matches its row but token 1 did not: nothing after the first rejection was verified.
    assert greedy_accept(argmax_logits([3, 1, 4, 6]), [3, 0, 4], V) == Verdict(1, 1)


def test_greedy_without_a_draft_is_the_target_s_next_token() -> None:
    assert greedy_accept(argmax_logits([5]), [], V) == Verdict(0, 5)


def test_greedy_ignores_ids_past_the_vocabulary() -> None:
    # Qwen pads its embedding past the tokenizer: a padding id must never be chosen, even as the argmax.
    logits = argmax_logits([2, 1], vocab=V + 2)
    logits[1, V + 1] = 9.0
    assert greedy_accept(logits, [2], V) == Verdict(1, 1)


def test_relaxed_keeps_a_likely_non_argmax_token_only_when_asked() -> None:
    logits = prob_logits([[0.6, 0.35, 0.05], [0.1, 0.2, 0.7]])
    assert greedy_accept(logits, [1], 3) == Verdict(0, 0)  # lossless: 1 is not the argmax
    assert greedy_accept(logits, [1], 3, relaxed_threshold=0.3) == Verdict(1, 2)  # p = 0.35 >= 0.3
    assert greedy_accept(logits, [2], 3, relaxed_threshold=0.3) == Verdict(0, 0)  # p = 0.05: still out


# ------------------------------------------------------------------------------------------------ tree
def layout_11_12_13() -> VerifyLayout:
    # Rows: 0 pending, 1-3 chain, 4 = alternate 22 for chain index 1, 5 = alternate 99 for index 2.
    return VerifyLayout([11, 12, 13], [Alternate(1, 22, 0.5), Alternate(2, 99, 0.3)])


def test_tree_accepts_the_alternate_at_the_first_mismatch_and_reads_its_row() -> None:
    preds = [11, 22, 0, 0, 77, 0]  # the target wants 22 where the chain has 12; row 4 (the alternate) says 77
    assert tree_accept(preds, layout_11_12_13()) == Verdict(1, 77, 4)


def test_tree_alternate_for_a_later_position_does_not_count() -> None:
    # The target's 99 at index 1 matches only the alternate for index 2: its context was the rejected 12.
    preds = [11, 99, 0, 0, 0, 55]
    assert tree_accept(preds, layout_11_12_13()) == Verdict(1, 99, None)


def test_tree_full_chain_ignores_alternates_and_takes_the_bonus() -> None:
    assert tree_accept([11, 12, 13, 40, 22, 99], layout_11_12_13()) == Verdict(3, 40, None)


def test_tree_without_alternates_agrees_with_greedy() -> None:
    g = gen(0)
    for _ in range(50):
        logits = torch.randn(4, V, generator=g)
        chain = torch.randint(0, V, (3,), generator=g).tolist()
        preds = torch.argmax(logits, dim=-1).tolist()
        n = int(torch.randint(0, 4, (), generator=g))
        chain[:n] = preds[:n]  # agree on a random-length prefix
        assert tree_accept(preds, VerifyLayout(chain)) == greedy_accept(logits, chain, V)


def test_layout_accept_is_the_tree_rule() -> None:
    preds = [11, 22, 0, 0, 77, 0]
    assert layout_11_12_13().accept(preds) == (1, 4, 77)


# -------------------------------------------------------------------------------------------- sampling
def test_sampling_keeps_a_draft_whose_q_equals_p_and_draws_the_bonus_from_the_last_row() -> None:
    p = [[0.25, 0.25, 0.5, 0.0], [0.1, 0.6, 0.1, 0.2], [0.0, 0.0, 0.0, 1.0]]
    q = [torch.tensor(p[0]), torch.tensor(p[1])]
    for seed in range(20):
        # p(d)/q(d) = 1: accepted whatever the draw; the bonus row is one-hot on 3.
        assert sampled_accept(prob_logits(p), [2, 1], list(q), 1.0, 4, gen(seed)) == Verdict(2, 3)


def test_sampling_rejection_resamples_from_the_residual_not_from_p() -> None:
    # p(1) = 0 rejects draft 1 for sure; norm(max(p - q, 0)) = one-hot(0), while p itself would give 2
    # half the time: a rule that resamples from p fails this.
    p = [[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]]
    q = torch.tensor([0.0, 0.5, 0.5])
    got = {sampled_accept(prob_logits(p), [1], [q], 1.0, 3, gen(seed)) for seed in range(40)}
    assert got == {Verdict(0, 0)}


def test_sampling_without_a_q_treats_the_draft_as_certain() -> None:
    # A lookup gives no q: accepted with probability p(d) = 0.5; a rejection may not return d itself.
    p = [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]
    got = {sampled_accept(prob_logits(p), [1], [], 1.0, 3, gen(seed)) for seed in range(40)}
    assert got == {Verdict(0, 0), Verdict(1, 2)}


def test_sampling_first_token_follows_the_target_distribution() -> None:
    """The emitted token (the draft's if kept, else the correction) is distributed as p, not q."""
    p = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    q = torch.tensor([0.6, 0.2, 0.2], dtype=torch.float64)
    logits = torch.log(torch.stack([p, torch.tensor([1 / 3] * 3, dtype=torch.float64)]))
    g = gen(7)
    counts = torch.zeros(3)
    n = 4000
    for _ in range(n):
        d = int(torch.multinomial(q, 1, generator=g))
        v = sampled_accept(logits, [d], [q], 1.0, 3, g)
        counts[d if v.accepted else v.next_token] += 1
    assert torch.allclose(counts / n, p.float(), atol=0.03), counts / n


def test_sampling_temperature_sharpens_p() -> None:
    # At temperature 0.05 the 0.6-vs-0.4 row is practically one-hot on 0: draft 1 is rejected, 0 resampled.
    logits = prob_logits([[0.6, 0.4], [0.5, 0.5]])
    q = torch.tensor([0.0, 1.0])
    assert {sampled_accept(logits, [1], [q], 0.05, 2, gen(s)) for s in range(20)} == {Verdict(0, 0)}


# ------------------------------------------------------------------------------------------ pick_token
def test_pick_token_greedy_and_sampled() -> None:
    row = torch.tensor([0.0, 3.0, 1.0, 9.0])  # id 3 lies past a 3-token vocabulary
    assert pick_token(row, 0.0, 3, None) == 1
    one_hot = torch.log(torch.tensor([0.0, 0.0, 1.0]))
    assert {pick_token(one_hot, 0.8, 3, gen(s)) for s in range(10)} == {2}

"""Token healing: the first tokens spell out the backed-off bytes, picked by the target alone, and the
speculative decode with healing is the same as one-token decoding with it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from dspark_lsp.drafts.causal_lm import ModelDraftSource
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.healing import Heal, TokenTable

VOCAB = 64
# A made-up byte vocabulary: single letters, some two- and three-letter pieces, and one special (id 63).
LETTERS = [bytes([c]) for c in b"abcdefghijklmnopqrstuvwxyz(). _"]
PIECES: list[bytes | None] = [*LETTERS, b"ab", b"abc", b"(a", b"(b", b"(ab", b".a", b".b", b"  ", b"   ", b"    ",
                              b" a", b" b", b"ba", b"bc", b"ca", b"cab"]
PIECES += [bytes([c, c]) for c in b"defghijklmnopqrstuvwx"][: VOCAB - 1 - len(PIECES)]
PIECES += [None] * (VOCAB - len(PIECES))


@pytest.fixture(scope="module")
def table() -> TokenTable:
    return TokenTable(PIECES)


def test_allowed_is_every_token_consistent_with_the_rest(table: TokenTable) -> None:
    for rest in (b"(", b"(a", b"a", b"  ", b"   ", b"ab", b".", b"zz"):
        allowed = set(table.allowed(rest).tolist())
        want = {i for i, p in enumerate(PIECES) if p and (p.startswith(rest) or rest.startswith(p))}
        assert allowed == want, rest
    assert PIECES.index(b"(ab") in table.allowed(b"(").tolist()
    assert PIECES.index(b"  ") in table.allowed(b"   ").tolist()  # a proper prefix: the rest comes next
    assert PIECES.index(b"    ") in table.allowed(b"   ").tolist()  # longer than the rest, starts with it
    assert PIECES.index(b"(b") not in table.allowed(b"(a").tolist()
    assert VOCAB - 1 not in table.allowed(b"").tolist()  # a special token never


def test_advance_and_left_after(table: TokenTable) -> None:
    assert table.advance(b"(", PIECES.index(b"(ab")) == b""
    assert table.advance(b"   ", PIECES.index(b"  ")) == b" "
    assert table.left_after(b"   ", [PIECES.index(b"  "), PIECES.index(b" a")]) == b""
    assert table.left_after(b"abc", [PIECES.index(b"a")]) == b"bc"
    with pytest.raises(ValueError):
        table.advance(b"(", PIECES.index(b"a"))


def _decode(target: Any, prompt: list[int], heal: Heal | None, draft: Any = None, n: int = 12) -> list[int]:
    config = DecodeConfig(max_new_tokens=n, scheduler=SchedulerConfig(k_min=1, k_max=4))
    return SpeculativeDecoder(target, vocab_size=VOCAB).generate(prompt, config=config, draft=draft,
                                                                 heal=heal).tokens


def _constrained_greedy(target: Any, prompt: list[int], table: TokenTable, rest: bytes, n: int) -> list[int]:
    """The reference: full recompute each step, the mask applied while bytes are left."""
    ids, out = list(prompt), []
    for _ in range(n):
        logits = target(torch.tensor([ids])).logits[0, -1, :VOCAB]
        if rest:
            logits = table.restrict(logits, rest)
        tok = int(torch.argmax(logits))
        if rest:
            rest = table.advance(rest, tok)
        ids.append(tok)
        out.append(tok)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rest", [b"(", b"   ", b"cab", b"."])
def test_heal_spells_the_rest_and_is_lossless(random_lm: Any, table: TokenTable, seed: int, rest: bytes) -> None:
    target = random_lm(seed, vocab_size=VOCAB, hidden=32, layers=2, head_scale=16.0)
    prompt = [(seed * 7 + i * 3) % 40 for i in range(10)]
    heal = Heal(table, rest)
    plain = _decode(target, prompt, heal)
    text = b"".join(PIECES[t] or b"?" for t in plain)
    assert text.startswith(rest)  # the healed bytes come first, whatever the model prefers
    assert plain == _constrained_greedy(target, prompt, table, rest, 12)
    # Speculation starts after the healed tokens: the same tokens with any draft.
    other = random_lm(seed + 100, vocab_size=VOCAB, hidden=16, layers=1, head_scale=16.0)
    for draft in (NgramDraftSource(max_ngram=3), ModelDraftSource(target, VOCAB, name="self"),
                  ModelDraftSource(other, VOCAB, name="other")):
        assert _decode(target, prompt, heal, draft) == plain


def test_without_heal_the_model_goes_its_own_way(random_lm: Any, table: TokenTable) -> None:
    """The constraint does something: for some seed the unconstrained first token breaks the bytes."""
    broken = 0
    for seed in range(6):
        target = random_lm(seed, vocab_size=VOCAB, hidden=32, layers=2, head_scale=16.0)
        prompt = [(seed * 7 + i * 3) % 40 for i in range(10)]
        free = _decode(target, prompt, None)
        broken += not b"".join(PIECES[t] or b"?" for t in free).startswith(b"(")
    assert broken > 0

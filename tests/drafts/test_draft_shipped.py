"""The shipped draft: loads offline from package data; its card's held-out acceptance is reproducible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_draft_helpers import prepared_default_target

from dspark_lsp.bench.acceptance import score
from dspark_lsp.drafts.io import DEFAULT_DRAFT, WEIGHTS, resolve_draft_dir, shipped_drafts
from dspark_lsp.drafts.token.source import load_draft

FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = 151659, 151661, 151660  # Qwen2.5-Coder ids


def shipped_dir() -> Path:
    return resolve_draft_dir(DEFAULT_DRAFT)


def test_shipped_draft_loads_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert DEFAULT_DRAFT in shipped_drafts()
    d = shipped_dir()
    assert (d / WEIGHTS).stat().st_size <= 60 * 1024 * 1024
    assert (d / "MODEL_CARD.md").is_file()
    src = load_draft(DEFAULT_DRAFT)
    assert src.vocab.target_vocab_size == 151936
    # The FIM specials are in the reduced vocabulary, so the draft sees the prompt's structure.
    assert all(int(src.vocab.to_draft[t]) >= 2 for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE))
    ctx = [FIM_PREFIX, 750, 2464, 7, 64, 11, 293, 1648, 262, 470, FIM_SUFFIX, 198, FIM_MIDDLE]
    par = src.propose(ctx, 4, parallel=True, tau=0.0)
    assert len(par) == 4 and par.forwards == 1
    ar = src.propose(ctx, 3, parallel=False, tau=0.0)
    assert len(ar) == 3 and all(0 <= t < 151936 for t in ar.tokens)
    assert ar.tokens[0] == par.tokens[0]  # the first token comes from the same (last real) position


def _card_numbers() -> dict[str, object]:
    return json.loads((shipped_dir() / "eval" / "acceptance.json").read_text())


@pytest.mark.slow
def test_card_acceptance_matches_the_cached_target_set() -> None:
    """Replays the shipped held-out set (target continuations cached in the package) against the
    shipped weights: the figures must be those the card reports (~1-2 min of CPU: marked slow)."""
    card = _card_numbers()
    data = json.loads((shipped_dir() / "eval" / "heldout_target.json").read_text())
    src = load_draft(DEFAULT_DRAFT)
    for mode in ("ar", "parallel", "alternate"):
        want = card[mode]
        assert isinstance(want, dict)
        got = score(src, data, mode, int(want["k"]))
        assert got.tokens_per_forward == pytest.approx(want["tokens_per_forward"], abs=0.02), mode


@pytest.mark.real_model
@pytest.mark.slow
def test_acceptance_recomputed_with_the_real_target() -> None:
    """Re-runs the real target greedily on a few held-out prompts and scores the draft on its fresh
    outputs: acceptance must match the card's cached-set figure on the same prompts, within noise."""
    target = prepared_default_target()
    if target is None:
        pytest.skip("the real target is not prepared (dspark-lsp models prepare)")
    from dspark_lsp.bench.acceptance import target_continuations

    data = json.loads((shipped_dir() / "eval" / "heldout_target.json").read_text())
    few = {"items": data["items"][:4]}
    fresh = target_continuations(str(target), [it["prompt"] for it in few["items"]], 16, torch.get_num_threads())
    cached = {"items": [{"prompt": it["prompt"], "target": it["target"][:16]} for it in few["items"]]}
    src = load_draft(DEFAULT_DRAFT)
    got = score(src, fresh, "ar", 4).tokens_per_forward
    want = score(src, cached, "ar", 4).tokens_per_forward
    assert got == pytest.approx(want, abs=0.3)

"""The shipped feature draft: loads offline from package data; its card's held-out acceptance is
reproducible with the real target (which it reads the features of)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_draft_helpers import prepared_default_target

from dspark_lsp.drafts.io import FEAT_CONFIG as CONFIG
from dspark_lsp.drafts.io import WEIGHTS, load_feat_draft, resolve_draft_dir, shipped_drafts

NAME = "dspark-feat-qwc05"


def shipped_dir() -> Path:
    return resolve_draft_dir(NAME)


def test_shipped_feature_draft_loads_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert NAME in shipped_drafts()
    d = shipped_dir()
    assert (d / CONFIG).is_file() and (d / "MODEL_CARD.md").is_file()
    assert (d / WEIGHTS).stat().st_size <= 60 * 1024 * 1024
    model, vocab, meta = load_feat_draft(d)
    assert model.cfg.d_model == 896 and vocab.target_vocab_size == 151936  # Qwen2.5-Coder-0.5B's shape
    assert int(str(meta["step"])) > 0


@pytest.mark.real_model
@pytest.mark.slow
def test_card_acceptance_recomputed_with_the_real_target() -> None:
    """Runs the real target over 10 of the card's held-out prompts (and their cached continuations) for
    its features, replays the draft alone with k = 5, and compares with the card's figure for the same
    prompts. The draft runs in bf16 on CPUs with native bf16 and fp32 elsewhere, which may flip a few
    near-tie guesses: hence the tolerance."""
    target = prepared_default_target()
    if target is None:
        pytest.skip("the real target is not prepared (dspark-lsp models prepare)")
    from dspark_lsp.bench.acceptance import score, target_features_for
    from dspark_lsp.drafts.feature.source import load_feature_draft

    card = json.loads((shipped_dir() / "eval" / "acceptance.json").read_text())
    want = card["first_10_ar_k5_tokens_per_forward"]
    data = json.loads((shipped_dir() / "eval" / "heldout_target.json").read_text())
    few = {"items": data["items"][:10]}
    real, feats = target_features_for(str(target), few, 2)
    src = load_feature_draft(shipped_dir(), real)
    got = score(src, few, "ar", 5, feats).tokens_per_forward
    assert got == pytest.approx(want, abs=0.06)
    assert got > 1.2  # well above a draft that never lands (1.0)

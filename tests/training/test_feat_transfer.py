"""A feature draft narrower than its target's features, and one started from a smaller target's draft.

The 1.5B's draft keeps the 0.5B draft's 896-wide layer and reads / predicts the 1.5B's 1536-wide
features through ``fc`` and an output map (``FeatDraftConfig.feat_dim``); training/transfer.py builds it
from the 0.5B's trained draft with maps fitted by least squares. Here tiny random stand-ins check that
the narrow draft's training pass is its drafting step, that it is lossless with a wider target, that
``feat_train --init-from`` starts from a saved draft, and that the transfer reproduces the source draft
exactly when the new target's spaces are an exact linear image of the old one's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from dspark_lsp.drafts.feature.config import FeatDraftConfig
from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.io import load_feat_draft, save_feat_draft
from dspark_lsp.drafts.vocab import DraftVocab
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.training.feat_train import FeatTrainConfig, run, unrolled_features
from dspark_lsp.training.online import OnlineRows
from dspark_lsp.training.samples import Sample
from dspark_lsp.training.transfer import ridge_fit, transferred

HIDDEN = 128  # the wide target's features
NARROW = 32  # the draft layer's width


def narrow_draft(seed: int, vocab: int, d: int = NARROW, width: int = HIDDEN) -> FeatDraft:
    torch.manual_seed(seed)
    model = FeatDraft(FeatDraftConfig(d_model=d, n_heads=2, d_ff=2 * d, vocab_size=vocab + 2,
                                      target_vocab_size=vocab, feat_dim=width))
    with torch.no_grad():
        model.head.weight.mul_(20.0)
    return model.eval()


def test_a_narrow_draft_maps_its_layer_back_to_the_feature_width() -> None:
    model = narrow_draft(0, 16)
    assert model.out is not None and model.fc.in_features == 2 * HIDDEN and model.fc.out_features == NARROW
    g = model(torch.randn(1, 5, HIDDEN), torch.randn(1, 5, HIDDEN), torch.arange(5)[None])
    assert g.shape == (1, 5, HIDDEN)
    assert FeatDraft(FeatDraftConfig(d_model=16, n_heads=2, d_ff=32)).out is None  # same width: no map


@torch.no_grad()
def test_the_narrow_drafts_unrolled_pass_equals_cached_drafting() -> None:
    model = narrow_draft(1, 16)
    n = 8
    emb, f_true = torch.randn(1, n, HIDDEN), torch.randn(1, n, HIDDEN)
    passes = unrolled_features(model, emb, f_true, 2)
    for j in range(1, n):
        cache = model.new_cache()
        g = model(emb[:, :j], f_true[:, :j], torch.arange(j)[None], None, cache)[:, -1:]
        g = model(emb[:, j : j + 1], g, torch.tensor([[j]]), None, cache)
        assert torch.allclose(g[0, 0], passes[1][0, j], atol=1e-5), j


def test_ridge_fit_recovers_a_linear_map() -> None:
    torch.manual_seed(0)
    x = torch.randn(400, 12)
    m = torch.randn(5, 12)
    fit, explained = ridge_fit(x, x @ m.T, 1e-9)
    assert torch.allclose(fit, m, atol=1e-4) and explained > 0.999999
    _, noisy = ridge_fit(x, torch.randn(400, 5), 1e-9)
    assert noisy < 0.2  # unrelated targets are not "explained"


@torch.no_grad()
def test_transfer_reproduces_the_source_draft_through_an_exact_linear_image() -> None:
    """If the new target's embeddings and features are the old ones times Q (orthonormal rows), the
    transferred draft on new inputs gives the source draft's logits on the old inputs."""
    vocab, d_old, d_new = 24, 16, 48
    torch.manual_seed(3)
    source = FeatDraft(FeatDraftConfig(d_model=d_old, n_heads=2, d_ff=32, vocab_size=vocab + 2, target_vocab_size=vocab))
    source.norm_e.weight.uniform_(0.5, 1.5)
    source.norm_f.weight.uniform_(0.5, 1.5)
    source.eval()
    dv = DraftVocab(list(range(vocab)), vocab)
    q = torch.linalg.qr(torch.randn(d_new, d_old))[0].T  # [d_old, d_new], orthonormal rows
    old_emb = torch.randn(vocab, d_old)
    f_old = torch.randn(300, d_old) * torch.rand(300, 1).add(0.5)
    head_new = torch.zeros(vocab + 2, d_new)
    head_new[2:] = source.head.weight[2:] @ q  # rows for the kept ids; the reserved rows stay empty
    head_new[:2] = source.head.weight[:2] @ q
    draft, fits = transferred(source, dv, old_emb @ q, old_emb, head_new, f_old @ q, f_old, 1e-9)
    assert min(fits.values()) > 0.9999
    assert draft.cfg.feat_dim == d_new and draft.cfg.d_model == d_old
    draft.eval()
    tokens = torch.randint(0, vocab, (1, 7))
    feats = torch.randn(1, 7, d_old)
    pos = torch.arange(7)[None]
    want = source.logits(source(old_emb[tokens], feats, pos))
    got = draft.logits(draft((old_emb @ q)[tokens], feats @ q, pos))
    assert torch.allclose(got, want, atol=1e-3), (got - want).abs().max()
    # Fed back, its output is the new-space image of the source's guess of the next feature.
    g_old = source(old_emb[tokens], feats, pos)
    assert torch.allclose(draft(old_emb[tokens] @ q, feats @ q, pos), g_old @ q, atol=1e-3)


@pytest.fixture(scope="module")
def wide_target(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    from transformers import AutoModelForCausalLM

    from dspark_lsp.testing.tiny import build_tiny_model, build_tiny_tokenizer

    root = tmp_path_factory.mktemp("wide-narrow")
    tok = build_tiny_tokenizer(root / "tokenizer")
    path = build_tiny_model(root / "target", seed=4, layers=1, hidden=HIDDEN, tokenizer_dir=tok)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return path, model.eval().requires_grad_(False)


def test_a_narrow_draft_started_from_a_saved_one_trains_and_stays_lossless(
        wide_target: tuple[Path, Any], greedy_reference: Any, tmp_path: Path) -> None:
    from dspark_lsp.drafts.feature.source import load_feature_draft

    path, target = wide_target
    vocab = int(target.config.vocab_size)
    dv = DraftVocab(list(range(vocab)), vocab)
    start = narrow_draft(5, vocab)
    save_feat_draft(tmp_path / "start", start, dv, {"step": 0})
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "vocab.json").write_text(json.dumps({"target_ids": list(range(vocab)), "target_vocab_size": vocab}))
    pool_rng = random.Random(2)
    pool = [([pool_rng.randrange(vocab) for _ in range(5)] * 8)[:36] for _ in range(6)]

    def draw(rng: random.Random) -> Sample:
        return Sample(list(rng.choice(pool)), 0)

    cfg = FeatTrainConfig(name="narrow", runs_dir=tmp_path / "runs", features=tmp_path / "none", target=str(path),
                          corpus_file=tmp_path / "runs" / "narrow" / "corpus.json", vocab_from=str(tmp_path / "shipped"),
                          init_from=str(tmp_path / "start"), unroll=2, batch_size=4, lr=3e-3, warmup_steps=2,
                          max_steps=6, log_every=3, eval_every=1000, threads=1, bf16=False, online=True)
    run(cfg, online=OnlineRows(target, draw, seed=0))
    model, _, meta = load_feat_draft(cfg.run_dir / "export")
    assert meta["step"] == 6 and (model.cfg.d_model, model.cfg.feat_dim) == (NARROW, HIDDEN)
    # It started from the saved draft (its layer moved only by six small steps), not from random weights.
    moved = (model.blocks[0].gate_up.weight - start.blocks[0].gate_up.weight).abs().mean()
    assert moved < 0.5 * start.blocks[0].gate_up.weight.abs().mean()
    src = load_feature_draft(cfg.run_dir / "export", target)
    dec = SpeculativeDecoder(target)
    for seed in range(3):
        prompt = pool[seed][:12] + [seed + 7]
        out = dec.generate(prompt, config=DecodeConfig(max_new_tokens=16, scheduler=SchedulerConfig(fixed_k=3)), draft=src)
        assert out.tokens == greedy_reference(target, prompt, 16)
        assert out.stats.draft_forwards > 0


def test_freeze_layer_trains_only_what_touches_the_target(wide_target: tuple[Path, Any], tmp_path: Path) -> None:
    path, target = wide_target
    vocab = int(target.config.vocab_size)
    dv = DraftVocab(list(range(vocab)), vocab)
    start = narrow_draft(7, vocab)
    save_feat_draft(tmp_path / "start", start, dv, {"step": 0})
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "vocab.json").write_text(json.dumps({"target_ids": list(range(vocab)), "target_vocab_size": vocab}))
    cfg = FeatTrainConfig(name="frozen", runs_dir=tmp_path / "runs", features=tmp_path / "none", target=str(path),
                          corpus_file=tmp_path / "runs" / "frozen" / "corpus.json", vocab_from=str(tmp_path / "shipped"),
                          init_from=str(tmp_path / "start"), freeze_layer=True, unroll=2, batch_size=2, lr=1e-2,
                          warmup_steps=1, max_steps=3, log_every=3, eval_every=1000, threads=1, bf16=False, online=True)
    run(cfg, online=OnlineRows(target, lambda rng: Sample([rng.randrange(vocab) for _ in range(36)], 0), seed=0))
    model, _, _ = load_feat_draft(cfg.run_dir / "export")
    start = load_feat_draft(tmp_path / "start")[0]  # as saved (fp16), as the run started from it
    assert torch.equal(model.blocks[0].gate_up.weight, start.blocks[0].gate_up.weight)
    assert torch.equal(model.head.weight, start.head.weight)
    assert model.out is not None and start.out is not None
    assert not torch.equal(model.fc.weight, start.fc.weight) and not torch.equal(model.out.weight, start.out.weight)


def test_init_from_a_draft_of_another_width_is_refused(wide_target: tuple[Path, Any], tmp_path: Path) -> None:
    path, target = wide_target
    vocab = int(target.config.vocab_size)
    dv = DraftVocab(list(range(vocab)), vocab)
    save_feat_draft(tmp_path / "start", narrow_draft(6, vocab, width=64), dv, {"step": 0})
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "vocab.json").write_text(json.dumps({"target_ids": list(range(vocab)), "target_vocab_size": vocab}))
    cfg = FeatTrainConfig(name="bad", runs_dir=tmp_path / "runs", features=tmp_path / "none", target=str(path),
                          corpus_file=tmp_path / "runs" / "bad" / "corpus.json", vocab_from=str(tmp_path / "shipped"),
                          init_from=str(tmp_path / "start"), max_steps=1, threads=1, bf16=False, online=True)
    with pytest.raises(Exception, match="64-wide features"):
        run(cfg, online=OnlineRows(target, lambda rng: Sample([1, 2, 3] * 12, 0), seed=0))

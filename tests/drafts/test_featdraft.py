"""The feature-conditioned draft: training/inference agreement, cache sync, losslessness, I/O."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from featdraft_testlib import Embed, write_shards
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_lsp.drafts.feature.config import FeatDraftConfig
from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.feature.source import FeatureDraftSource
from dspark_lsp.drafts.hybrid import HybridDraftSource
from dspark_lsp.drafts.io import load_feat_draft, save_feat_draft
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.drafts.vocab import N_RESERVED, DraftVocab
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.prefix_cache import PrefixCache
from dspark_lsp.training.feat_train import unroll_mask, unrolled_features

D = 16


def tiny_draft(seed: int, vocab: int = 16, d: int = D) -> tuple[FeatDraft, DraftVocab]:
    torch.manual_seed(seed)
    dv = DraftVocab(list(range(vocab)), vocab)
    model = FeatDraft(FeatDraftConfig(d_model=d, n_heads=2, d_ff=2 * d, vocab_size=dv.size,
                                      target_vocab_size=vocab))
    with torch.no_grad():
        model.head.weight.mul_(20.0)  # decisive argmax, like the random targets' scaled heads
    return model.eval(), dv


def test_unroll_mask_matches_the_draft_steps_attention() -> None:
    m = unroll_mask(5, 3)[0, 0]
    assert m.shape == (5, 15)
    # Pass 3 at position 4: true keys 0..2, pass-2 key at 3, its own key at 4.
    assert m[4, :5].tolist() == [True, True, True, False, False]
    assert m[4, 5:10].tolist() == [False, False, False, True, False]
    assert m[4, 10:].tolist() == [False, False, False, False, True]
    assert unroll_mask(4, 1)[0, 0].equal(torch.ones(4, 4, dtype=torch.bool).tril())


@torch.no_grad()
def test_unrolled_training_pass_equals_cached_drafting() -> None:
    """Pass s at position j must be exactly draft step s after true features up to j-s+1."""
    model, _ = tiny_draft(0)
    n = 9
    emb = torch.randn(1, n, D)
    f_true = torch.randn(1, n, D)
    passes = unrolled_features(model, emb, f_true, 3)
    for s in (1, 2, 3):
        for j in range(s - 1, n):
            cache = model.new_cache()
            true_end = j - s + 2  # true positions 0 .. j-s+1
            g = model(emb[:, :true_end], f_true[:, :true_end], torch.arange(true_end)[None], None, cache)[:, -1:]
            for pos in range(true_end, j + 1):  # each further step reads the previous guess
                g = model(emb[:, pos : pos + 1], g, torch.tensor([[pos]]), None, cache)
            assert torch.allclose(g[0, 0], passes[s - 1][0, j], atol=1e-5), (s, j)


def _fresh_proposal(model: FeatDraft, dv: DraftVocab, embed: Any, ctx: list[int], feats: torch.Tensor,
                    k: int) -> list[int]:
    src = FeatureDraftSource(model, dv, embed)
    src.set_features(0, feats)
    return src.propose(ctx, k, parallel=False, tau=0.0).tokens


def test_proposals_after_rejections_equal_a_fresh_source() -> None:
    model, dv = tiny_draft(1)
    embed = Embed(16, D)
    g = torch.Generator().manual_seed(3)
    ctx = torch.randint(0, 16, (30,), generator=g).tolist()
    feats = torch.randn(30, D, generator=g)
    src = FeatureDraftSource(model, dv, embed)
    # Contexts grow, shrink (a rejection) and grow again; features always cover all but the last token.
    for length in (10, 14, 12, 13, 20, 7, 29, 30):
        src.set_features(0, feats[: length - 1])
        got = src.propose(ctx[:length], 4, parallel=False, tau=0.0)
        assert got.tokens == _fresh_proposal(model, dv, embed, ctx[:length], feats[: length - 1], 4)
        assert len(got.tokens) == 4 and got.forwards == 4
        assert src._cache.length == len(src._seen) == length - 1  # no guessed keys left behind


def test_context_past_the_features_is_chained_not_ignored() -> None:
    model, dv = tiny_draft(2)
    embed = Embed(16, D)
    ctx = list(range(12))
    feats = torch.randn(12, D)
    src = FeatureDraftSource(model, dv, embed)
    src.set_features(0, feats[:8])  # a lookup proposed tokens 9..11 earlier in this round
    p = src.propose(ctx, 2, parallel=False, tau=0.0)
    assert p.forwards == 3 + 2  # three chained positions, then two drafted tokens
    full = FeatureDraftSource(model, dv, embed)
    full.set_features(0, feats[:8])
    assert full.propose(ctx[:9], 5, parallel=False, tau=0.0).tokens[:3] != [] and p.tokens


def test_no_features_means_no_proposal() -> None:
    model, dv = tiny_draft(3)
    src = FeatureDraftSource(model, dv, Embed(16, D))
    assert src.propose([1, 2, 3], 3, parallel=False, tau=0.0).tokens == []
    src.set_features(5, torch.randn(2, D))  # features only for positions the context lacks
    assert src.propose([1, 2, 3], 3, parallel=False, tau=0.0).tokens == []


def test_window_moves_in_jumps_and_stays_consistent() -> None:
    model, dv = tiny_draft(4)
    model.cfg.max_context = 8
    embed = Embed(16, D)
    ctx = [i % 16 for i in range(40)]
    feats = torch.randn(40, D)
    src = FeatureDraftSource(model, dv, embed)
    for length in (10, 11, 12, 20):
        src.set_features(0, feats[: length - 1])
        p = src.propose(ctx[:length], 3, parallel=False, tau=0.0)
        assert len(p.tokens) == 3 and src._cache.length <= 8


@settings(max_examples=12)
@given(seed=st.integers(0, 10_000), n_prompt=st.integers(2, 20), k=st.integers(1, 5),
       hybrid=st.booleans(), reuse=st.booleans())
def test_feature_draft_is_lossless(random_lm: Any, greedy_reference: Any, seed: int, n_prompt: int, k: int,
                                   hybrid: bool, reuse: bool) -> None:
    target = random_lm(seed % 7, vocab_size=16, hidden=D, layers=1)
    model, dv = tiny_draft(seed)
    src: Any = FeatureDraftSource(model, dv, target.get_input_embeddings())
    if hybrid:
        src = HybridDraftSource(src, NgramDraftSource())
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 16, (n_prompt,), generator=g).tolist()
    cfg = DecodeConfig(max_new_tokens=12, scheduler=SchedulerConfig(fixed_k=k))
    dec = SpeculativeDecoder(target, prefix_cache=PrefixCache(min_reuse=1) if reuse else None)
    if reuse:  # a first call leaves a cache (and its features) that the second call's prompt extends
        dec.generate(prompt, config=cfg, draft=src)
    out = dec.generate(prompt + [3, 4], config=cfg, draft=src)
    assert out.tokens == greedy_reference(target, prompt + [3, 4], 12)
    if not hybrid:  # behind a lookup, a repetitive sequence may never need the draft
        assert out.stats.draft_forwards > 0


def test_prefix_cache_keeps_features_for_the_reused_prefix(random_lm: Any) -> None:
    target = random_lm(1, vocab_size=16, hidden=D, layers=1)
    model, dv = tiny_draft(5)
    src = FeatureDraftSource(model, dv, target.get_input_embeddings())
    pc = PrefixCache(min_reuse=1)
    dec = SpeculativeDecoder(target, prefix_cache=pc)
    cfg = DecodeConfig(max_new_tokens=6)
    dec.generate(list(range(10)), config=cfg, draft=src)
    cache, n, feats = pc.take_with_features(list(range(10)) + [0])
    assert cache is not None and feats is not None and n == 10
    first, rows = feats
    assert first == 0 and rows.shape == (10, D)
    # The stored rows are the target's last hidden states at those positions.
    with torch.no_grad():
        h = target(input_ids=torch.tensor([list(range(10))]), output_hidden_states=True).hidden_states[-1][0]
    assert torch.allclose(rows, h, atol=1e-4)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    model, dv = tiny_draft(6)
    save_feat_draft(tmp_path / "d", model, dv, {"step": 7}, dtype=torch.float32)
    loaded, dv2, meta = load_feat_draft(tmp_path / "d")
    assert meta["step"] == 7 and dv2.size == dv.size
    x = torch.randn(1, 4, D)
    pos = torch.arange(4)[None]
    assert torch.allclose(loaded(x, x, pos), model(x, x, pos))


def test_reserved_ids_are_never_proposed() -> None:
    model, dv = tiny_draft(7)
    with torch.no_grad():
        model.head.weight[:N_RESERVED] = 100.0  # UNK / MASK would win every argmax
    src = FeatureDraftSource(model, dv, Embed(16, D))
    src.set_features(0, torch.randn(5, D))
    p = src.propose([1, 2, 3, 4, 5, 6], 3, parallel=False, tau=0.0)
    assert p.tokens and all(0 <= t < 16 for t in p.tokens)


def test_load_rejects_a_broken_directory(tmp_path: Path) -> None:
    from dspark_lsp.errors import ModelError

    (tmp_path / "feat_config.json").write_text("{}")
    with pytest.raises(ModelError):
        load_feat_draft(tmp_path)


def test_features_are_the_states_the_lm_head_reads(tiny_target: Any) -> None:
    from dspark_lsp.training.features import target_features

    ids = [5, 9, 13, 40, 41, 42]
    h, a = target_features(tiny_target, ids)
    with torch.no_grad():
        logits = tiny_target(input_ids=torch.tensor([ids])).logits[0]
    assert h.shape == (6, tiny_target.config.hidden_size)
    assert torch.allclose(tiny_target.lm_head(h), logits, atol=1e-4)
    assert a.tolist() == logits.argmax(-1).tolist()


def test_training_lowers_the_loss_checkpoints_and_resumes(tiny_models: tuple[Path, Path], tiny_target: Any,
                                                          tmp_path: Path) -> None:
    import json

    from dspark_lsp.training.feat_train import FeatTrainConfig, run

    vocab = int(tiny_target.config.vocab_size)
    write_shards(tiny_target, tmp_path / "feats", 3, 8, 40, 300)
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps({"target_ids": list(range(vocab)), "target_vocab_size": vocab}))
    cfg = FeatTrainConfig(name="t", runs_dir=tmp_path / "runs", features=tmp_path / "feats",
                          target=str(tiny_models[0]), corpus_file=corpus, n_heads=4, d_ff=64, unroll=2,
                          batch_size=4, lr=3e-3, warmup_steps=5, max_steps=60, log_every=10, eval_every=60,
                          threads=1, bf16=False)
    run(cfg)
    log = [json.loads(line) for line in (cfg.run_dir / "log.jsonl").read_text().splitlines()]
    steps = [r for r in log if "tok_loss" in r]
    assert steps[-1]["tok_loss"][0] < 0.7 * steps[0]["tok_loss"][0]
    assert steps[-1]["tok_loss"][1] < 0.7 * steps[0]["tok_loss"][1]  # the unrolled step learns too
    val = [r["val_acc"] for r in log if "val_acc" in r]
    assert val and len(val[-1]) == 2
    model, _, meta = load_feat_draft(cfg.run_dir / "export")
    assert meta["step"] == 60 and model.cfg.d_model == tiny_target.config.hidden_size
    cfg.max_steps = 65
    run(cfg)  # resumes from the checkpoint instead of starting over
    log = [json.loads(line) for line in (cfg.run_dir / "log.jsonl").read_text().splitlines()]
    assert load_feat_draft(cfg.run_dir / "export")[2]["step"] == 65
    logged = [r["step"] for r in log if "tok_loss" in r]
    assert logged == sorted(set(logged))  # a restart from step 0 would log steps 10..60 again


def test_a_feature_draft_refuses_a_target_it_was_not_trained_for(random_lm: Any, tmp_path: Path) -> None:
    from dspark_lsp.drafts.feature.source import load_feature_draft
    from dspark_lsp.errors import ModelError

    model, dv = tiny_draft(8)
    save_feat_draft(tmp_path / "d", model, dv, {}, dtype=torch.float32)
    with pytest.raises(ModelError, match="hidden size"):
        load_feature_draft(tmp_path / "d", random_lm(0, vocab_size=16, hidden=2 * D))
    src = load_feature_draft(tmp_path / "d", random_lm(0, vocab_size=16, hidden=D))
    assert src.wants_features and src.name == "d"


def test_ship_copies_a_feature_draft(tmp_path: Path) -> None:
    from dspark_lsp.training.ship import ship

    model, dv = tiny_draft(9)
    save_feat_draft(tmp_path / "export", model, dv, {"step": 1})
    ship(tmp_path / "export", tmp_path / "shipped", [])
    assert sorted(p.name for p in (tmp_path / "shipped").iterdir()) == [
        "feat_config.json", "model.safetensors", "vocab.json"]
    assert load_feat_draft(tmp_path / "shipped")[2]["step"] == 1


def test_replay_target_hands_its_features_to_a_feature_draft() -> None:
    from dspark_lsp.bench.replay_target import ReplayTarget

    model, dv = tiny_draft(10)
    seq = [i % 16 for i in range(3, 40)]
    feats = torch.randn(len(seq), D)
    src = FeatureDraftSource(model, dv, Embed(16, D))
    seen: list[torch.Tensor] = []
    original = src.set_features

    def spy(start: int, rows: torch.Tensor) -> None:
        seen.append(rows.clone())
        original(start, rows)

    src.set_features = spy  # type: ignore[method-assign]
    replay = ReplayTarget(seq, 16, eos=0, features=feats)
    out = SpeculativeDecoder(replay, vocab_size=16).generate(
        seq[:10], config=DecodeConfig(max_new_tokens=20), draft=src)
    assert out.tokens == seq[10:30]
    assert seen and all(torch.equal(r, feats[: r.shape[0]]) for r in seen)  # the rows of accepted tokens


def test_online_rows_are_the_features_an_extraction_stores(tiny_target: Any) -> None:
    from dspark_lsp.training.features import target_features
    from dspark_lsp.training.online import OnlineRows
    from dspark_lsp.training.samples import Sample

    seqs = [[5, 9, 13, 40, 41, 42, 7, 8, 9], [3, 3, 3], list(range(1, 15))]
    queue = iter(seqs)
    rows = OnlineRows(tiny_target, lambda rng: Sample(next(queue), 4), seed=0).take(2)
    # The 3-token sample is skipped; the two others share one right-padded forward.
    for row, ids in zip(rows, [seqs[0], seqs[2]], strict=True):
        h, a = target_features(tiny_target, ids)
        assert row["tokens"].tolist() == ids and row["middle_start"] == 4
        assert row["feat"].dtype == torch.bfloat16 and row["feat"].shape == h.shape
        assert torch.allclose(row["feat"].float(), h.float(), atol=2e-2)
        assert row["pred"].tolist() == a.tolist()


def test_online_training_lowers_the_loss_without_shards(tiny_models: tuple[Path, Path], tiny_target: Any,
                                                        tmp_path: Path) -> None:
    import json
    import random

    from dspark_lsp.training.feat_train import FeatTrainConfig, run
    from dspark_lsp.training.online import OnlineRows
    from dspark_lsp.training.samples import Sample

    vocab = int(tiny_target.config.vocab_size)
    write_shards(tiny_target, tmp_path / "feats", 1, 8, 40, 300)  # the validation shard only

    # A small pool of repetitive sequences, so a few steps have something to learn.
    pool_rng = random.Random(1)
    pool = [([pool_rng.randrange(300) for _ in range(6)] * 7)[:40] for _ in range(8)]

    def draw(rng: random.Random) -> Sample:
        return Sample(list(rng.choice(pool)), 0)

    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps({"target_ids": list(range(vocab)), "target_vocab_size": vocab}))
    cfg = FeatTrainConfig(name="o", runs_dir=tmp_path / "runs", features=tmp_path / "feats",
                          target=str(tiny_models[0]), corpus_file=corpus, n_heads=4, d_ff=64, unroll=2,
                          batch_size=4, lr=3e-3, warmup_steps=5, max_steps=60, log_every=10, eval_every=60,
                          threads=1, bf16=False, online=True)
    rows = OnlineRows(tiny_target, draw, seed=0)
    run(cfg, online=rows)
    log = [json.loads(line) for line in (cfg.run_dir / "log.jsonl").read_text().splitlines()]
    steps = [r for r in log if "tok_loss" in r]
    assert steps[-1]["tok_loss"][0] < 0.7 * steps[0]["tok_loss"][0]
    # Every batch was fresh: 60 steps x 4 samples x 40 tokens went through the target.
    assert rows.tokens_made == 60 * 4 * 40 == steps[-1]["online_tokens"]
    assert [r for r in log if "val_acc" in r]  # validated on the extracted shard
    assert load_feat_draft(cfg.run_dir / "export")[2]["step"] == 60

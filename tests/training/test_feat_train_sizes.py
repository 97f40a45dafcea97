"""The feature draft trained for a target of another hidden size than the 0.5B's 896 (the 1.5B's 1536).

A tiny random target of hidden size 128 stands in: the draft's shape is derived from it, training draws
its features online, checkpoints, resumes where it stopped, and the draft it exports, used in
speculative decoding, leaves the target's greedy output unchanged.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from dspark_lsp.drafts.io import load_feat_draft
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.training.feat_train import FeatTrainConfig, draft_shape, run
from dspark_lsp.training.online import OnlineRows
from dspark_lsp.training.samples import Sample

HIDDEN = 128


@pytest.fixture(scope="module")
def wide_target(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(its directory, the model): a random Qwen2 target of hidden size 128 with the tiny tokenizer."""
    from transformers import AutoModelForCausalLM

    from dspark_lsp.testing.tiny import build_tiny_model, build_tiny_tokenizer

    root = tmp_path_factory.mktemp("wide")
    tok = build_tiny_tokenizer(root / "tokenizer")
    path = build_tiny_model(root / "target", seed=3, layers=1, hidden=HIDDEN, tokenizer_dir=tok)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return path, model.eval().requires_grad_(False)


def test_the_draft_shape_follows_the_hidden_size() -> None:
    assert draft_shape(896) == (14, 2432)  # the shipped 0.5B draft's shape
    assert draft_shape(1536) == (24, 4160)  # the 1.5B target
    assert draft_shape(1536, n_heads=12, d_ff=2048) == (12, 2048)
    with pytest.raises(Exception, match="heads"):
        draft_shape(896, n_heads=5)


def _config(tmp_path: Path, target: Path, max_steps: int) -> FeatTrainConfig:
    return FeatTrainConfig(name="wide", runs_dir=tmp_path / "runs", features=tmp_path / "no-features",
                           target=str(target), corpus_file=tmp_path / "runs" / "wide" / "corpus.json",
                           vocab_from=str(tmp_path / "shipped"), unroll=2, batch_size=4, lr=3e-3,
                           warmup_steps=3, max_steps=max_steps, log_every=5, eval_every=1000, threads=1,
                           bf16=False, online=True)


def test_online_training_for_a_wider_target_resumes_and_stays_lossless(
        wide_target: tuple[Path, Any], greedy_reference: Any, tmp_path: Path) -> None:
    path, target = wide_target
    vocab = int(target.config.vocab_size)
    # A shipped draft's vocabulary (every id here) seeds the run's corpus.json, as for the 1.5B.
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "vocab.json").write_text(
        json.dumps({"target_ids": list(range(vocab)), "target_vocab_size": vocab}))
    pool_rng = random.Random(2)
    pool = [([pool_rng.randrange(vocab) for _ in range(5)] * 8)[:36] for _ in range(6)]

    def draw(rng: random.Random) -> Sample:
        return Sample(list(rng.choice(pool)), 0)

    cfg = _config(tmp_path, path, 20)
    run(cfg, online=OnlineRows(target, draw, seed=0))
    model, _, meta = load_feat_draft(cfg.run_dir / "export")
    assert meta["step"] == 20
    assert (model.cfg.d_model, model.cfg.n_heads, model.cfg.d_ff) == (HIDDEN, 2, 320)
    assert json.loads(cfg.corpus_file.read_text())["target_vocab_size"] == vocab

    cfg = _config(tmp_path, path, 30)
    rows = OnlineRows(target, draw, seed=1)
    run(cfg, online=rows)  # the same command again: it continues from step 20
    assert rows.tokens_made == 10 * 4 * 36  # ten more steps, not thirty
    log = [json.loads(line) for line in (cfg.run_dir / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "tok_loss" in r] == [5, 10, 15, 20, 25, 30]
    assert load_feat_draft(cfg.run_dir / "export")[2]["step"] == 30

    from dspark_lsp.drafts.feature.source import load_feature_draft

    src = load_feature_draft(cfg.run_dir / "export", target)
    dec = SpeculativeDecoder(target)
    for seed in range(3):
        prompt = pool[seed][:12] + [seed + 7]
        out = dec.generate(prompt, config=DecodeConfig(max_new_tokens=16, scheduler=SchedulerConfig(fixed_k=3)),
                           draft=src)
        assert out.tokens == greedy_reference(target, prompt, 16)
        assert out.stats.draft_forwards > 0

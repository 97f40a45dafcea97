"""Training on a tiny config runs, lowers the loss, checkpoints and resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dspark_lsp.drafts.io import load_draft_net
from dspark_lsp.errors import UserError
from dspark_lsp.training.cli import main
from dspark_lsp.training.config import TrainConfig
from dspark_lsp.training.train import Trainer, losses
from tests.drafts.test_draft_helpers import tiny_corpus, tiny_tokenizer


def tiny_config(tmp: Path, **over: object) -> TrainConfig:
    base: dict[str, object] = dict(
        name="tiny", runs_dir=str(tmp / "runs"), tokenizer=str(tiny_tokenizer(tmp)),
        corpus=[str(tiny_corpus(tmp))], held_out_percent=0.0, keep_tokens=300, d_model=32, n_layers=1,
        n_heads=2, d_ff=64, seq_len=64, anchors=4, batch_size=4, lr=5e-3, warmup_steps=2, max_steps=40,
        eval_every=0, eval_samples=4, log_every=1000, checkpoint_minutes=100.0, target_vocab_size=400,
    )
    base.update(over)
    return TrainConfig(**base)  # type: ignore[arg-type]


def test_training_lowers_both_losses(tmp_path: Path) -> None:
    trainer = Trainer(tiny_config(tmp_path))
    with torch.no_grad():
        before_ar, before_par = (float(x) for x in losses(trainer.model, trainer.next_batch()))
    before_eval = trainer.evaluate()
    trainer.train()
    with torch.no_grad():
        after = [tuple(float(x) for x in losses(trainer.model, trainer.next_batch())) for _ in range(3)]
    after_ar = sum(a for a, _ in after) / 3
    after_par = sum(p for _, p in after) / 3
    assert after_ar < before_ar * 0.7, (before_ar, after_ar)
    assert after_par < before_par * 0.8, (before_par, after_par)
    # Held-out evaluation (on FIM holes) improves too, for both the AR and the parallel heads.
    after_eval = trainer.evaluate()
    assert after_eval["eval_ar_loss"] < before_eval["eval_ar_loss"]
    assert after_eval["eval_par_loss"] < before_eval["eval_par_loss"]


def test_resume_continues_from_checkpoint(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, max_steps=6)
    Trainer(cfg).train()
    again = Trainer(tiny_config(tmp_path, max_steps=9))
    assert again.step == 6  # picked up the checkpoint instead of starting over
    again.train()
    assert again.step == 9
    log = [json.loads(x) for x in (cfg.run_dir / "log.jsonl").read_text().splitlines()]
    assert any(r.get("event") == "resumed" and r["step"] == 6 for r in log)
    model, vocab = load_draft_net(cfg.run_dir / "export")
    assert model.cfg.d_model == 32 and vocab.size == model.cfg.vocab_size


def test_resume_with_another_architecture_is_a_user_error(tmp_path: Path) -> None:
    Trainer(tiny_config(tmp_path, max_steps=2)).train()
    with pytest.raises(UserError, match="another architecture"):
        Trainer(tiny_config(tmp_path, d_model=48))


def test_cli_reports_missing_tokenizer_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["train-draft", "--tokenizer", str(tmp_path / "nope"), "--runs-dir", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("dspark-lsp: error: no tokenizer.json")

"""The training loop: joint AR + masked-parallel loss, checkpoints that resume, held-out evaluation."""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from dspark_lsp.drafts.io import save_draft
from dspark_lsp.drafts.token.config import DraftNetConfig
from dspark_lsp.drafts.token.model import DraftNet
from dspark_lsp.drafts.vocab import MASK_ID
from dspark_lsp.errors import UserError
from dspark_lsp.training.batch import IGNORE, Batch, build_batch
from dspark_lsp.training.config import TrainConfig
from dspark_lsp.training.corpus import SourceRoot, default_roots
from dspark_lsp.training.data import Corpus, prepare_corpus
from dspark_lsp.training.samples import Sample, SampleMaker, SampleShape, load_tokenizer


def _target_vocab_size(cfg: TrainConfig) -> int:
    if cfg.target_vocab_size:
        return cfg.target_vocab_size
    conf = Path(cfg.tokenizer).expanduser() / "config.json"
    if conf.is_file():
        return int(json.loads(conf.read_text()).get("vocab_size", 0))
    return 0


def losses(model: DraftNet, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(AR loss over real positions, parallel loss over mask positions)."""
    logits = model(batch.ids, batch.positions, batch.mask).float()
    n = batch.n_real
    v = logits.shape[-1]
    ar = F.cross_entropy(logits[:, :n].reshape(-1, v), batch.labels[:, :n].reshape(-1), ignore_index=IGNORE)
    if logits.shape[1] == n:
        return ar, torch.zeros(())
    par = F.cross_entropy(logits[:, n:].reshape(-1, v), batch.labels[:, n:].reshape(-1), ignore_index=IGNORE)
    return ar, par


def lr_at(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


class Trainer:
    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        torch.set_num_threads(cfg.threads)
        self.run_dir = cfg.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tok = load_tokenizer(cfg.tokenizer)
        roots = ([SourceRoot(Path(p).name, Path(p), "as found") for p in cfg.corpus]
                 if cfg.corpus else default_roots())
        self.corpus: Corpus = prepare_corpus(
            roots, tok, cfg.keep_tokens, cfg.held_out_percent, self.run_dir / "corpus.json",
            cfg.max_files or None, _target_vocab_size(cfg),
        )
        self.maker = SampleMaker(tok, SampleShape(plain_tokens=cfg.seq_len, fim_rate=cfg.fim_rate))
        self.net_cfg = DraftNetConfig(
            vocab_size=self.corpus.vocab.size, d_model=cfg.d_model, n_layers=cfg.n_layers,
            n_heads=cfg.n_heads, d_ff=cfg.d_ff, n_parallel=cfg.n_parallel,
            target_vocab_size=self.corpus.vocab.target_vocab_size,
        )
        torch.manual_seed(cfg.seed)
        self.model = DraftNet(self.net_cfg)
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr, betas=(0.9, 0.95),
        )
        self.step = 0
        self.rng = random.Random(cfg.seed)
        self.eval_samples = self._held_out_samples()
        self._resume()

    # -- data ---------------------------------------------------------------------------------------
    def _held_out_samples(self) -> list[Sample]:
        texts = self.corpus.held_out or self.corpus.train  # tiny test corpora may hold nothing out
        rng = random.Random(1234)
        return [self.maker.fim(rng, rng.choice(texts)) for _ in range(self.cfg.eval_samples)]

    def next_batch(self) -> Batch:
        samples = [self.maker.make(self.rng, self.corpus.pick_train(self.rng)) for _ in range(self.cfg.batch_size)]
        return build_batch(self.rng, samples, self.corpus.vocab.to_draft, self.cfg.seq_len,
                           self.cfg.n_parallel, self.cfg.anchors)

    # -- checkpoints --------------------------------------------------------------------------------
    @property
    def ckpt_path(self) -> Path:
        return self.run_dir / "checkpoint.pt"

    def _resume(self) -> None:
        if not self.ckpt_path.is_file():
            (self.run_dir / "train_config.json").write_text(json.dumps(asdict(self.cfg), indent=2))
            return
        state = torch.load(self.ckpt_path, weights_only=False)
        if state["net_cfg"] != asdict(self.net_cfg):
            raise UserError(f"{self.ckpt_path} was trained with another architecture; use a new --name")
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.step = int(state["step"])
        self.rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        self.log({"event": "resumed", "step": self.step, "max_steps": self.cfg.max_steps, "lr": self.cfg.lr})

    def save(self) -> None:
        state = {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "step": self.step,
                 "rng": self.rng.getstate(), "torch_rng": torch.get_rng_state(), "net_cfg": asdict(self.net_cfg)}
        tmp = self.ckpt_path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.ckpt_path)  # atomic: a kill mid-save never loses the last checkpoint
        save_draft(self.run_dir / "export", self.model, self.corpus.vocab,
                   {"step": self.step, "corpus": self.corpus.stats})

    def log(self, record: dict[str, object]) -> None:
        record = {"time": round(time.time(), 1), **record}
        with open(self.run_dir / "log.jsonl", "a") as fh:
            fh.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)

    # -- evaluation ---------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Held-out FIM holes: losses, and the teacher-forced accuracy of the draft on the hole.

        ``ar_accept`` is the mean length of the hole prefix that greedy AR drafting reproduces (against the
        real text, a proxy for agreement with the target); ``par_acc_k`` the accuracy of the k-th token of
        a parallel step anchored at the hole's start."""
        self.model.eval()
        n = self.cfg.n_parallel
        ar_sum = par_sum = 0.0
        accept = 0.0
        par_hits = [0.0] * n
        par_count = 0
        for s in self.eval_samples:
            ids = self.corpus.vocab.to_draft[torch.as_tensor(s.tokens)]
            ctx = ids[: s.middle_start]
            hole = ids[s.middle_start :]
            seq = ids[None]
            logits = self.model(seq, torch.arange(seq.shape[1])[None])
            pred = logits[0, s.middle_start - 1 : -1].argmax(-1)
            match = (pred == hole).long()
            accept += float(match.cumprod(0).sum())
            ar_sum += float(F.cross_entropy(logits[0, s.middle_start - 1 : -1], hole))
            # Parallel step at the hole's start: context + (n-1) masks, plain causal positions.
            p_ids = torch.cat([ctx, torch.full((n - 1,), MASK_ID)])[None]
            p_logits = self.model(p_ids, torch.arange(p_ids.shape[1])[None])[0, len(ctx) - 1 :]
            k = min(n, int(hole.numel()))
            if k:
                par_count += 1
                guess = p_logits[:k].argmax(-1)
                for j in range(k):
                    par_hits[j] += float(guess[j] == hole[j])
                par_sum += float(F.cross_entropy(p_logits[:k], hole[:k]))
        self.model.train()
        m = len(self.eval_samples)
        out = {"eval_ar_loss": ar_sum / m, "eval_ar_accept": accept / m, "eval_par_loss": par_sum / max(1, par_count)}
        out.update({f"eval_par_acc_{j + 1}": par_hits[j] / max(1, par_count) for j in range(n)})
        return out

    # -- loop ---------------------------------------------------------------------------------------
    def train(self) -> dict[str, float]:
        cfg = self.cfg
        started = last_ckpt = time.time()
        tokens = 0
        window: list[float] = []
        self.model.train()
        last: dict[str, float] = {}
        while self.step < cfg.max_steps:
            if cfg.max_minutes and time.time() - started > cfg.max_minutes * 60:
                break
            batch = self.next_batch()
            for group in self.opt.param_groups:
                group["lr"] = lr_at(cfg, self.step)
            # bf16 autocast: matmuls in bf16, master weights/optimizer state stay fp32.
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
                ar, par = losses(self.model, batch)
            loss = ar + cfg.parallel_weight * par
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.step += 1
            tokens += int((batch.labels != IGNORE).sum())
            window.append(loss.item())
            last = {"loss": loss.item(), "ar_loss": ar.item(), "par_loss": par.item()}
            if self.step % cfg.log_every == 0:
                el = time.time() - started
                self.log({"step": self.step, **{k: round(v, 4) for k, v in last.items()},
                          "lr": round(lr_at(cfg, self.step), 6), "tok_per_s": round(tokens / el, 1)})
            if cfg.eval_every and self.step % cfg.eval_every == 0:
                self.log({"step": self.step, **{k: round(v, 4) for k, v in self.evaluate().items()}})
            if time.time() - last_ckpt > cfg.checkpoint_minutes * 60:
                self.save()
                last_ckpt = time.time()
        self.save()
        return last


def run(cfg: TrainConfig) -> dict[str, float]:
    return Trainer(cfg).train()

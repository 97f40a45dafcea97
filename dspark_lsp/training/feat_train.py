"""Training the feature draft on extracted target features (``python -m dspark_lsp.training.feat_train``).

Loss per position j: cross-entropy against the target's greedy token a_{j+1} (distillation: the draft
is scored on what this target says, not on the corpus text) plus a smooth-L1 pull of g_j towards the
target's next feature f_{j+1}. The layer is unrolled ``unroll`` times ("training-time test"): pass s
feeds the previous pass's predictions g^{s-1}_{j-1} in place of true features and attends exactly what
draft step s attends at inference (true keys up to j-s+1, then its own earlier steps), so the draft
learns from its own errors instead of only from perfect inputs.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open

from dspark_lsp.drafts.feature.config import FeatDraftConfig
from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.io import save_feat_draft
from dspark_lsp.drafts.vocab import UNK_ID, DraftVocab
from dspark_lsp.errors import UserError
from dspark_lsp.training.features import shard_paths
from dspark_lsp.training.online import OnlineRows

IGNORE = -100


@dataclass
class FeatTrainConfig:
    name: str = "dspark-feat-qwc05"
    runs_dir: Path = Path("runs")
    features: Path = Path("runs/feat-qwc05/features")
    target: str = ""  # target model directory: embeddings (inputs) and LM head rows (head init)
    corpus_file: Path = Path("runs/dspark-draft-qwc05/corpus.json")  # the reduced vocabulary
    # Where corpus_file does not exist yet: a shipped draft (directory or its vocab.json) whose reduced
    # vocabulary to write there, so a draft for another target of the same tokenizer (the 1.5B) starts
    # without the token draft's run (the corpus split then follows train-draft's defaults).
    vocab_from: str = ""
    # The layer's width; 0: the target's hidden size. A narrower layer reads and predicts the target's
    # features through fc and an output map (FeatDraftConfig.feat_dim), as a transferred draft does.
    d_model: int = 0
    # A saved draft (an export directory) whose weights start a new run in place of random ones, e.g. the
    # 1.5B's draft made from the 0.5B's by training/transfer.py; its shape overrides d_model/n_heads/d_ff.
    init_from: str = ""
    # Train only what touches the target (fc, the output map, the input norms), keeping the decoder layer
    # and the head as they start: for a transferred draft with little data, where the layer would overfit.
    freeze_layer: bool = False
    n_heads: int = 0  # 0: from the target's hidden size (heads of 64: 14 for the 0.5B, 24 for the 1.5B)
    d_ff: int = 0  # 0: from the target's hidden size (19/7 of it, a multiple of 64: 2 432 / 4 160)
    n_layers: int = 1
    unroll: int = 3
    batch_size: int = 4
    lr: float = 5e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.0
    reg_weight: float = 1.0
    max_steps: int = 3000
    max_minutes: float = 0.0
    checkpoint_minutes: float = 5.0
    eval_every: int = 100
    log_every: int = 10
    threads: int = 2
    bf16: bool = True  # autocast matmuls to bf16 (AVX512-BF16 CPUs run them ~2x faster)
    seed: int = 0
    device: str = "cpu"  # "cuda" on an accelerator machine
    # Draw every batch fresh from the corpus through the target (training.online) instead of reading
    # extracted shards: for an accelerator, where the target is fast and storing features is not.
    online: bool = False
    extra_share: float = 0.3  # online: share of other-language samples (see training.features)
    target_dtype: str = "bfloat16"  # online: the target's dtype while it makes features
    val_shards: int = 1  # the first shard(s): never trained on

    @property
    def run_dir(self) -> Path:
        return self.runs_dir / self.name


def unroll_mask(n: int, s: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Bool [1, 1, n, s*n]: what pass ``s`` (1-based) at position j may attend, given the keys of
    passes 1..s laid side by side: pass-1 keys at positions <= j-s+1, pass-r keys at j-s+r."""
    j = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    blocks = [k <= j - s + 1] + [k == j - s + r for r in range(2, s + 1)]
    return torch.cat(blocks, dim=1)[None, None].to(device)


def target_dir(target: str) -> Path:
    """The directory of ``target``: a prepared registry name (``qwen2.5-coder-1.5b``) or a directory."""
    from dspark_lsp.models.loader import resolve_model

    source = resolve_model(target)
    if not isinstance(source, Path):
        raise UserError(f"target {target!r} is neither a prepared model nor a directory")
    return source


def draft_shape(hidden: int, n_heads: int = 0, d_ff: int = 0) -> tuple[int, int]:
    """(heads, d_ff) of a feature draft over features of size ``hidden``; 0 = derived: heads of 64
    and a SwiGLU width of 19/7 the hidden size in multiples of 64 (the 0.5B's 896 -> 14, 2 432)."""
    heads = n_heads or max(1, hidden // 64)
    width = d_ff or max(64, round(hidden * 19 / 7 / 64) * 64)
    if hidden % heads or (hidden // heads) % 2:
        raise UserError(f"hidden size {hidden} does not split into {heads} heads of even size: pass --n-heads")
    return heads, width


def ensure_corpus_file(cfg: FeatTrainConfig) -> None:
    """Write ``cfg.corpus_file`` from ``cfg.vocab_from`` (a shipped draft's reduced vocabulary) when it
    does not exist yet."""
    if cfg.corpus_file.is_file() or not cfg.vocab_from:
        return
    src = Path(cfg.vocab_from).expanduser()
    src = src / "vocab.json" if src.is_dir() else src
    if not src.is_file():
        raise UserError(f"no vocab.json at {cfg.vocab_from}")
    saved = json.loads(src.read_text())
    cfg.corpus_file.parent.mkdir(parents=True, exist_ok=True)
    cfg.corpus_file.write_text(json.dumps({"target_ids": saved["target_ids"],
                                           "target_vocab_size": saved["target_vocab_size"],
                                           "stats": {"vocabulary_from": str(src)}}))


def load_target_tables(target: str, vocab: DraftVocab) -> tuple[torch.Tensor, torch.Tensor]:
    """(the target's full input embedding table, its LM head rows for the kept vocabulary)."""
    path = target_dir(target) / "model.safetensors"
    if not path.is_file():
        raise UserError(f"no model.safetensors under {target}")
    with safe_open(str(path), "pt") as f:
        emb = f.get_tensor("model.embed_tokens.weight").float()
        keys = set(f.keys())
        head = f.get_tensor("lm_head.weight").float() if "lm_head.weight" in keys else emb
    rows = torch.zeros(vocab.size, head.shape[1])
    rows[2:] = head[vocab.target_ids]
    return emb, rows


class Shards:
    """Extracted samples in memory; picks up shards the extractor writes while training runs."""

    def __init__(self, root: Path, val_shards: int) -> None:
        self.root, self.val_shards = root, val_shards
        self.loaded: set[Path] = set()
        self.train: list[dict[str, torch.Tensor]] = []
        self.val: list[dict[str, torch.Tensor]] = []

    def refresh(self) -> int:
        paths = shard_paths(self.root)
        for i, p in enumerate(paths):
            if p in self.loaded:
                continue
            rows = torch.load(p, weights_only=True)
            (self.val if i < self.val_shards else self.train).extend(rows)
            self.loaded.add(p)
        return len(self.train)


def make_batch(rows: list[dict[str, torch.Tensor]], vocab: DraftVocab) -> dict[str, torch.Tensor]:
    t = max(int(r["tokens"].numel()) for r in rows)
    b, d = len(rows), int(rows[0]["feat"].shape[1])
    tokens = torch.zeros(b, t, dtype=torch.long)
    feat = torch.zeros(b, t, d)
    label = torch.full((b, t), IGNORE, dtype=torch.long)
    valid = torch.zeros(b, t, dtype=torch.bool)
    for i, r in enumerate(rows):
        n = int(r["tokens"].numel())
        tokens[i, :n] = r["tokens"].long()
        feat[i, :n] = r["feat"].float()
        lab = vocab.to_draft[r["pred"].long()]
        lab[lab == UNK_ID] = IGNORE  # the draft cannot propose a token it does not have
        label[i, :n] = lab
        valid[i, :n] = True
    return {"tokens": tokens, "feat": feat, "label": label, "valid": valid}


def unrolled_features(
    model: FeatDraft, emb: torch.Tensor, f_true: torch.Tensor, unroll: int
) -> list[torch.Tensor]:
    """The predicted features g^s [B, n, d] of passes s = 1..unroll over inputs (f_true[j], emb[j]).

    Pass s at position j computes exactly what draft step s computes at inference when the true
    features end at position j-s+1 (tests/drafts/test_featdraft.py checks this against the cached path)."""
    b, n, _ = emb.shape
    positions = torch.arange(n, device=emb.device)[None].expand(b, n)
    cache = model.new_cache()
    outs: list[torch.Tensor] = []
    for s in range(1, unroll + 1):
        # Step s sees the previous step's guess of the feature, not the truth.
        f_in = f_true if not outs else torch.cat([f_true[:, :1], outs[-1][:, :-1]], dim=1)
        outs.append(model(emb, f_in, positions, unroll_mask(n, s, emb.device), cache))
    return outs


# Per unrolled pass: (token loss, feature loss, top-1 hits, counted positions).
PassLosses = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def unrolled_losses(
    model: FeatDraft, emb_table: torch.Tensor, batch: dict[str, torch.Tensor], unroll: int
) -> list[PassLosses]:
    """Per pass: (token loss, feature loss, top-1 hits, counted positions)."""
    tokens, feat, label, valid = batch["tokens"], batch["feat"], batch["label"], batch["valid"]
    n = tokens.shape[1] - 1
    emb = F.embedding(tokens[:, 1:], emb_table)  # position j reads token j+1
    f_next = feat[:, 1:]
    lab, ok = label[:, 1:], valid[:, 1:]
    out = []
    for s, g in enumerate(unrolled_features(model, emb, feat[:, :n], unroll), start=1):
        use = ok.clone()
        use[:, : s - 1] = False  # step s needs s-1 earlier positions
        logits = model.logits(g).float()
        tl = lab.masked_fill(~use, IGNORE)
        tok_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tl.reshape(-1), ignore_index=IGNORE)
        reg = F.smooth_l1_loss(g.float()[use], f_next[use])
        hits = ((logits.argmax(-1) == tl) & (tl != IGNORE)).sum()
        count = (tl != IGNORE).sum()
        out.append((tok_loss, reg, hits, count))
    return out


def to_device(batch: dict[str, torch.Tensor], device: str) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def _autocast(cfg: FeatTrainConfig) -> Any:
    kind = "cuda" if cfg.device.startswith("cuda") else "cpu"
    return torch.autocast(kind, dtype=torch.bfloat16, enabled=cfg.bf16)


def _online_rows(cfg: FeatTrainConfig, step: int) -> OnlineRows:
    from dspark_lsp.models.loader import load_causal_lm
    from dspark_lsp.training.features import training_sampler

    target, _ = load_causal_lm(cfg.target, device=cfg.device, dtype=cfg.target_dtype, pack="off")
    target.requires_grad_(False)
    vocab = int(target.config.vocab_size)
    # A registry name loads as itself (dtype gguf needs it: the registry knows the GGUF file); the
    # tokenizer is read from its prepared directory.
    draw = training_sampler(str(target_dir(cfg.target)), cfg.corpus_file, vocab, cfg.extra_share, cfg.run_dir)
    # A resumed run draws other samples than the run before it (its seed moves with the step).
    return OnlineRows(target, draw, cfg.seed * 100003 + step)


def lr_at(cfg: FeatTrainConfig, step: int) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def run(cfg: FeatTrainConfig, online: OnlineRows | None = None) -> None:
    """Train (resuming from the run's checkpoint). ``online``: the source of fresh rows when
    ``cfg.online`` (built from ``cfg.target`` and the corpus when not given)."""
    torch.set_num_threads(cfg.threads)
    ensure_corpus_file(cfg)
    vocab = _corpus_vocab(cfg)
    emb_table, head_rows = load_target_tables(cfg.target, vocab)
    model = _new_model(cfg, vocab, emb_table, head_rows)
    emb_table = emb_table.to(cfg.device)
    if cfg.freeze_layer:
        model.blocks.requires_grad_(False)
        model.head.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay)
    step = _open_run_dir(cfg, model, opt)
    shards = Shards(cfg.features, cfg.val_shards)
    if cfg.online and online is None:
        online = _online_rows(cfg, step)
    rng = random.Random(cfg.seed + step)
    log = (cfg.run_dir / "log.jsonl").open("a")
    t0 = last_ckpt = time.time()
    while step < cfg.max_steps:
        rows = _next_rows(cfg, step, online, shards, rng)
        loss, parts = _train_step(model, opt, emb_table, make_batch(rows, vocab), cfg, step)
        step += 1
        if step % cfg.log_every == 0:
            _log_record(log, _train_record(cfg, step, loss, parts, online, shards) | {"elapsed_s": round(time.time() - t0, 1)})
        if step % cfg.eval_every == 0 and shards.val:
            _log_record(log, {"step": step, "val_acc": evaluate(model, emb_table, shards.val, vocab, cfg)})
        out_of_time = cfg.max_minutes and time.time() - t0 > cfg.max_minutes * 60
        if time.time() - last_ckpt > cfg.checkpoint_minutes * 60 or step >= cfg.max_steps or out_of_time:
            save(model, opt, step, vocab, cfg)
            last_ckpt = time.time()
        if out_of_time:
            break
    save(model, opt, step, vocab, cfg)


def _corpus_vocab(cfg: FeatTrainConfig) -> DraftVocab:
    """The draft's vocabulary, as the corpus step saved it."""
    if not cfg.corpus_file.is_file():
        raise UserError(f"no corpus file at {cfg.corpus_file}")
    saved = json.loads(cfg.corpus_file.read_text())
    return DraftVocab(saved["target_ids"], saved["target_vocab_size"])


def _new_model(cfg: FeatTrainConfig, vocab: DraftVocab, emb_table: torch.Tensor, head_rows: torch.Tensor) -> FeatDraft:
    """A fresh draft (seeded) sized to the target's embeddings, or the one ``cfg.init_from`` holds, on
    ``cfg.device``."""
    hidden = int(emb_table.shape[1])
    if cfg.init_from:
        return _initial_model(cfg, vocab, hidden)
    d_model = cfg.d_model or hidden
    heads, width = draft_shape(d_model, cfg.n_heads, cfg.d_ff)
    net_cfg = FeatDraftConfig(d_model=d_model, n_heads=heads, d_ff=width, n_layers=cfg.n_layers,
                              vocab_size=vocab.size, target_vocab_size=vocab.target_vocab_size,
                              feat_dim=hidden if d_model != hidden else 0)
    torch.manual_seed(cfg.seed)
    model = FeatDraft(net_cfg)
    with torch.no_grad():
        model.head.weight.copy_(head_rows)  # start from the target's own output head
    model.to(cfg.device)
    return model


def _initial_model(cfg: FeatTrainConfig, vocab: DraftVocab, hidden: int) -> FeatDraft:
    """The draft saved at ``cfg.init_from``, checked against this run's target and vocabulary."""
    from dspark_lsp.drafts.io import load_feat_draft

    model, saved_vocab, _ = load_feat_draft(Path(cfg.init_from).expanduser())
    if model.cfg.width != hidden or not torch.equal(saved_vocab.target_ids, vocab.target_ids):
        raise UserError(f"{cfg.init_from} reads {model.cfg.width}-wide features over another vocabulary than "
                        f"this run's target ({hidden}) and corpus file")
    return model.to(cfg.device)


def _open_run_dir(cfg: FeatTrainConfig, model: FeatDraft, opt: torch.optim.Optimizer) -> int:
    """Make the run directory, resume from its checkpoint if there is one, record the config; the step
    to start from."""
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = run_dir / "checkpoint.pt"
    step = 0
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False, map_location=cfg.device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = int(state["step"])
        print(f"resumed at step {step}", file=sys.stderr)
    (run_dir / "train_config.json").write_text(json.dumps(asdict(cfg), default=str, indent=2))
    return step


def _next_rows(cfg: FeatTrainConfig, step: int, online: OnlineRows | None, shards: Shards,
               rng: random.Random) -> list[dict[str, torch.Tensor]]:
    """The next batch's rows: fresh ones from the online source, else a sample of the training shards
    (re-read every 50 steps, so shards written meanwhile join)."""
    if online is not None:
        rows = online.take(cfg.batch_size)
        if step % 50 == 0:
            shards.refresh()  # the validation shard(s), when the features folder has them
        return rows
    if step % 50 == 0 or not shards.train:
        if shards.refresh() < cfg.batch_size:
            raise UserError(f"fewer than {cfg.batch_size} training samples in {cfg.features}")
    return rng.sample(shards.train, cfg.batch_size)


def _train_step(model: FeatDraft, opt: torch.optim.Optimizer, emb_table: torch.Tensor,
                batch: dict[str, torch.Tensor], cfg: FeatTrainConfig, step: int) -> tuple[torch.Tensor, list[PassLosses]]:
    """One optimizer step at ``step``'s learning rate; the loss and the per-pass parts."""
    for group in opt.param_groups:
        group["lr"] = lr_at(cfg, step)
    batch = to_device(batch, cfg.device)
    model.train()
    with _autocast(cfg):
        parts = unrolled_losses(model, emb_table, batch, cfg.unroll)
    loss = sum((tl + cfg.reg_weight * rl for tl, rl, _, _ in parts), torch.zeros(()))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss, parts


def _train_record(cfg: FeatTrainConfig, step: int, loss: torch.Tensor, parts: list[PassLosses],
                  online: OnlineRows | None, shards: Shards) -> dict[str, Any]:
    seen = online.tokens_made if online is not None else len(shards.train)
    return {"time": round(time.time(), 1), "step": step, "loss": round(float(loss.detach()), 4),
            "lr": round(lr_at(cfg, step), 6), ("online_tokens" if online is not None else "samples"): seen,
            "acc": [round(float(h) / max(int(c), 1), 4) for _, _, h, c in parts],
            "tok_loss": [round(float(t.detach()), 3) for t, _, _, _ in parts],
            "reg": [round(float(r.detach()), 4) for _, r, _, _ in parts]}


def _log_record(log: Any, rec: dict[str, Any]) -> None:
    """A record to the run's log.jsonl and to stdout."""
    log.write(json.dumps(rec) + "\n")
    log.flush()
    print(json.dumps(rec), flush=True)


@torch.no_grad()
def evaluate(model: FeatDraft, emb_table: torch.Tensor, rows: list[dict[str, torch.Tensor]],
             vocab: DraftVocab, cfg: FeatTrainConfig) -> list[float]:
    """Top-1 agreement with the target per unrolled step, on the validation shard(s)."""
    model.eval()
    hits = [0] * cfg.unroll
    counts = [0] * cfg.unroll
    for i in range(0, len(rows), cfg.batch_size):
        batch = to_device(make_batch(rows[i : i + cfg.batch_size], vocab), cfg.device)
        with _autocast(cfg):
            parts = unrolled_losses(model, emb_table, batch, cfg.unroll)
        for s, (_, _, h, c) in enumerate(parts):
            hits[s] += int(h)
            counts[s] += int(c)
    return [round(h / max(c, 1), 4) for h, c in zip(hits, counts, strict=True)]


def save(model: FeatDraft, opt: torch.optim.Optimizer, step: int, vocab: DraftVocab, cfg: FeatTrainConfig) -> None:
    run_dir = cfg.run_dir
    tmp = run_dir / "checkpoint.tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    tmp.replace(run_dir / "checkpoint.pt")
    save_feat_draft(run_dir / "export", model, vocab, {"step": step, "unroll": cfg.unroll})


def main(argv: list[str] | None = None) -> int:
    from dspark_lsp.training.cli import add_config_flags, config_from_args

    p = argparse.ArgumentParser(prog="python -m dspark_lsp.training.feat_train",
                                description="Train the feature draft on extracted target features.")
    add_config_flags(p, FeatTrainConfig)
    cfg: FeatTrainConfig = config_from_args(p.parse_args(argv), FeatTrainConfig)
    try:
        run(cfg)
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

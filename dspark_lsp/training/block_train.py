"""Fine-tuning a feature draft into a block drafter with Markov and confidence heads
(``python -m dspark_lsp.training.block_train``; docs/ALGORITHM.md, *Block drafting*).

Starts from a trained feature draft (its layer, fc and head are kept; the block inputs and both heads are
new) and trains on extracted target features (training/features, ideally of the target the draft will
run beside — the 4-bit one on a CPU). One batch gives three kinds of positions, all scored against the
target's greedy tokens:

* **autoregressive passes** 1..``unroll`` exactly as training/feat_train (pass s reads the draft's own
  guesses), so the draft keeps what it could do;
* **block offsets** 1..``block_size - 1`` after an anchor j: learned inputs at positions j+1.., attending
  the true keys up to j and the block's earlier offsets — what ``FeatureDraftSource._block`` runs in one
  forward. Anchors are a random share (``anchor_share``) of the positions, which keeps a step cheap;
* every position's logits get the Markov bias of the token before it (the target's greedy token there,
  which is what the draft will have chosen whenever the position matters: every earlier one accepted).

The confidence head learns, as a probe with its inputs detached, whether a position's greedy pick is the
target's token given that every earlier position of its chain was: that is the probability the decoder's
stop rule needs. Its calibration is reported in reliability bins on the held-out shard(s).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from dspark_lsp.drafts.feature.config import FeatDraftConfig
from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.io import load_feat_draft, save_feat_draft
from dspark_lsp.drafts.vocab import UNK_ID, DraftVocab
from dspark_lsp.errors import UserError
from dspark_lsp.training.feat_train import (
    IGNORE,
    Shards,
    load_target_tables,
    make_batch,
    unroll_mask,
)


@dataclass
class BlockTrainConfig:
    name: str = "dspark-feat-block-qwc05"
    runs_dir: Path = Path("runs")
    init: Path = Path("dspark_lsp/drafts/dspark-feat-qwc05")  # the feature draft to start from
    features: Path = Path("runs/feat4-qwc05/features")
    target: str = ""  # target model directory (its embedding table: the draft's inputs)
    block_size: int = 5
    markov_rank: int = 64
    unroll: int = 2
    anchor_share: float = 0.25
    batch_size: int = 4
    lr: float = 2e-4
    head_lr: float = 1e-3  # the new parts (block inputs, Markov and confidence heads) learn faster
    warmup_steps: int = 20
    ar_weight: float = 1.0
    block_weight: float = 1.0
    reg_weight: float = 1.0
    conf_weight: float = 1.0
    max_steps: int = 100000
    max_minutes: float = 0.0
    checkpoint_minutes: float = 5.0
    eval_every: int = 50
    log_every: int = 5
    threads: int = 2
    seed: int = 0
    val_shards: int = 1
    bins: int = 10
    # Train only the new parts (block inputs, Markov and confidence heads) on a frozen draft: ~3x cheaper
    # a step, and the draft's AR behaviour is kept exactly.
    freeze_base: bool = False
    # At the end, rescale the confidence head's logit (a, b: Platt scaling) to fit the held-out shard(s):
    # the head is trained on noisy small batches, and the decoder's cost rule wants true probabilities.
    calibrate: bool = True

    @property
    def run_dir(self) -> Path:
        return self.runs_dir / self.name


def block_mask(n: int, anchors: torch.Tensor, offsets: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Bool [1, 1, offsets*m, n + offsets*m] for the block rows of ``m`` anchors laid offset-major
    (row ``(i-1)*m + a`` = offset i of anchor ``anchors[a]``): the true keys up to the anchor, and the
    same anchor's offsets up to i."""
    m = int(anchors.numel())
    i = torch.arange(1, offsets + 1).repeat_interleave(m)  # offset of each row
    a = torch.arange(m).repeat(offsets)  # anchor index of each row
    true = torch.arange(n)[None, :] <= anchors[a][:, None]
    block = (a[:, None] == a[None, :]) & (i[None, :] <= i[:, None])
    return torch.cat([true, block], dim=1)[None, None].to(device)


def draft_ids(vocab: DraftVocab, target_ids: torch.Tensor) -> torch.Tensor:
    return vocab.to_draft.to(target_ids.device)[target_ids.clamp(min=0)]


@dataclass
class Parts:
    """One batch's outputs and what they are scored against."""

    ce: list[torch.Tensor] = field(default_factory=list)  # token losses of the AR passes
    ce_block: list[torch.Tensor] = field(default_factory=list)  # the block offsets' token loss
    reg: list[torch.Tensor] = field(default_factory=list)
    conf_logit: list[torch.Tensor] = field(default_factory=list)  # flat, positions that were reached
    conf_label: list[torch.Tensor] = field(default_factory=list)
    ar_hits: list[tuple[int, int]] = field(default_factory=list)  # per pass (hits, counted)
    block_hits: list[tuple[int, int]] = field(default_factory=list)  # per offset, chained: all before right
    anchors: int = 0


def batch_parts(model: FeatDraft, emb_table: torch.Tensor, batch: dict[str, torch.Tensor], vocab: DraftVocab,
                unroll: int, anchors: torch.Tensor) -> Parts:
    tokens, feat, label, valid = batch["tokens"], batch["feat"], batch["label"], batch["valid"]
    b, t = tokens.shape
    n = t - 1
    dev = tokens.device
    emb = F.embedding(tokens[:, 1:], emb_table)  # position j reads token j+1
    f_true, f_next = feat[:, :n], feat[:, 1:]
    lab = label[:, 1:].masked_fill(~valid[:, 1:], IGNORE)  # the target's greedy token after position j+1
    prev_ar = draft_ids(vocab, tokens[:, 1:])  # the token each AR position read: the one before its guess
    lab_ids = lab.clamp(min=0).masked_fill(lab == IGNORE, UNK_ID)
    positions = torch.arange(n, device=dev)[None].expand(b, n)
    cache = model.new_cache()
    out = Parts(anchors=int(anchors.numel()) * b)
    hits: list[torch.Tensor] = []  # per AR pass [b, n]: greedy pick == target token
    g_prev: torch.Tensor | None = None
    for s in range(1, unroll + 1):
        f_in = f_true if g_prev is None else torch.cat([f_true[:, :1], g_prev[:, :-1]], dim=1)
        g = model(emb, f_in, positions, unroll_mask(n, s, dev), cache)
        use = lab != IGNORE
        use[:, : s - 1] = False  # step s needs s-1 earlier positions
        logits = model.logits(g, prev_ar).float()
        tl = lab.masked_fill(~use, IGNORE)
        out.ce.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tl.reshape(-1), ignore_index=IGNORE))
        out.reg.append(F.smooth_l1_loss(g.float()[use], f_next[use]))
        hit = (logits.argmax(-1) == tl) & use
        hits.append(hit)
        out.ar_hits.append((int(hit.sum()), int(use.sum())))
        if model.conf is not None:
            reached = use.clone()
            for r in range(1, s):  # pass r of the same chain sits at j - s + r
                reached[:, s - 1:] &= hits[r - 1][:, r - 1 : n - s + r]
            out.conf_logit.append(model.confidence_logit(g, prev_ar, 0, s - 1, detach=True)[reached])
            out.conf_label.append(hit[reached].float())
        if s == 1 and model.has_block:
            # Offset 1 reads the anchor's token: the target's greedy one (all that matters when it is right).
            first = F.embedding(vocab.to_target.to(dev)[lab_ids[:, anchors.to(dev)]].clamp(min=0), emb_table)
            _block_parts(model, cache, g, first, n, anchors, lab, lab_ids, hit, out)
            cache.crop(n)  # the AR passes after this one read only their own keys
        g_prev = g
    return out


def _block_parts(model: FeatDraft, cache: Any, g1: torch.Tensor, first: torch.Tensor, n: int, anchors: torch.Tensor,
                 lab: torch.Tensor, lab_ids: torch.Tensor, anchor_hit: torch.Tensor, out: Parts) -> None:
    """The block offsets of ``anchors`` on the cache of AR pass 1 (the true keys); ``g1`` that pass's
    outputs (each anchor's predicted feature feeds its block), ``first`` [b, m, d] the embeddings of the
    anchors' tokens."""
    b = lab.shape[0]
    dev = lab.device
    nb = model.cfg.block_size - 1
    m = int(anchors.numel())
    x = model.block_inputs(nb, g1[:, anchors.to(dev)], first)  # [b, m, nb, d]
    x = x.transpose(1, 2).reshape(b, nb * m, -1)  # offset-major rows, as block_mask lays them out
    offs = torch.arange(1, nb + 1, device=dev).repeat_interleave(m)
    anc = anchors.to(dev).repeat(nb)
    pos = (anc + offs)[None].expand(b, -1)
    h = model.body(x, pos, block_mask(n, anchors, nb, dev), cache)
    target_pos = (anc + offs).clamp(max=n - 1)
    inside = (anc + offs) < n
    tl = lab[:, target_pos].masked_fill(~inside[None], IGNORE)  # [b, nb*m]
    prev = lab_ids[:, (target_pos - 1).clamp(min=0)]  # the greedy token of the offset before
    logits = model.logits(h, prev).float()
    out.ce_block.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tl.reshape(-1), ignore_index=IGNORE))
    hit = (logits.argmax(-1) == tl) & (tl != IGNORE)
    chain = anchor_hit[:, anchors.to(dev)]  # [b, m]: the anchor's own token right
    for i in range(nb):
        rows = slice(i * m, (i + 1) * m)
        reached = chain & (tl[:, rows] != IGNORE)
        if model.conf is not None:
            step = torch.full((m,), i + 1, device=dev)
            lg = model.confidence_logit(h[:, rows], prev[:, rows], 1, step, detach=True)
            out.conf_logit.append(lg[reached])
            out.conf_label.append(hit[:, rows][reached].float())
        chain = reached & hit[:, rows]
        out.block_hits.append((int(chain.sum()), int(anchor_hit[:, anchors.to(dev)].numel())))


def pick_anchors(n: int, share: float, block: int, rng: random.Random) -> torch.Tensor:
    """A random share of the positions that leave room for a whole block after them."""
    room = max(n - block, 1)
    m = max(1, int(room * share))
    return torch.tensor(sorted(rng.sample(range(room), min(m, room))), dtype=torch.long)


def reliability(logits: torch.Tensor, labels: torch.Tensor, bins: int) -> list[dict[str, float]]:
    """Per bin of predicted probability: how many, the mean prediction and the measured rate."""
    p = torch.sigmoid(logits.float())
    idx = (p * bins).long().clamp(max=bins - 1)
    rows = []
    for k in range(bins):
        sel = idx == k
        cnt = int(sel.sum())
        if cnt:
            rows.append({"bin": k, "lo": k / bins, "count": cnt, "predicted": round(float(p[sel].mean()), 4),
                         "measured": round(float(labels[sel].mean()), 4)})
    return rows


def new_model(cfg: BlockTrainConfig) -> tuple[FeatDraft, DraftVocab, set[str]]:
    """The draft to train (``cfg.init``'s weights plus the new parts), its vocabulary, and the names of the
    new parts' parameters."""
    base, vocab, _ = load_feat_draft(cfg.init, torch.float32)
    net = FeatDraftConfig(**{**asdict(base.cfg), "block_size": cfg.block_size, "markov_rank": cfg.markov_rank,
                             "confidence_head": True})
    model = FeatDraft(net)
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    if unexpected:
        raise UserError(f"{cfg.init}: unexpected weights {unexpected}")
    new = {n for n, _ in model.named_parameters()} - set(base.state_dict())
    if set(missing) - new:
        raise UserError(f"{cfg.init}: lacks {sorted(set(missing) - new)}")
    return model, vocab, new


def init_stand_ins(model: FeatDraft, emb_table: torch.Tensor) -> None:
    """Start the block's token stand-ins at the mean token embedding (an input the layer has seen the
    like of), plus a little noise so the offsets can part."""
    assert model.block_in is not None
    with torch.no_grad():
        mean = emb_table.float().mean(0)
        model.block_in.copy_(mean + 0.01 * mean.std() * torch.randn_like(model.block_in))


def run(cfg: BlockTrainConfig) -> None:
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model, vocab, fresh = new_model(cfg)
    emb_table, _ = load_target_tables(cfg.target, vocab)
    if model.block_in is not None:
        init_stand_ins(model, emb_table)  # (a resumed run loads its own below)
    opt = _optimizer(model, fresh, cfg)
    step = _open_run_dir(cfg, model, opt)
    shards = Shards(cfg.features, cfg.val_shards)
    rng = random.Random(cfg.seed + step)
    log = (cfg.run_dir / "log.jsonl").open("a")
    t0 = last_ckpt = time.time()
    while step < cfg.max_steps:
        if step % 50 == 0 or not shards.train:
            if shards.refresh() < cfg.batch_size:
                raise UserError(f"fewer than {cfg.batch_size} training samples in {cfg.features}")
        rows = rng.sample(shards.train, cfg.batch_size)
        loss, parts = _train_step(model, opt, emb_table, make_batch(rows, vocab), vocab, cfg, step, rng)
        step += 1
        if step % cfg.log_every == 0:
            _write(log, _train_record(step, loss, parts, len(shards.train), t0))
        if step % cfg.eval_every == 0 and shards.val:
            _write(log, {"step": step, "val": evaluate(model, emb_table, shards.val, vocab, cfg)})
        out_of_time = cfg.max_minutes and time.time() - t0 > cfg.max_minutes * 60
        if time.time() - last_ckpt > cfg.checkpoint_minutes * 60 or out_of_time:
            save(model, opt, step, vocab, cfg)
            last_ckpt = time.time()
        if out_of_time:
            break
    shards.refresh()
    if cfg.calibrate and model.conf is not None and shards.val:
        _calibrate(model, emb_table, shards.val, vocab, cfg, log, step)
    save(model, opt, step, vocab, cfg)


def _optimizer(model: FeatDraft, fresh: set[str], cfg: BlockTrainConfig) -> torch.optim.Optimizer:
    """AdamW over the new parts at ``head_lr`` and, unless the base is frozen, the base at ``lr`` (each
    group keeps its base rate for the warm-up)."""
    base_params = [p for n, p in model.named_parameters() if n not in fresh]
    if cfg.freeze_base:
        for p in base_params:
            p.requires_grad_(False)
    groups = [{"params": [p for n, p in model.named_parameters() if n in fresh], "lr": cfg.head_lr,
               "base": cfg.head_lr}]
    if not cfg.freeze_base:
        groups.append({"params": base_params, "lr": cfg.lr, "base": cfg.lr})
    return torch.optim.AdamW(groups, weight_decay=0.0)


def _open_run_dir(cfg: BlockTrainConfig, model: FeatDraft, opt: torch.optim.Optimizer) -> int:
    """Make the run directory, resume from its checkpoint if there is one, record the config; the step
    to start from."""
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = run_dir / "checkpoint.pt"
    step = 0
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        # A run may go on with the base unfrozen (a second stage): the optimizer's groups differ then, and
        # it starts afresh on the weights so far.
        if len(state["opt"]["param_groups"]) == len(opt.param_groups):
            opt.load_state_dict(state["opt"])
        step = int(state["step"])
        print(f"resumed at step {step}", file=sys.stderr)
    (run_dir / "train_config.json").write_text(json.dumps(asdict(cfg), default=str, indent=2))
    return step


def _train_step(model: FeatDraft, opt: torch.optim.Optimizer, emb_table: torch.Tensor,
                batch: dict[str, torch.Tensor], vocab: DraftVocab, cfg: BlockTrainConfig, step: int,
                rng: random.Random) -> tuple[torch.Tensor, Parts]:
    """One optimizer step (learning rates warmed up by ``step``) on anchors drawn from ``rng``; the loss
    and its parts."""
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    for g in opt.param_groups:
        g["lr"] = g["base"] * warm
    n = batch["tokens"].shape[1] - 1
    model.train()
    parts = batch_parts(model, emb_table, batch, vocab, cfg.unroll,
                        pick_anchors(n, cfg.anchor_share, cfg.block_size, rng))
    loss = _loss(parts, cfg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    return loss, parts


def _train_record(step: int, loss: torch.Tensor, parts: Parts, samples: int, t0: float) -> dict[str, Any]:
    return {"time": round(time.time(), 1), "step": step, "loss": round(float(loss.detach()), 4),
            "samples": samples, "ar_acc": [round(h / max(c, 1), 4) for h, c in parts.ar_hits],
            "block_chain": [round(h / max(c, 1), 4) for h, c in parts.block_hits],
            "ce": [round(float(c.detach()), 3) for c in parts.ce + parts.ce_block],  # AR passes, block
            "s_per_step": round((time.time() - t0) / max(step, 1), 2)}


def _calibrate(model: FeatDraft, emb_table: torch.Tensor, val: list[dict[str, torch.Tensor]], vocab: DraftVocab,
               cfg: BlockTrainConfig, log: Any, step: int) -> None:
    """Fit Platt's (a, b) on the validation shard(s), fold it into the confidence head, log it."""
    a, b = fit_platt(*confidence_pairs(model, emb_table, val, vocab, cfg))
    fold_platt(model, a, b)
    _write(log, {"step": step, "platt": [round(a, 4), round(b, 4)],
                 "val": evaluate(model, emb_table, val, vocab, cfg)})
    # (The optimizer's state still fits: only the head's scale moved.)


@torch.no_grad()
def confidence_pairs(model: FeatDraft, emb_table: torch.Tensor, rows: list[dict[str, torch.Tensor]],
                     vocab: DraftVocab, cfg: BlockTrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The confidence head's logits and the accepted flags on ``rows`` (anchors as in :func:`evaluate`)."""
    logits, labels = [], []
    for parts in _val_parts(model, emb_table, rows, vocab, cfg):
        logits += parts.conf_logit
        labels += parts.conf_label
    return torch.cat(logits).float(), torch.cat(labels).float()


def fit_platt(logits: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    """(a, b) minimising the log loss of sigmoid(a * logit + b) on the given pairs."""
    a = torch.ones((), requires_grad=True)
    b = torch.zeros((), requires_grad=True)
    opt = torch.optim.LBFGS([a, b], lr=0.5, max_iter=200)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(a * logits + b, labels)
        loss.backward()
        return loss

    opt.step(closure)  # type: ignore[no-untyped-call]
    return float(a.detach()), float(b.detach())


def fold_platt(model: FeatDraft, a: float, b: float) -> None:
    """Make the head compute ``a * logit + b`` itself."""
    assert model.conf is not None and model.conf_step is not None
    with torch.no_grad():
        model.conf.mul_(a)
        model.conf_step.mul_(a).add_(b)


def _loss(parts: Parts, cfg: BlockTrainConfig) -> torch.Tensor:
    loss = sum((cfg.ar_weight * ce for ce in parts.ce), torch.zeros(()))
    loss = loss + sum((cfg.block_weight * ce for ce in parts.ce_block), torch.zeros(()))
    loss = loss + sum((cfg.reg_weight * r for r in parts.reg), torch.zeros(()))
    if parts.conf_logit:
        lg, lb = torch.cat(parts.conf_logit), torch.cat(parts.conf_label)
        if lg.numel():
            loss = loss + cfg.conf_weight * F.binary_cross_entropy_with_logits(lg, lb)
    return loss


def _write(log: Any, rec: dict[str, Any]) -> None:
    log.write(json.dumps(rec) + "\n")
    log.flush()
    print(json.dumps(rec), flush=True)


def _val_parts(model: FeatDraft, emb_table: torch.Tensor, rows: list[dict[str, torch.Tensor]], vocab: DraftVocab,
               cfg: BlockTrainConfig) -> Iterator[Parts]:
    """Each held-out batch's parts, in eval mode, with the same anchors every time."""
    model.eval()
    rng = random.Random(12345)
    for i in range(0, len(rows), cfg.batch_size):
        batch = make_batch(rows[i : i + cfg.batch_size], vocab)
        n = batch["tokens"].shape[1] - 1
        yield batch_parts(model, emb_table, batch, vocab, cfg.unroll,
                          pick_anchors(n, cfg.anchor_share, cfg.block_size, rng))


@torch.no_grad()
def evaluate(model: FeatDraft, emb_table: torch.Tensor, rows: list[dict[str, torch.Tensor]], vocab: DraftVocab,
             cfg: BlockTrainConfig) -> dict[str, Any]:
    """On the held-out shard(s): AR accuracy per pass, block chain accuracy per offset (every offset
    before it right too), and the confidence head's reliability bins."""
    ar = [[0, 0] for _ in range(cfg.unroll)]
    blk = [[0, 0] for _ in range(max(cfg.block_size - 1, 0))]
    logits, labels = [], []
    for parts in _val_parts(model, emb_table, rows, vocab, cfg):
        for acc, (h, c) in zip(ar + blk, parts.ar_hits + parts.block_hits, strict=True):
            acc[0] += h
            acc[1] += c
        logits += parts.conf_logit
        labels += parts.conf_label
    out: dict[str, Any] = {"ar_acc": [round(h / max(c, 1), 4) for h, c in ar],
                           "block_chain": [round(h / max(c, 1), 4) for h, c in blk]}
    if logits:
        out["reliability"] = reliability(torch.cat(logits), torch.cat(labels), cfg.bins)
    return out


def inherit_untrained_steps(model: FeatDraft, cfg: BlockTrainConfig) -> None:
    """Chain steps past those trained (AR steps >= ``unroll``, offsets >= ``block_size``) take the last
    trained step's confidence bias instead of an untrained zero: drafting goes to k_max = 5 steps."""
    if model.conf_step is None:
        return
    with torch.no_grad():
        for kind, trained in ((0, cfg.unroll), (1, cfg.block_size)):
            if 0 < trained < model.conf_step.shape[1]:
                model.conf_step[kind, trained:] = model.conf_step[kind, trained - 1]


def save(model: FeatDraft, opt: torch.optim.Optimizer, step: int, vocab: DraftVocab, cfg: BlockTrainConfig) -> None:
    inherit_untrained_steps(model, cfg)
    tmp = cfg.run_dir / "checkpoint.tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "freeze_base": cfg.freeze_base}, tmp)
    tmp.replace(cfg.run_dir / "checkpoint.pt")
    save_feat_draft(cfg.run_dir / "export", model, vocab, {"step": step, "unroll": cfg.unroll,
                                                           "init": str(cfg.init), "block_train": True})


def main(argv: list[str] | None = None) -> int:
    from dspark_lsp.training.cli import add_config_flags, config_from_args

    p = argparse.ArgumentParser(prog="python -m dspark_lsp.training.block_train",
                                description="Fine-tune a feature draft into a block drafter with Markov and "
                                            "confidence heads (rerun the same command to resume).")
    add_config_flags(p, BlockTrainConfig)
    cfg: BlockTrainConfig = config_from_args(p.parse_args(argv), BlockTrainConfig)
    try:
        if not cfg.target:
            raise UserError("--target (the target model directory) is required")
        run(cfg)
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A feature draft for one target, started from a trained draft of a smaller target of the same tokenizer.

Training a feature draft from nothing took the 0.5B's ~2.5M tokens of target features and ~4 CPU-hours
over five sessions; the 1.5B makes features ~3x slower on the same CPU. Two targets of one family trained
on the same data keep much of the same information in their last hidden states, so the smaller target's
trained layer is a far better start than a random one if its inputs and output are mapped between the two
feature spaces. This module builds that start; ``feat_train --init-from`` trains it further.

What it builds (``FeatDraftConfig.feat_dim`` = the new target's hidden size, ``d_model`` = the old
draft's): the decoder layer is copied; ``fc`` reads the new target's embedding and feature through two
linear maps fitted by ridge least squares - embedding rows of the same token ids (the vocabulary alone
says which rows pair up), and last hidden states of both targets at the same positions of the same
text - composed with the old ``fc``; ``out`` maps the layer's output (a guess of the old target's next
feature) to the new target's feature space (fitted on the same pairs); ``head`` is the new target's own
LM-head rows for the kept vocabulary. Block step, Markov and confidence heads are not carried over (the
old ones were fitted to the old target's acceptance).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dspark_lsp.drafts.feature.config import FeatDraftConfig
from dspark_lsp.drafts.feature.model import FeatDraft
from dspark_lsp.drafts.io import load_feat_draft, resolve_draft_dir, save_feat_draft
from dspark_lsp.drafts.vocab import DraftVocab
from dspark_lsp.errors import UserError
from dspark_lsp.training.samples import MIN_SAMPLE_TOKENS, Sample


@dataclass
class TransferConfig:
    source: str = "dspark-feat-qwc05"  # the trained draft to start from (shipped name or directory)
    source_target: str = "qwen2.5-coder-0.5b"  # the target it was trained for
    target: str = "qwen2.5-coder-1.5b"  # the target the new draft is for
    out: Path = Path("runs/dspark-feat-qwc15-init")
    corpus_file: Path = Path("runs/dspark-draft-qwc05/corpus.json")
    tokens: int = 16000  # paired feature positions to fit the feature maps on
    ridge: float = 1e-2  # relative to the mean diagonal of X^T X
    extra_share: float = 0.3
    threads: int = 2
    dtype: str = "bfloat16"  # the targets' dtype while they make features
    seed: int = 77


def ridge_fit(x: torch.Tensor, y: torch.Tensor, ridge: float) -> tuple[torch.Tensor, float]:
    """M [dy, dx] minimising |y - x M^T|^2 + lam |M|^2 (lam = ``ridge`` x mean diag of x^T x), in float64,
    and the share of y's variance it explains on the rows it was fitted on."""
    xd, yd = x.double(), y.double()
    gram = xd.T @ xd
    lam = ridge * float(gram.diagonal().mean())
    m = torch.linalg.solve(gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype), xd.T @ yd).T
    resid = yd - xd @ m.T
    explained = 1.0 - float(resid.pow(2).sum() / (yd - yd.mean(0)).pow(2).sum())
    return m.float(), explained


def rms_normed(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x), row by row: what an RMSNorm does before its weight."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@torch.inference_mode()
def last_states(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """The model's last hidden states (after its final norm: what its LM head reads), [n, d] float."""
    x = torch.tensor([ids], dtype=torch.long)
    decoder: Any = model.get_decoder()  # type: ignore[operator]
    return decoder(input_ids=x, use_cache=False).last_hidden_state[0].float()


def paired_features(new: torch.nn.Module, old: torch.nn.Module, draw: Callable[[random.Random], Sample], tokens: int,
                    seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(new target's features, old target's features) at the same positions of ~``tokens`` positions of
    training samples."""
    rng = random.Random(seed)
    fn, fo, n, t0 = [], [], 0, time.time()
    while n < tokens:
        s = draw(rng)
        if len(s.tokens) < MIN_SAMPLE_TOKENS:
            continue
        fn.append(last_states(new, s.tokens))
        fo.append(last_states(old, s.tokens))
        n += len(s.tokens)
        print(json.dumps({"paired_tokens": n, "elapsed_s": round(time.time() - t0, 1)}), file=sys.stderr, flush=True)
    return torch.cat(fn), torch.cat(fo)


@torch.no_grad()
def transferred(source: FeatDraft, vocab: DraftVocab, new_emb: torch.Tensor, old_emb: torch.Tensor,
                new_head_rows: torch.Tensor, f_new: torch.Tensor, f_old: torch.Tensor,
                ridge: float) -> tuple[FeatDraft, dict[str, float]]:
    """The new target's draft built from ``source`` (see the module doc) and each fit's explained variance."""
    sc = source.cfg
    if sc.feat_dim and sc.feat_dim != sc.d_model:
        raise UserError("the source draft must read its own target's features at its layer's width")
    width = int(new_emb.shape[1])
    cfg = FeatDraftConfig(d_model=sc.d_model, n_heads=sc.n_heads, d_ff=sc.d_ff, n_layers=sc.n_layers,
                          vocab_size=sc.vocab_size, target_vocab_size=sc.target_vocab_size,
                          rope_theta=sc.rope_theta, norm_eps=sc.norm_eps, max_context=sc.max_context,
                          feat_dim=width)
    draft = FeatDraft(cfg)
    eps = sc.norm_eps
    # Embedding rows pair up by token id; the kept vocabulary's rows are the ones drafting reads most.
    ids = vocab.target_ids.long()
    m_e, r2_e = ridge_fit(rms_normed(new_emb[ids], eps), rms_normed(old_emb[ids], eps) * source.norm_e.weight.float(), ridge)
    m_f, r2_f = ridge_fit(rms_normed(f_new, eps), rms_normed(f_old, eps) * source.norm_f.weight.float(), ridge)
    # The layer's output was trained towards the old target's next feature: map old features to new ones.
    m_o, r2_o = ridge_fit(f_old, f_new, ridge)
    old_fc = source.fc.weight.float()
    d_old = old_fc.shape[1] // 2
    draft.fc.weight.copy_(torch.cat([old_fc[:, :d_old] @ m_e, old_fc[:, d_old:] @ m_f], dim=1))
    draft.blocks.load_state_dict(source.blocks.state_dict())
    assert draft.out is not None
    draft.out.weight.copy_(m_o)
    draft.head.weight.copy_(new_head_rows)
    return draft, {"embedding_r2": round(r2_e, 4), "feature_r2": round(r2_f, 4), "output_r2": round(r2_o, 4)}


def run(cfg: TransferConfig) -> dict[str, object]:
    from dspark_lsp.models.loader import load_causal_lm
    from dspark_lsp.training.feat_train import (
        FeatTrainConfig,
        ensure_corpus_file,
        load_target_tables,
        target_dir,
    )
    from dspark_lsp.training.features import training_sampler

    torch.set_num_threads(cfg.threads)
    src_dir = resolve_draft_dir(cfg.source)
    source, vocab, _ = load_feat_draft(src_dir)
    ensure_corpus_file(FeatTrainConfig(corpus_file=cfg.corpus_file, vocab_from=str(src_dir)))
    new_emb, new_head = load_target_tables(cfg.target, vocab)
    old_emb, _ = load_target_tables(cfg.source_target, vocab)
    new, _ = load_causal_lm(cfg.target, device="cpu", dtype=cfg.dtype, pack="off")
    old, _ = load_causal_lm(cfg.source_target, device="cpu", dtype=cfg.dtype, pack="off")
    manifest = cfg.out.parent / (cfg.out.name + "-samples")  # which other-language files were drawn from
    manifest.mkdir(parents=True, exist_ok=True)
    draw = training_sampler(str(target_dir(cfg.target)), cfg.corpus_file, int(new.config.vocab_size),
                            cfg.extra_share, manifest)
    f_new, f_old = paired_features(new, old, draw, cfg.tokens, cfg.seed)
    draft, fits = transferred(source, vocab, new_emb, old_emb, new_head, f_new, f_old, cfg.ridge)
    meta: dict[str, object] = {"transferred_from": src_dir.name, "source_target": cfg.source_target,
                               "paired_tokens": int(f_new.shape[0]), **fits}
    save_feat_draft(cfg.out, draft, vocab, meta)
    return meta


def main(argv: list[str] | None = None) -> int:
    from dspark_lsp.training.cli import add_config_flags, config_from_args

    p = argparse.ArgumentParser(prog="python -m dspark_lsp.training.transfer",
                                description="Start a feature draft for a target from a trained draft of a smaller one.")
    add_config_flags(p, TransferConfig)  # one flag per config field, as feat_train's
    cfg: TransferConfig = config_from_args(p.parse_args(argv), TransferConfig)
    try:
        print(json.dumps(run(cfg)))
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

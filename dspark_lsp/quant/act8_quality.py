"""What int8 activations (DSPARK_ACT8) cost in output: greedy decoding with int16 and int8 activations on
the bench's own prompts, compared token by token.
`python -m dspark_lsp.quant.act8_quality --model qwen2.5-coder-1.5b --corpus bench/corpus --limit 1`.

The prompts are the bench's (`dspark-lsp bench`: HumanEval holes of --sets when that data is reachable,
holes cut from --corpus, the service's own prompt for each, at the bench's 256-token window). Per prompt:
one prefill (its products do not use the switch, so both paths start from the same cache), then
``--max-new-tokens`` one-token greedy steps under each path (stopping at an end-of-text id), then the
int8 path teacher-forced on the int16 path's tokens, which gives the largest |logit| difference and how
often the two paths' top tokens agree at the same positions. Prints one line per prompt and a summary;
``--json`` keeps the token ids and texts of both paths.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from dspark_lsp.quant.linear import apply_act8


def _bench_args(argv: list[str]) -> argparse.Namespace:
    from dspark_lsp.bench.cli import add_bench_parser
    from dspark_lsp.bench.run import BENCH_PREFIX_SHARE, BENCH_WINDOW

    root = argparse.ArgumentParser(prog="dspark-lsp")
    add_bench_parser(root.add_subparsers(dest="cmd"))
    args = root.parse_args(["bench", *argv])
    args.context_window = BENCH_WINDOW if args.context_window is None else args.context_window
    args.prefix_share = BENCH_PREFIX_SHARE if args.prefix_share is None else args.prefix_share
    return args


def _greedy(model: Any, cache: Any, first: int, start: int, steps: int, stop: set[int]) -> list[int]:
    from dspark_lsp.engine.kv import crop, forward

    out = [first]
    while len(out) < steps and out[-1] not in stop:
        out.append(int(forward(model, [out[-1]], cache)[-1].argmax()))
    crop(cache, start)
    return out


def main(argv: list[str] | None = None) -> int:
    from dspark_lsp.bench.run import _load_service, _prepare_prompts
    from dspark_lsp.engine.kv import crop, forward, new_cache

    p = argparse.ArgumentParser(prog="python -m dspark_lsp.quant.act8_quality", description=__doc__)
    p.add_argument("--json", dest="json_out", default=None, help="write per-prompt tokens and texts here")
    own, rest = p.parse_known_args(argv)
    args = _bench_args(rest)
    if args.threads:
        torch.set_num_threads(args.threads)
    service = _load_service(args)
    prepared = _prepare_prompts(args, service)
    model, tok = service.target, service.tokenizer
    stop = {i for i in (tok.eos_token_id, getattr(tok, "pad_token_id", None)) if i is not None}
    rows: list[dict[str, Any]] = []
    with torch.inference_mode():
        for pp in prepared:
            cache = new_cache(model)
            apply_act8(False)
            last = forward(model, list(pp.ids), cache, keep=1)[-1]  # the prefill: the same for both paths
            start = len(pp.ids)
            first = int(last.argmax())
            paths = {}
            for path in ("int16", "int8"):
                if apply_act8(path == "int8") != (path == "int8"):
                    print("this kernel build has no int8 products", file=sys.stderr)
                    return 1
                paths[path] = _greedy(model, cache, first, start, args.max_new_tokens, stop)
            a, b = paths["int16"], paths["int8"]
            common = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            # teacher-forced on the int16 tokens: both paths' logits at the same positions
            diffs, agree = [], 0
            feed = a[:-1]
            if feed:
                logits = {}
                for path in ("int16", "int8"):
                    apply_act8(path == "int8")
                    logits[path] = torch.cat([forward(model, [t], cache) for t in feed])
                    crop(cache, start)
                d = (logits["int8"] - logits["int16"]).abs().amax(-1)
                diffs = [float(v) for v in d]
                agree = int((logits["int8"].argmax(-1) == logits["int16"].argmax(-1)).sum())
            apply_act8(False)
            row = {"id": pp.prompt.id, "tokens_int16": a, "tokens_int8": b, "identical": a == b,
                   "common_prefix": common, "teacher_forced_steps": len(feed), "top1_agree": agree,
                   "max_abs_logit_diff": max(diffs, default=0.0),
                   "text_int16": tok.decode(a), "text_int8": tok.decode(b)}
            rows.append(row)
            print(f"{pp.prompt.id}: identical {row['identical']}, common prefix {common}/{len(a)}, top-1 agree "
                  f"{agree}/{len(feed)}, max |logit diff| {row['max_abs_logit_diff']:.4f}", flush=True)
    same = sum(r["identical"] for r in rows)
    steps = sum(r["teacher_forced_steps"] for r in rows)
    agree_all = sum(r["top1_agree"] for r in rows)
    worst = max((r["max_abs_logit_diff"] for r in rows), default=0.0)
    print(f"{args.model}: {same}/{len(rows)} prompts identical over {args.max_new_tokens} new tokens; "
          f"teacher-forced top-1 agreement {agree_all}/{steps}; max |logit int8 - int16| {worst:.4f}")
    if own.json_out:
        Path(own.json_out).write_text(json.dumps({"model": args.model, "max_new_tokens": args.max_new_tokens,
                                                  "prompts": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`dspark-lsp bench`: every decoding method side by side on the same prompts, in one run."""

from __future__ import annotations

import argparse

from dspark_lsp.bench.methods import DEFAULT_METHODS


def _add_llamacpp_arguments(p: argparse.ArgumentParser) -> None:
    """The llama.cpp peers' own settings."""
    p.add_argument(
        "--lookup-tokens", type=int, default=10, help="draft length of llamacpp_lookup (as hf_prompt_lookup's)"
    )
    p.add_argument(
        "--llamacpp-spec-bin", default=None, metavar="PATH",
        help="llamacpp_draft's llama.cpp binary, llama-speculative-simple (default: $DSPARK_LLAMACPP_SPEC_BIN)",
    )
    p.add_argument(
        "--llamacpp-draft-max", type=int, default=0, metavar="N",
        help="llamacpp_draft's draft length, --spec-draft-n-max (default 0: the binary's own, 3)",
    )


def add_bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench", help="benchmark DSpark against target-only, Hugging Face and llama.cpp decoding"
    )
    p.add_argument("--model", default="default", help="pair name / target model (default: the default pair)")
    p.add_argument("--draft", default=None, help="draft override: a trained draft name, an HF model, ngram")
    p.add_argument(
        "--assistant", default=None, help="assistant model for hf_assisted_* (default: the pair's draft if HF)"
    )
    p.add_argument("--corpus", default=None, help="directory of source files to cut FIM holes from")
    p.add_argument(
        "--humaneval",
        default="auto",
        help="HumanEval infilling dir (default: ../shared/data/humaneval-infilling if present; 'none' to skip)",
    )
    p.add_argument("--sets", default="single,multi,span", help="HumanEval sets: single,multi,span")
    p.add_argument("--limit", type=int, default=10, help="prompts per source")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument(
        "--context-window", type=int, default=None,
        help="prompt tokens of the current file (the contextWindow setting; default: 256 for the bench's "
        "prompts, the server's own with --lsp)",
    )
    p.add_argument(
        "--prefix-share", type=float, default=None,
        help="share of the prompt budget before the cursor (the prefixShare setting; the rest is the suffix's; "
        "default: 0.75 for the bench's prompts, the server's own with --lsp)",
    )
    p.add_argument(
        "--methods", default=",".join(DEFAULT_METHODS), help="comma-separated method names (dspark_lsp/bench/methods.py); ablations run only when named"
    )
    p.add_argument("--fixed-k", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "gguf", "float32", "bfloat16"],
        help="target weights (auto: as the server; gguf: the GGUF file's quantized blocks, CPU; float32: them "
        "dequantized)",
    )
    p.add_argument(
        "--pack", choices=["auto", "on", "off"], default="auto", help="pre-pack linear layers for the CPU (as the server)"
    )
    p.add_argument(
        "--no-pad", action="store_true", help="never pad target forwards to a cheaper length (the server pads)"
    )
    p.add_argument(
        "--threads", type=int, default=0, help="torch threads (0 = torch default) and llama.cpp threads (0 = 2)"
    )
    _add_llamacpp_arguments(p)
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT", help="write results as JSON")
    p.add_argument("--forward-cost", action="store_true", help="also time target/draft forwards of n tokens")
    p.add_argument("--syntax", action="store_true", help="also report syntax classification cost per step")
    _add_lsp_arguments(p)
    p.add_argument("--cache-dir", default=None)
    p.set_defaults(func=_run)


def _add_lsp_arguments(p: argparse.ArgumentParser) -> None:
    """--lsp: the typing replay through the real server, and its soak."""
    p.add_argument("--lsp", action="store_true", help="replay typing through the real server over stdio")
    p.add_argument("--lsp-file", default=None, help="file typed by the --lsp replay (default: a project source)")
    p.add_argument("--lsp-chars", type=int, default=300, help="characters typed by the --lsp replay")
    p.add_argument(
        "--lsp-documents", type=int, default=0, help="--lsp: first open, complete in and close N other documents"
    )
    p.add_argument("--lsp-no-compare", action="store_true", help="--lsp: only the run with prefix reuse on")
    p.add_argument(
        "--lsp-open", type=int, default=0,
        help="--lsp: open N sibling files of the typed file first and keep them open (its folder is the workspace)",
    )
    p.add_argument(
        "--lsp-context", type=int, default=None, metavar="TOKENS",
        help="--lsp: the contextBudget setting (other files' tokens in the prompt; default: the server's)",
    )
    p.add_argument(
        "--lsp-sources", default=None, metavar="LIST",
        help="--lsp: which context sources are on: open,defs (both), open, defs or none (default: the server's)",
    )
    p.add_argument(
        "--lsp-threads", type=int, default=None, metavar="N",
        help="--lsp: the threads setting (0: follow the other programs' load; default: the server's)",
    )
    p.add_argument(
        "--lsp-quick-ms", type=int, default=None, metavar="MS",
        help="--lsp: the quickAnswerMs setting (0: every answer whole; default: the server's)",
    )
    p.add_argument(
        "--lsp-mid-file", action="store_true",
        help="--lsp: the rest of the file stays after the cursor (the typed passage is cut out first): "
        "editing in the middle of a file rather than at its end",
    )
    p.add_argument(
        "--lsp-fim-order", choices=["psm", "spm"], default=None,
        help="--lsp: the fimOrder setting (default: the server's)",
    )
    p.add_argument(
        "--lsp-first-after", type=float, default=None, metavar="S",
        help="--lsp: S seconds after opening the file (its background warm-up), ask once: the first completion",
    )
    _add_backend_and_soak_arguments(p)


def _add_backend_and_soak_arguments(p: argparse.ArgumentParser) -> None:
    """--lsp through a remote backend, and the --lsp soak."""
    p.add_argument(
        "--backend-url",
        default=None,
        metavar="URL",
        help="--lsp: the server completes through this OpenAI-compatible server (the `backend` setting)",
    )
    p.add_argument("--backend-model", default=None, help="--lsp with --backend-url: the served model name")
    p.add_argument("--backend-timeout-ms", type=int, default=None, help="--lsp with --backend-url: backend.timeoutMs")
    p.add_argument(
        "--lsp-soak-minutes",
        type=float,
        default=0.0,
        metavar="N",
        help="--lsp: a soak instead: N minutes of typing across many documents (opened, edited, closed, "
        "reopened), the server's RSS sampled, p50/p95 per minute (--corpus: the documents)",
    )
    p.add_argument(
        "--lsp-soak-out", default=None, metavar="DIR", help="--lsp soak: write soak.json, soak.txt, soak.png here"
    )
    p.add_argument(
        "--lsp-soak-sample-s", type=float, default=5.0, help="--lsp soak: RSS sampling period in seconds"
    )
    p.add_argument(
        "--lsp-soak-warmup-minutes",
        type=float,
        default=5.0,
        help="--lsp soak: RSS before this is warm-up (at most a quarter of the run)",
    )


def _run(args: argparse.Namespace) -> int:
    if args.lsp and args.lsp_soak_minutes > 0:
        from dspark_lsp.bench.soak import run_soak_cli

        return run_soak_cli(args)
    from dspark_lsp.bench.run import run_bench

    return run_bench(args)

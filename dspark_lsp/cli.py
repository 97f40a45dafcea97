"""`dspark-lsp`: the language server (--stdio / --tcp) and the sub-commands around it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dspark_lsp.errors import UserError
from dspark_lsp.lsp.transport_args import add_transport_arguments, transport_of

if TYPE_CHECKING:
    from dspark_lsp.contract import CompletionResult, CompletionStats
    from dspark_lsp.service import ServiceConfig

PROG = "dspark-lsp"


def _add_complete_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("complete", help="one completion at a position of a file (the server's code path)")
    p.add_argument("file", help="source file")
    p.add_argument("--line", type=int, required=True, help="0-based line (as in LSP)")
    p.add_argument("--col", type=int, required=True, help="0-based column in UTF-16 code units (as in LSP)")
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--model", default="default", help="pair name, model name, local dir or HF id")
    p.add_argument("--draft", default=None, help="draft override: ngram, none, or a draft model")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument(
        "--pack", choices=["auto", "on", "off"], default="auto", help="pre-pack linear layers for the CPU (auto: on CPU)"
    )
    p.add_argument("--multiline", choices=["auto", "always", "never"], default="auto")
    p.add_argument("--context-window", type=int, default=256)
    p.add_argument("--cache-dir", default=None)
    p.add_argument(
        "--backend-url", default=None, metavar="URL", help="complete through this OpenAI-compatible server"
    )
    p.add_argument("--backend-model", default=None, help="with --backend-url: the served model name")
    p.add_argument("--prepare", action="store_true", help="prepare the model first if it is not ready")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_complete)


def cmd_complete(args: argparse.Namespace) -> int:
    from dspark_lsp.textpos import offset_of_utf16, read_text_file

    text = read_text_file(Path(args.file))
    offset = offset_of_utf16(text, args.line, args.col)

    from dspark_lsp.contract import CompletionRequest
    from dspark_lsp.service import CompletionService

    cfg = _complete_config(args)
    if args.prepare:
        _prepare_if_needed(cfg)
    # Progress lines only for a person at a terminal: a script reading stderr gets exactly one line
    # on failure.
    show_progress = not args.json and sys.stderr.isatty()
    service = CompletionService.load(cfg, progress=_progress_to_stderr if show_progress else None)
    if service.notice:
        print(f"{PROG}: note: {service.notice}", file=sys.stderr)
    result = service.complete(CompletionRequest(text=text, offset=offset, path=str(args.file), doc_key=str(args.file)))
    if args.json:
        _print_completion_json(result, service.description)
    else:
        _print_completion_text(result)
    return 0


def _complete_config(args: argparse.Namespace) -> ServiceConfig:
    """The service's config from `complete`'s flags; invalid values are one UserError naming them all."""
    from dspark_lsp.service import ServiceConfig

    cfg = ServiceConfig(
        model=args.model,
        draft_model=args.draft,
        device=args.device,
        dtype=args.dtype,
        pack_weights=args.pack,
        multiline=args.multiline,
        context_window=args.context_window,
        cache_dir=args.cache_dir,
        completion_cache=False,
    )
    if args.max_new_tokens is not None:
        cfg.max_new_tokens = args.max_new_tokens
    if args.backend_url is not None:
        from dspark_lsp.remote.config import RemoteSettings

        cfg.backend = RemoteSettings(url=args.backend_url, model=args.backend_model)
    errs = cfg.problems()
    if errs:
        raise UserError("; ".join(errs))
    return cfg


def _print_completion_json(result: CompletionResult, model: str) -> None:
    """`--json`: one JSON object on one line."""
    print(
        json.dumps(
            {
                "text": result.text,
                "prompt": result.prompt,
                "completion_ids": result.completion_ids,
                "scope": result.scope,
                "stop_reason": result.stop_reason,
                "model": model,
                "stats": result.stats.to_json(),
            },
            ensure_ascii=False,
        )
    )


def _print_completion_text(result: CompletionResult) -> None:
    """The completion on stdout; why it is empty, or what it cost, on stderr."""
    if not result.text:
        print(f"(no completion: scope={result.scope}, stop={result.stop_reason})", file=sys.stderr)
    sys.stdout.write(result.text + ("\n" if result.text and not result.text.endswith("\n") else ""))
    s = result.stats
    if s.backend is not None:
        print(
            f"[{s.tokens if s.tokens is not None else '?'} tokens in {s.seconds or 0.0:.2f} s from {s.backend}, "
            f"first text after {s.first_text_ms} ms]",
            file=sys.stderr,
        )
    elif s.tokens is not None:
        print(
            f"[{s.tokens} tokens in {s.seconds or 0.0:.2f} s ({_rate(s)}), {s.target_forwards} target "
            f"forwards, {s.accepted_per_forward or 0.0:.2f} tokens/forward, draft={s.draft}, "
            f"weights={s.weights or '?'}]",
            file=sys.stderr,
        )


def _rate(stats: CompletionStats) -> str:
    """'12.3 tok/s, decode 25.1 tok/s': end to end, and after the prefill (what the user waits per token)."""
    total = float(stats.seconds or 0.0)
    tokens = int(stats.tokens or 0)
    decode = total - float(stats.t_prefill_ms or 0.0) / 1000
    out = f"{tokens / total:.1f} tok/s" if total > 0 else "- tok/s"
    if decode > 0 and tokens > 1:
        out += f", decode {(tokens - 1) / decode:.1f} tok/s"
    return out


def _progress_to_stderr(message: str, fraction: float | None) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def _prepare_if_needed(cfg: ServiceConfig) -> None:
    from dspark_lsp.models.prepare import prepare_model
    from dspark_lsp.models.registry import KNOWN_MODELS, pair_for

    pair = pair_for(cfg.model, cfg.draft_model)
    for name in (pair.target, pair.draft):
        if name in KNOWN_MODELS:
            prepare_model(name, cache_root=cfg.cache_dir, progress=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="DSpark LSP: code completions over LSP with lossless speculative decoding.",
    )
    add_transport_arguments(
        parser,
        stdio_help="run the language server over stdin/stdout",
        tcp_help="run the language server over TCP",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-file", default=None)
    parser.add_argument("--version", action="store_true")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_complete_parser(sub)
    from dspark_lsp.models.cli import add_models_parser

    add_models_parser(sub)
    try:
        from dspark_lsp.training.cli import add_train_parser
    except ImportError:  # training extras missing: the rest of the CLI still works
        pass
    else:
        add_train_parser(sub)
    from dspark_lsp.bench.cli import add_bench_parser

    add_bench_parser(sub)
    from dspark_lsp.evaluation.cli import add_eval_parser

    add_eval_parser(sub)
    from dspark_lsp.drafts.eagle import add_export_parser

    add_export_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.version:
            from importlib.metadata import version

            print(f"{PROG} {version('dspark-lsp')}")
            return 0
        transport = transport_of(args)
        if transport.chosen:
            if args.command:
                raise UserError("--stdio/--tcp run the server; do not combine them with a sub-command")
            for warning in transport.warnings:
                print(f"{PROG}: warning: {warning}", file=sys.stderr)
            from dspark_lsp.lsp.server import run_server

            return run_server(
                stdio=transport.stdio, tcp=transport.tcp, log_level=args.log_level, log_file=args.log_file
            )
        if not args.command:
            parser.print_help(sys.stderr)
            return 2
        return int(args.func(args))
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. piped into `head`): not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())

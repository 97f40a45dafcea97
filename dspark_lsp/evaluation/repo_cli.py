"""The `eval --repo` options and their command: fetch the set's packages, load the service, run, report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dspark_lsp.errors import UserError

# The set's answers are scored on their first line: single-line completions, and a token cap no line
# of the set comes near (its targets are at most 120 characters).
REPO_MAX_NEW_TOKENS = 48


def add_repo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--repo", default=None, metavar="SET",
        help="the repository-level set instead (a folder with manifest.json and holes-<language>.json, "
        "e.g. bench/repo); --out is then a folder, --limit holes a language",
    )  # fmt: skip
    p.add_argument("--repo-cache", default=None, metavar="DIR", help="where --repo's packages are fetched")
    p.add_argument("--langs", default="python,typescript,go", help="--repo: languages")
    p.add_argument("--variants", default="today,window,+open,+defs,all", help="--repo: prompt variants")


def _check(args: argparse.Namespace) -> None:
    if args.limit < 0:
        raise UserError(f"--limit must be >= 0 (0 = all), got {args.limit}")
    if args.threads < 0:
        raise UserError(f"--threads must be >= 0, got {args.threads}")
    if not (Path(args.repo) / "manifest.json").is_file():
        raise UserError(f"--repo {args.repo}: no manifest.json there")


def _service(args: argparse.Namespace) -> Any:
    from dspark_lsp.service import CompletionService, ServiceConfig

    cfg = ServiceConfig(
        model=args.model, draft_model=args.draft, device="cpu", dtype=args.dtype, pack_weights=args.pack,
        multiline="never", cache_dir=args.cache_dir, completion_cache=False,
        max_new_tokens=args.max_new_tokens or REPO_MAX_NEW_TOKENS,
        context_window=1024, context_budget=256,  # the widest variant: sizes the prefix cache
    )  # fmt: skip
    if args.prefix_share is not None:  # the variants set the window and budget, not how it is split
        cfg.prefix_share = args.prefix_share
    if getattr(args, "fim_order", None) is not None:
        cfg.fim_order = args.fim_order
    errs = cfg.problems()
    if errs:
        raise UserError("; ".join(errs))
    return CompletionService.load(cfg)


def _peer(args: argparse.Namespace, service: Any, log: Any) -> tuple[Any, str | None]:
    if args.llamacpp == "off":
        return None, "--llamacpp off"
    from dspark_lsp.evaluation.repo_peer import RawPromptPeer, gguf_for

    gguf, why = gguf_for(args.model, args.draft, args.cache_dir)
    if gguf is None:
        if args.llamacpp == "on":
            raise UserError(f"--llamacpp on: {why}")
        return None, why
    log(f"llama.cpp on {gguf.name}")
    peer = RawPromptPeer(gguf, service.tokenizer, service.fim, threads=args.threads or 2,
                         max_new_tokens=service.config.max_new_tokens)  # fmt: skip
    return peer, None


def cmd_repo(args: argparse.Namespace) -> int:
    from dspark_lsp.evaluation.repo_fetch import LANGUAGES, default_cache, fetch_all, load_manifest
    from dspark_lsp.evaluation.repo_report import markdown
    from dspark_lsp.evaluation.repo_run import (
        VARIANTS,
        RepoRunConfig,
        interleave,
        load_set,
        log_line,
        parse_list,
        run_set,
        settings_of,
    )

    _check(args)
    log = (lambda m: None) if args.quiet else log_line
    set_dir = Path(args.repo)
    langs = parse_list(args.langs, LANGUAGES, "--langs")
    variants = parse_list(args.variants, list(VARIANTS), "--variants")
    manifest = load_manifest(set_dir / "manifest.json")
    holes = interleave(load_set(set_dir, langs), args.limit)  # checked before any download or load
    cache = Path(args.repo_cache) if args.repo_cache else default_cache()
    fetch_all(manifest, cache, log)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    log(f"{len(holes)} holes x {len(variants)} variants; loading {args.model}")
    service = _service(args)
    peer, why = _peer(args, service, log)
    cfg = RepoRunConfig(variants, peer_after="all" if "all" in variants else variants[-1],
                        out=Path(args.out) if args.out else None)  # fmt: skip
    settings = settings_of(service, args, cfg, why)
    base = service.config
    report = run_set(service, base, manifest, cache, holes, cfg, settings, peer, log)
    if args.json:
        print(json.dumps(report["summary"], ensure_ascii=False))
    else:
        print(markdown(report["summary"], report["methods"]))
    if args.out:
        log(f"wrote {Path(args.out) / 'report.json'}")
    return 0

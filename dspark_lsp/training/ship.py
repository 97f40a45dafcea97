"""Copy a run's exported draft (and its held-out evaluation set) into the package's shipped drafts."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from dspark_lsp.drafts.io import (
    CONFIG,
    FEAT_CONFIG,
    VOCAB,
    WEIGHTS,
    is_feat_draft_dir,
    load_draft_net,
    load_feat_draft,
)
from dspark_lsp.errors import UserError

MAX_BYTES = 60 * 1024 * 1024


def ship(export_dir: Path, dest: Path, eval_files: list[Path]) -> None:
    # Refuse to ship something that does not load. A feature draft (drafts/feature/) has its own config file.
    if is_feat_draft_dir(export_dir):
        load_feat_draft(export_dir)
        names = (WEIGHTS, FEAT_CONFIG, VOCAB)
    else:
        load_draft_net(export_dir)
        names = (WEIGHTS, CONFIG, VOCAB)
    size = (export_dir / WEIGHTS).stat().st_size
    if size > MAX_BYTES:
        raise UserError(f"{export_dir / WEIGHTS} is {size / 2**20:.1f} MiB, over the 60 MiB budget")
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy2(export_dir / name, dest / name)
    if eval_files:
        (dest / "eval").mkdir(exist_ok=True)
        for f in eval_files:
            shutil.copy2(f, dest / "eval" / f.name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dspark_lsp.training.ship")
    ap.add_argument("export_dir", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--eval", type=Path, nargs="*", default=[])
    a = ap.parse_args(argv)
    try:
        ship(a.export_dir, a.dest, a.eval)
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Our trained drafts by name or directory: the token draft (draftnet/, ``draft_config.json``) or the
feature draft (featdraft/, ``feat_config.json``, which reads ``target``'s hidden states). One place
that tells the two apart, for the service and the offline replays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dspark_lsp.draftnet.io import CONFIG, resolve_draft_dir
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.errors import UserError
from dspark_lsp.featdraft.io import is_feat_draft_dir


def trained_draft_dir(spec: str) -> Path | None:
    """The directory of a shipped draft name or a draft directory; None for anything else (an HF id,
    a plain model directory)."""
    try:
        where = resolve_draft_dir(spec)
    except UserError:
        return None
    return where if (where / CONFIG).is_file() or is_feat_draft_dir(where) else None


def load_trained_draft(where: Path, target: Any | None, **use: bool | None) -> DraftSource:
    """Load the draft in ``where`` (see :func:`trained_draft_dir`); a feature draft needs ``target``.
    ``use``: which of a feature draft's parts to use (featdraft.source.FeatureDraftSource)."""
    if is_feat_draft_dir(where):
        from dspark_lsp.featdraft.source import load_feature_draft

        if target is None:
            raise UserError(f"{where.name} is a feature draft: it needs the target it reads")
        return load_feature_draft(where, target, use_block=use.get("use_block"), use_markov=use.get("use_markov"),
                                  use_confidence=use.get("use_confidence"))
    from dspark_lsp.draftnet.source import load_draft

    return load_draft(where)

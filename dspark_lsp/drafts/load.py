"""A draft by name or directory: our token draft (drafts/token, ``draft_config.json``), our feature draft
(drafts/feature, ``feat_config.json``, which reads ``target``'s hidden states), or any Hugging Face causal
LM. One place that tells them apart, for the service, the bench and the offline replays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dspark_lsp.drafts.hybrid import HybridDraftSource
from dspark_lsp.drafts.io import is_feat_draft_dir, trained_draft_dir
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.errors import UserError


def load_trained_draft(where: Path, target: Any | None, **use: bool | None) -> DraftSource:
    """Load the draft in ``where`` (see :func:`~dspark_lsp.drafts.io.trained_draft_dir`); a feature
    draft needs ``target``. ``use``: which of a feature draft's parts to use
    (drafts.feature.source.FeatureDraftSource)."""
    if is_feat_draft_dir(where):
        from dspark_lsp.drafts.feature.source import load_feature_draft

        if target is None:
            raise UserError(f"{where.name} is a feature draft: it needs the target it reads")
        return load_feature_draft(where, target, use_block=use.get("use_block"), use_markov=use.get("use_markov"),
                                  use_confidence=use.get("use_confidence"))
    from dspark_lsp.drafts.token.source import load_draft

    return load_draft(where)


def load_draft_source(spec: str, target: Any, *, device: str = "cpu", dtype: str = "auto",
                      cache_dir: str | None = None, pack: str = "auto") -> DraftSource:
    """A trained DSpark draft (shipped name or a directory with draft_config.json), a feature draft
    (feat_config.json; it reads this target's hidden states), or any HF causal LM (loaded with
    ``device``, ``dtype``, ``cache_dir`` and ``pack``, as the target is).

    Both are wrapped with n-gram lookup (HybridDraftSource): a confident match in the document is a free
    parallel proposal; otherwise a trained draft uses its masked parallel step.
    """
    where = trained_draft_dir(spec)
    if where is not None:
        return HybridDraftSource(load_trained_draft(where, target))
    from dspark_lsp.drafts.causal_lm import ModelDraftSource
    from dspark_lsp.models.loader import load_causal_lm

    model, _tok = load_causal_lm(spec, device=device, dtype=dtype, cache_root=cache_dir, pack=pack)
    return HybridDraftSource(ModelDraftSource(model, int(target.config.vocab_size), name=spec))

"""The draft a pair names, loaded beside its target, or n-gram lookup when that draft is not prepared."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dspark_lsp.completion import Progress, ServiceConfig
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.errors import ModelNotPrepared

if TYPE_CHECKING:
    from dspark_lsp.models.registry import PairSpec

# Under the service's name: a missing draft is a fact of the service's load (log filters use that name).
log = logging.getLogger("dspark_lsp.service")


def load_draft(pair: PairSpec, target: Any, config: ServiceConfig,
               progress: Progress | None) -> tuple[DraftSource | None, str]:
    """The pair's draft source and the service's description. A draft *model* that is known but not
    prepared (the 1.5B's 0.5B draft, say) is not a reason to give no completions: the target is there,
    so the service drafts by n-gram lookup meanwhile and says once which command fixes it."""
    if pair.draft_kind == "none":
        return None, f"{pair.target} + none"
    from dspark_lsp.drafts.registry import DraftSpec, LoadOptions, build_draft, spec_for

    if pair.draft_kind == "ngram" or pair.draft is None:
        return build_draft(DraftSpec("ngram")), f"{pair.target} + ngram"
    if progress:
        progress(f"loading draft {pair.draft}", 0.6)
    load = LoadOptions(config.device, config.dtype, config.cache_dir, config.pack_weights)
    try:
        draft = build_draft(spec_for(pair.draft, load=load), target)
    except ModelNotPrepared as exc:
        log.warning("draft %s unavailable (%s); drafting by n-gram lookup until it is prepared",
                    pair.draft, exc)
        if progress:
            progress(f"draft {pair.draft} not prepared: n-gram drafting (dspark-lsp models prepare {pair.draft})",
                     0.7)
        return build_draft(DraftSpec("ngram")), f"{pair.target} + ngram ({pair.draft} not prepared)"
    return draft, f"{pair.target} + {pair.draft}"

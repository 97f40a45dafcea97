"""Every kind of draft source, in one table, and the one function that builds a draft from a spec.

The kinds (:data:`DRAFT_KINDS`):

* ``ngram``: prompt lookup (drafts.ngram), no model;
* ``trained``: our token draft (drafts/token, ``draft_config.json``) or feature draft (drafts/feature,
  ``feat_config.json``, which reads the target's hidden states), by shipped name or directory;
* ``causal_lm``: any Hugging Face causal LM that shares the target's tokenizer (drafts.causal_lm).

A model kind may have n-gram lookup in front of it (:class:`LookupSpec`): the hybrid
(drafts.hybrid.HybridDraftSource), what the service and the server draft with. The service, the bench
and the offline replays all build their drafts here, through :func:`build_draft`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspark_lsp.drafts.hybrid import HybridDraftSource
from dspark_lsp.drafts.io import is_feat_draft_dir, trained_draft_dir
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.errors import UserError


@dataclass(frozen=True)
class LookupSpec:
    """n-gram lookup: the sizes of the n-grams it matches and, in front of a model draft, the first-token
    confidence its proposal needs to answer (0.55: a 1-token match, i.e. any) and whether the model
    also gives its first-position choices as alternates (HybridDraftSource's second opinion)."""

    max_ngram: int = 4
    min_ngram: int = 1
    min_confidence: float = 0.55
    second_opinion: bool = False

    def source(self) -> NgramDraftSource:
        return NgramDraftSource(max_ngram=self.max_ngram, min_ngram=self.min_ngram)


@dataclass(frozen=True)
class LoadOptions:
    """How a ``causal_lm`` draft is loaded: as the target is (models.loader.load_causal_lm)."""

    device: str = "cpu"
    dtype: str = "auto"
    cache_dir: str | None = None
    pack: str = "auto"


@dataclass(frozen=True)
class DraftSpec:
    """A draft to build: its ``kind`` (a key of :data:`DRAFT_KINDS`), what the kind loads (``name``: a
    shipped draft name, a directory or a model id; unused by ``ngram``), the lookup in front of a model
    kind (None: the model alone; for ``ngram`` it sets the lookup's own n-gram sizes), which parts of a
    feature draft to use (``use_block`` / ``use_markov`` / ``use_confidence``; None: as exported) and how a
    causal LM is loaded."""

    kind: str
    name: str = ""
    lookup: LookupSpec | None = None
    use: dict[str, bool | None] = field(default_factory=dict)
    load: LoadOptions = LoadOptions()


@dataclass(frozen=True)
class DraftKind:
    """One row of the table: the kind's name, what it is, how it is built (before any lookup goes in
    front) and whether it is a draft model (n-gram lookup may go in front of one)."""

    name: str
    what: str
    build: Callable[[DraftSpec, Any], DraftSource]
    model: bool


def _build_ngram(spec: DraftSpec, _target: Any) -> DraftSource:
    return (spec.lookup or LookupSpec()).source()


def _build_trained(spec: DraftSpec, target: Any) -> DraftSource:
    where = trained_draft_dir(spec.name)
    if where is None:
        raise UserError(f"no trained draft {spec.name!r} (a shipped name or a draft directory)")
    return load_trained_draft(where, target, **spec.use)


def _build_causal_lm(spec: DraftSpec, target: Any) -> DraftSource:
    from dspark_lsp.drafts.causal_lm import ModelDraftSource
    from dspark_lsp.models.loader import load_causal_lm

    o = spec.load
    model, _tok = load_causal_lm(spec.name, device=o.device, dtype=o.dtype, cache_root=o.cache_dir, pack=o.pack)
    return ModelDraftSource(model, int(target.config.vocab_size), name=spec.name)


DRAFT_KINDS: dict[str, DraftKind] = {
    k.name: k
    for k in (
        DraftKind("ngram", "prompt lookup in the context and the request's corpus; no model", _build_ngram, False),
        DraftKind("trained", "our token or feature draft (shipped name or directory)", _build_trained, True),
        DraftKind("causal_lm", "a Hugging Face causal LM with the target's tokenizer", _build_causal_lm, True),
    )
}


def build_draft(spec: DraftSpec, target: Any = None) -> DraftSource:
    """The draft ``spec`` describes, for ``target`` (which a feature draft reads and a causal LM's vocab
    size comes from): the kind's source, behind n-gram lookup when ``spec.lookup`` says so."""
    kind = DRAFT_KINDS.get(spec.kind)
    if kind is None:
        raise UserError(f"unknown draft kind {spec.kind!r}; known: {', '.join(DRAFT_KINDS)}")
    src = kind.build(spec, target)
    if kind.model and spec.lookup is not None:
        return with_lookup(src, spec.lookup)
    return src


def with_lookup(src: DraftSource, lookup: LookupSpec) -> HybridDraftSource:
    """``src`` behind n-gram lookup (for a replay that built the model draft itself)."""
    return HybridDraftSource(src, lookup.source(), min_lookup_confidence=lookup.min_confidence,
                             second_opinion=lookup.second_opinion)


def model_of(src: DraftSource | None) -> DraftSource | None:
    """The draft model ``src`` drafts with: a chain's (a hybrid's) first link that is not a lookup, ``src``
    itself when it is no lookup; None for a lookup alone and for no draft."""
    from dspark_lsp.drafts.chain import DraftChain

    if src is None or isinstance(src, NgramDraftSource):
        return None
    if isinstance(src, DraftChain):
        return next((link.source for link in src.links if not isinstance(link.source, NgramDraftSource)), None)
    return src


def spec_for(name: str, lookup: LookupSpec | None = LookupSpec(), load: LoadOptions = LoadOptions()) -> DraftSpec:
    """The spec of a draft by name: ``ngram``, a trained draft (a shipped name or a directory with
    draft_config.json / feat_config.json) or else a causal LM (a registry name, directory or HF id);
    a model behind ``lookup``."""
    if name == "ngram":
        return DraftSpec("ngram")
    kind = "trained" if trained_draft_dir(name) is not None else "causal_lm"
    return DraftSpec(kind, name, lookup=lookup, load=load)


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
    return build_draft(spec_for(spec, load=LoadOptions(device, dtype, cache_dir, pack)), target)

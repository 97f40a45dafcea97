"""The interface every draft source implements (draft model, n-gram lookup, masked parallel drafter).

A draft source is handed the *whole* context (prompt + tokens accepted so far) on every call. It keeps
whatever state it likes (a KV cache, an n-gram index) and re-synchronises it itself by comparing the new
context with what it saw last (longest common prefix, then crop / extend). That keeps rollback out of the
decode loop: after a rejection the loop simply passes a shorter context next time.

Besides its context a draft may be told two things, both declared on :class:`DraftSource` with defaults
that ignore them: the target's features (``set_features``, for a draft that says ``wants_features``)
and a per-request corpus (``set_corpus``, for one that drafts with n-gram lookup). A source states them
by subclassing the protocol, so no caller has to probe it for what it reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

NO_SLOT = -1  # a confidence no calibration slot stated (n-gram lookup, an uncalibrated draft)


@dataclass
class Proposal:
    """Tokens proposed by one draft call.

    ``tokens[i]`` is a target-vocabulary id. ``confidence[i]`` is the draft's probability of that token
    (its top probability under greedy drafting), or, for a source that says it is ``calibrated`` (a
    confidence head), its predicted probability that the target accepts the token given that every
    earlier one was; the scheduler stops early when it drops below tau or stops paying.
    ``dists[i]`` (optional) is the full draft distribution q over the *target* vocabulary that
    ``tokens[i]`` was sampled from; it is required only for speculative sampling (temperature > 0).
    ``forwards`` counts draft-model forward passes spent (0 for n-gram lookup).
    ``alternates[i]`` (optional, greedy drafting only): the draft's runner-up tokens at position i with
    their draft probabilities, best first; the decoder may verify them beside the chain
    (engine.alternates). A source without them (n-gram lookup) leaves the list short or None.
    ``slots[i]`` (optional): for a calibrated source, which of its calibration slots stated
    ``confidence[i]`` (a confidence head's drafting kind and step, :data:`NO_SLOT` where none); the decoder
    records it beside each judged token so a recalibration can fit each slot on its own.
    ``sources[i]`` (optional): the name of the source that proposed ``tokens[i]`` when a draft combines
    several (a chain of sources); the decoder counts proposed and accepted tokens per source, a token
    without one counted under the draft's own name.
    """

    tokens: list[int] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)
    dists: list[torch.Tensor | None] | None = None
    forwards: int = 0
    alternates: list[list[tuple[int, float]]] | None = None
    slots: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def empty(cls, temperature: float) -> Proposal:
        """A proposal to append tokens to: with distributions when sampling, with alternates when greedy."""
        return cls(dists=[] if temperature > 0 else None, alternates=None if temperature > 0 else [])

    def add(self, token: int, confidence: float, dist: torch.Tensor | None,
            runner_ups: Callable[[], list[tuple[int, float]]], slot: int = NO_SLOT, source: str = "") -> None:
        """Append one drafted token with its confidence, its distribution (kept when the proposal keeps
        them: when sampling) and its runner-ups (asked for only when it keeps alternates: when greedy);
        ``source``: the source that proposed it ("" = the draft itself)."""
        self.tokens.append(token)
        self.confidence.append(confidence)
        self.slots.append(slot)
        self.sources.append(source)
        if self.dists is not None:
            self.dists.append(dist)
        if self.alternates is not None:
            self.alternates.append(runner_ups())


@dataclass(frozen=True)
class RecentOutputs:
    """What the target generated for the same document's last requests, and where this request stands.

    Each of ``outputs`` (oldest first) is the last tokens of its prompt *before the cursor* followed by
    every token the target generated there. ``anchor`` is this request's own last tokens before the cursor
    and ``start`` the context position where its generated tokens begin (the prompt's length). A lookup
    matches ``anchor + generated`` against the outputs: in a FIM prompt the tokens right before the
    generated ones are the suffix and its markers, not the text the generation continues."""

    outputs: tuple[tuple[int, ...], ...]
    anchor: tuple[int, ...]
    start: int

    def tail(self, context: list[int]) -> list[int]:
        """The text-order tokens that end at the context's end: the anchor, then what was generated."""
        if len(context) < self.start:
            return []
        return [*self.anchor, *context[self.start :]]


@runtime_checkable
class DraftSource(Protocol):
    """Proposes up to ``max_tokens`` continuation tokens for ``context``.

    ``parallel=False``: one autoregressive step (a single token) unless the caller asks for more, in which
    case the source may loop. ``parallel=True``: propose several tokens at once (mask tokens / n-gram).
    ``tau`` lets the source stop early when its own confidence falls below it.
    ``temperature > 0`` asks for sampled tokens and ``dists``; ``generator`` makes sampling reproducible.

    What else a draft may be told (the defaults ignore both; a source that subclasses the protocol
    inherits them):

    * ``wants_features``: the draft reads the target's last hidden states, so the decoder computes them
      and calls ``set_features`` before each draft call;
    * ``set_corpus``: the tokens a request's n-gram lookup may search besides the context (the document
      outside the prompt window), set once per request;
    * ``set_recent``: the target's own outputs for the same document's last requests, which a lookup
      searches before the context;
    * ``calibrated``: the draft's confidences are acceptance probabilities (a confidence head), which
      changes how the decoder ends a round.
    """

    name: str
    supports_parallel: bool
    wants_features: bool = False
    calibrated: bool = False

    def propose(
        self,
        context: list[int],
        max_tokens: int,
        *,
        parallel: bool,
        tau: float,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Proposal: ...

    def reset(self) -> None:
        """Forget all cached state (called between unrelated calls when memory must be freed)."""
        ...

    def set_features(self, start: int, feats: torch.Tensor) -> None:
        """The target's features: row i is its last hidden state at context position ``start + i``
        (called before each draft call when ``wants_features``)."""
        return None

    def set_corpus(self, corpus: Callable[[], list[int]]) -> None:
        """A per-request corpus for n-gram lookup; a source calls ``corpus()`` only if it searches one."""
        return None

    def set_recent(self, recent: RecentOutputs | None) -> None:
        """The target's own recent outputs for the request's document, for a source that drafts by lookup:
        what the target said a few keystrokes ago is the best guess of what it says now (None: none)."""
        return None

    def prefill(self, context: list[int], cancel: threading.Event | None = None) -> int:
        """Bring the source's own state up to ``context`` ahead of a request (a background warm-up), so
        the request's first draft call feeds only what came after it; stop early when ``cancel`` is set.
        The tokens it fed; a source without a cache of its own has nothing to do (0)."""
        return 0


# Runner-ups a draft reports per position: on held-out code the feature draft's 2nd choice was the
# target's token 11.5% of the time and its 3rd 4.8% (top-1 46.2%); a 4th adds 3%, rarely worth a slot.
RUNNER_UPS = 2


def runner_ups(probs: torch.Tensor, n: int = RUNNER_UPS) -> list[tuple[int, float]]:
    """The ``n`` most probable ids after the top one, with their probabilities (``probs`` over ids)."""
    top = torch.topk(probs.float(), min(n + 1, int(probs.shape[-1])))
    return [(int(i), float(p)) for p, i in zip(top.values[1:].tolist(), top.indices[1:].tolist(), strict=True)]


def window_start(length: int, max_context: int) -> int:
    """Where a draft with a ``max_context`` window starts reading a ``length``-token context: 0 while it
    fits, then moving in jumps of half a window, so consecutive calls mostly share the window (and the
    draft's KV cache) instead of re-reading it on every token."""
    if length <= max_context:
        return 0
    half = max(1, max_context // 2)
    return ((length - max_context) // half + 1) * half

"""The DSpark decode loop: draft, verify in one target forward, accept the longest matching prefix.

A call is a prefill (which yields the first token), then rounds until an emit rule ends it. A round is
draft (engine.drafting) -> layout (chain plus runner-up alternates) -> verify (one target forward) ->
accept (engine.acceptance, a pure rule) -> rollback (crop the cache to what was kept) -> emit (EOS,
token cap, stop rule). The parts share one small mutable ``_State``; the call's inputs are a ``_Call``.

State invariant (as in gpt-fast's speculative decode): the target KV cache covers every token of
``ids`` except the last one, ``pending``. A round feeds ``[pending] + draft`` (n + 1 tokens) in ONE
forward; logits row i predicts the token after input i. Draft token d_i is checked against row i-1's
prediction. After accepting m tokens the target's own token at row m (a correction, or a bonus when
m == n) becomes the new ``pending`` and the cache is cropped to cover ``ids`` up to d_m.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import torch

from dspark_lsp.engine.acceptance import Verdict, greedy_accept, pick_token, sampled_accept, tree_accept
from dspark_lsp.engine.alternates import Alternate, VerifyLayout, choose_alternates
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.draft import NO_SLOT, DraftSource, Proposal
from dspark_lsp.engine.drafting import DraftMeter, DraftRound, KeyFn
from dspark_lsp.engine.healing import Heal
from dspark_lsp.engine.interrupt import ForwardInterrupted, interruptible
from dspark_lsp.engine.kv import (
    TreeRows,
    cache_len,
    crop,
    crop_layers,
    forward,
    forward_hidden,
    model_dtype,
    move_entry,
    new_cache,
)
from dspark_lsp.engine.prefix_cache import Features, PrefixCache
from dspark_lsp.engine.resume import PartialSlice, capture
from dspark_lsp.engine.scheduler import ConfidenceScheduler
from dspark_lsp.engine.stats import DecodeStats

# Prefill in slices: bounded attention memory, and a cancelled request stops between slices instead of
# holding the worker for a whole multi-second prefill. 256 tokens (~1.3 s of fp32 0.5B on 2 cores) by
# default rather than 128: a 256-token prompt took 1.51 s in two slices, 1.32 s in one. A call may ask
# for smaller slices (DecodeConfig.prefill_chunk: a background prefill that must yield quickly).
PREFILL_CHUNK = 256

StopFn = Callable[[list[int]], bool]  # generated ids so far -> must generation end now?
TokensFn = Callable[[list[int]], None]  # streaming callback with all generated ids so far


class _FeatureTrack:
    """The target's last hidden states for positions ``start`` .. of the sequence, grown as the target
    runs (for a draft that reads them). Positions before ``start`` came from a reused cache without
    stored features; the draft simply sees less context."""

    def __init__(self, start: int, stored: Features | None) -> None:
        self.start = start
        self.rows: torch.Tensor | None = None
        if stored is not None and stored[0] + int(stored[1].shape[0]) == start:
            self.start, self.rows = stored

    def add(self, h: torch.Tensor) -> None:
        self.rows = h if self.rows is None else torch.cat([self.rows, h])

    def upto(self, end: int) -> Features | None:
        """(start, rows) for positions before ``end``, or None when there are none."""
        if self.rows is None or end <= self.start:
            return None
        return self.start, self.rows[: end - self.start]


@dataclass
class DecodeResult:
    tokens: list[int]
    stats: DecodeStats
    scheduler_state: tuple[float, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stop_reason(self) -> str:
        return self.stats.stop_reason


@dataclass
class _Call:
    """One generate call's inputs, fixed while it runs."""

    prompt: list[int]
    config: DecodeConfig
    draft: DraftSource | None
    eos_ids: set[int]
    is_key: KeyFn | None
    stop: StopFn | None
    on_tokens: TokensFn | None
    cancel: threading.Event | None
    heal: Heal | None = None

    def __post_init__(self) -> None:
        # A feature-conditioned draft reads the target's last hidden states; a calibrated one's
        # confidences are acceptance probabilities, which change how a round's length is chosen.
        self.want_feats = self.draft is not None and self.draft.wants_features
        self.calibrated = self.draft is not None and self.draft.calibrated

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


@dataclass
class _State:
    """What a call changes as it runs. Once the first token is out, ``cache`` covers ``ids[:-1]``."""

    stats: DecodeStats
    sched: ConfidenceScheduler
    generator: torch.Generator | None  # None under greedy decoding
    cache: Any
    feats: _FeatureTrack
    ids: list[int]  # prompt + generated
    generated: list[int] = field(default_factory=list)
    stop_reason: str | None = None  # set by whatever ends the call; None at the token cap
    heal_rest: bytes = b""  # bytes the next tokens must still spell out (engine.healing)


class SpeculativeDecoder:
    """Runs one target model; draft sources are passed per call. Thread-compatible, not re-entrant."""

    def __init__(self, target: Any, *, vocab_size: int | None = None, prefix_cache: PrefixCache | None = None):
        self.target = target
        # Qwen pads its embedding matrix past the tokenizer; drafts and sampling work on this many ids.
        self.vocab_size = int(vocab_size or target.config.vocab_size)
        self.prefix_cache = prefix_cache
        self._lock = threading.Lock()
        # What drafting costs, per draft source name (ms per forward, forwards per round and per token;
        # smoothed, kept across calls): the cost-aware k and stop rule weigh it against the verify cost.
        self._draft_meter = DraftMeter()
        # The last prefill slice a request stopped half-way, kept for a prompt that starts the same way.
        self._partial: PartialSlice | None = None

    def drop_partial(self) -> None:
        """Forget the stopped slice kept for resuming (its copies of keys, values and hidden states)."""
        self._partial = None

    # -------------------------------------------------------------------- target forwards, verify layout
    def _forward(
        self,
        tokens: list[int],
        cache: Any,
        pad_to: dict[int, int] | None,
        hidden: bool = False,
        layout: VerifyLayout | None = None,
        last_only: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Target logits (and, if asked, last hidden states) for ``tokens`` on ``cache``, run padded
        where the plan says that is cheaper. ``layout``: the rows are a chain plus alternates, which
        need their own position ids and attention mask. ``last_only``: only the last real token's
        logits are wanted (a prefill), so the LM head runs for that row alone."""
        n = len(tokens)
        m = pad_to.get(n, n) if pad_to else n
        feed = tokens + [tokens[-1]] * (m - n) if m > n else tokens
        tree = None
        if layout is not None and layout.alternates:
            base = cache_len(cache)
            tree = TreeRows(layout.positions(base, m), layout.attention_mask(base, m, model_dtype(self.target)))
        # Rows kept: the last real one and the padding after it (0 = all rows).
        keep = m - n + 1 if last_only else 0
        if hidden:
            logits, h = forward_hidden(self.target, feed, cache, tree, keep)
        else:
            logits, h = forward(self.target, feed, cache, tree, keep), None
        if m > n:
            # Causal attention: the real tokens never see the padding; its cache entries go right away.
            crop(cache, cache_len(cache) - (m - n))
            logits = logits[: logits.shape[0] - (m - n)]
            h = None if h is None else h[:n]
        return logits, h

    def _layout(self, proposal: Proposal, config: DecodeConfig, sched: ConfidenceScheduler) -> VerifyLayout:
        """The chain plus the runner-ups worth a verify slot (greedy only: under sampling, or relaxed
        acceptance, a token off the chain would need a different acceptance rule)."""
        layout = VerifyLayout(list(proposal.tokens))
        if config.alternates <= 0 or config.temperature > 0 or config.relaxed or not proposal.alternates:
            return layout
        candidates: list[Alternate] = []
        reach = 1.0  # the draft's probability that the chain up to this position holds
        expected = 1.0  # tokens this round is expected to yield without alternates (the draft's view)
        for i, tok in enumerate(proposal.tokens):
            alts = proposal.alternates[i] if i < len(proposal.alternates) else []
            candidates += [Alternate(i, t, reach * q) for t, q in alts if t != tok and t < self.vocab_size]
            reach *= proposal.confidence[i] if i < len(proposal.confidence) else 1.0
            expected += reach
        if not candidates:
            return layout
        width = layout.width
        free = (config.pad_to.get(width, width) - width) if config.pad_to else 0
        # A paid slot must raise tokens per unit of verify time: its chance of adding a token, over the
        # tokens the round yields anyway, must beat what it adds to the forward's cost.
        prices = [sched.slot_price(w) for w in range(width + free, width + config.alternates)]
        layout.alternates = choose_alternates(candidates, free, [p * expected for p in prices if p is not None],
                                              config.alternates)
        return layout

    # -------------------------------------------------------------------------------------- the loop
    @torch.inference_mode()
    def generate(
        self,
        prompt: list[int],
        *,
        config: DecodeConfig | None = None,
        draft: DraftSource | None = None,
        eos_ids: Collection[int] = (),
        is_key: KeyFn | None = None,
        stop: StopFn | None = None,
        on_tokens: TokensFn | None = None,
        cancel: threading.Event | None = None,
        scheduler_state: tuple[float, ...] | None = None,
        heal: Heal | None = None,
    ) -> DecodeResult:
        """Decode after ``prompt``. ``heal``: the first tokens must spell out its bytes (the prompt's
        backed-off end, engine.healing); they are picked by the target alone, then speculation starts."""
        if not prompt:
            raise ValueError("prompt must contain at least one token")
        config = config or DecodeConfig()
        config.validate()
        with self._lock:
            return self._generate(
                _Call(list(prompt), config, draft, set(eos_ids), is_key, stop, on_tokens, cancel, heal),
                scheduler_state,
            )


    def _generate(self, call: _Call, scheduler_state: tuple[float, ...] | None) -> DecodeResult:
        t0 = time.perf_counter()
        prompt, config, draft, cancel = call.prompt, call.config, call.draft, call.cancel
        state = self._start(call, scheduler_state)
        last_logits = self._prefill(call, state)
        if last_logits is not None and draft is not None and config.max_new_tokens > 0:
            # A draft model's own cache catches up with the prompt here, in the prefill (a no-op after a
            # warm-up did it): left to the first draft call, a prompt's prefill was timed as one draft
            # forward, which inflated the draft's measured price per forward and so shortened its drafts.
            draft.prefill(prompt, cancel)
        state.stats.t_prefill = time.perf_counter() - t0
        if last_logits is None or call.cancelled():
            state.stop_reason = "cancelled"
        elif config.max_new_tokens > 0:
            # The prefill's own prediction is the first new token; from here on the cache covers ids[:-1].
            self._emit(call, state, [self._pick(call, state, last_logits)])
        while state.stop_reason is None and state.heal_rest and len(state.generated) < config.max_new_tokens:
            if call.cancelled():
                state.stop_reason = "cancelled"
            else:
                self._heal_step(call, state)
        while state.stop_reason is None and len(state.generated) < config.max_new_tokens:
            if call.cancelled():
                state.stop_reason = "cancelled"
            else:
                self._round(call, state)
        return self._finish(call, state, t0)

    def _start(self, call: _Call, scheduler_state: tuple[float, ...] | None) -> _State:
        """A fresh state: the scheduler (seeded from the last call's when given), the sampling generator,
        and a target cache, reusing the prefix cache's longest stored prefix of the prompt."""
        stats = DecodeStats(prompt_tokens=len(call.prompt))
        sched = ConfidenceScheduler(call.config.scheduler or SchedulerConfig())
        if scheduler_state is not None:
            sched.restore(scheduler_state)
        generator: torch.Generator | None = None
        if call.config.temperature > 0:
            generator = torch.Generator()
            seed = call.config.seed
            generator.manual_seed(seed if seed is not None else int(time.time_ns() % 2**31))
        # At least the last prompt token is always fed, to get its logits: reuse covers prompt[:-1] at most.
        # A reused prefix brings its feature rows when the prefix cache stored them.
        cache, reused, stored = (None, 0, None)
        if self.prefix_cache is not None and len(call.prompt) > 1:
            cache, reused, stored = self.prefix_cache.take_with_features(
                call.prompt[:-1], keep_others=call.config.keep_others)
        if cache is None:
            cache, reused = new_cache(self.target), 0
        stats.reused_tokens = reused
        stats.prefill_tokens = len(call.prompt) - reused
        feats = _FeatureTrack(reused, stored if call.want_feats else None)
        heal_rest = call.heal.rest if call.heal is not None else b""
        return _State(stats, sched, generator, cache, feats, list(call.prompt), heal_rest=heal_rest)

    def _prefill(self, call: _Call, state: _State) -> torch.Tensor | None:
        """Feed the prompt past the reused prefix in slices (as ``model.generate`` prefills, so greedy
        output matches it bit for bit); the last slice's last row of logits, or None if cancelled first."""
        prompt = call.prompt
        last_logits: torch.Tensor | None = None
        step = call.config.prefill_chunk or PREFILL_CHUNK
        pos = state.stats.reused_tokens
        while pos < len(prompt):
            # Every slice, the last too: a prompt within one slice (the default 256-token window) was
            # prefilled in full even when cancelled before it started (seconds of a busy worker).
            if call.cancelled():
                break
            resumed = self._resumable(call, state, pos, step)  # rows of a stopped slice to finish (resume.py)
            n = resumed or min(step, len(prompt) - pos)
            try:
                with interruptible(call.cancel):  # a slice stops between layers once cancelled (interrupt.py)
                    if resumed:
                        chunk_logits, h = self._resume(call, state, resumed)
                    else:
                        chunk_logits, h = self._forward(prompt[pos : pos + n], state.cache, call.config.pad_to,
                                                        call.want_feats, last_only=True)
            except ForwardInterrupted as stop:
                # Keep the layers that ran for a prompt that starts the same way, then give the cache back
                # what the earlier slices prefilled.
                self._partial = capture(state.cache, stop, prompt[: pos + n], pos)
                crop_layers(state.cache, pos)
                break
            pos += n
            last_logits = chunk_logits[-1]
            if h is not None:
                state.feats.add(h)
        # The prefill produces the first token, so it counts once (however many slices it took):
        # target-only decoding then shows exactly 1.0 tokens per target forward.
        if last_logits is not None:
            state.stats.target_forwards += 1
        return last_logits

    def _resumable(self, call: _Call, state: _State, pos: int, step: int) -> int:
        """How many rows of the last stopped slice the prefill at ``pos`` can finish instead of feeding
        them afresh (0: none, or a target whose forward cannot resume)."""
        if self._partial is None or getattr(self.target, "dspark_lean", None) is None:
            return 0
        return self._partial.rows_for(call.prompt, pos, step, state.cache)

    def _resume(self, call: _Call, state: _State, rows: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Finish the stopped slice's first ``rows`` rows: put back what its finished layers wrote, run the
        rest; (last row's logits, normed hidden states when the draft reads them), as :meth:`_forward`."""
        partial, self._partial = self._partial, None
        assert partial is not None
        hidden = partial.restore(state.cache, rows)
        logits, h = self.target.dspark_lean.resume(hidden, partial.layer, state.cache, keep=1)
        state.stats.resumed_tokens += rows
        return logits[0].float(), h[0].float() if call.want_feats else None

    def _pick(self, call: _Call, state: _State, logits: torch.Tensor) -> int:
        """The target's next token from one row of logits; while healing, only among the tokens that
        agree with the bytes left to spell."""
        heal = call.heal if state.heal_rest else None
        if heal is not None:
            logits = heal.table.restrict(logits, state.heal_rest)
        tok = pick_token(logits, call.config.temperature, self.vocab_size, state.generator)
        if heal is not None:
            state.heal_rest = heal.table.advance(state.heal_rest, tok)
        return tok

    def _heal_step(self, call: _Call, state: _State) -> None:
        """One target-only token while the healed bytes are not all spelled out: the first token was a
        proper prefix of them (three spaces of a four-space indent). Rare, and never drafted: a draft
        knows nothing of the constraint."""
        logits, h = self._forward([state.ids[-1]], state.cache, call.config.pad_to, call.want_feats)
        state.stats.target_forwards += 1
        if h is not None:
            state.feats.add(h)
        self._emit(call, state, [self._pick(call, state, logits[-1])])

    # ------------------------------------------------------------------------------------ one round
    def _round(self, call: _Call, state: _State) -> None:
        """Draft, verify in one target forward, accept, roll back, emit: at least one new token."""
        proposal = self._propose(call, state)
        tv = time.perf_counter()
        layout, verdict = self._verify(call, state, proposal)
        state.stats.t_verify += time.perf_counter() - tv
        kept = self._record(state, proposal, layout, verdict)
        self._emit(call, state, kept + [verdict.next_token])

    def _propose(self, call: _Call, state: _State) -> Proposal:
        """The round's draft, or an empty one (no draft, no room before the cap, or not worth it)."""
        draft, sched = call.draft, state.sched
        room = call.config.max_new_tokens - len(state.generated) - 1  # the target adds one token per round
        if draft is None or room <= 0:
            return Proposal()
        # The measured price of this source's draft: a draft forward that is not free shortens k.
        sched.set_draft_cost(self._draft_meter.cost(draft, call.config.draft_mode))
        k = sched.next_k()
        if call.calibrated:
            # The draft's confidences are calibrated acceptance probabilities: let the per-token cost
            # rule in DraftRound end the draft instead of a length guessed from past rounds.
            k = max(k, sched.config.k_max)
        k = min(k, room)
        if k <= 0:
            return Proposal()
        if call.want_feats and state.feats.rows is not None:
            draft.set_features(state.feats.start, state.feats.rows)
        td = time.perf_counter()
        rnd = DraftRound(draft, sched, call.config, call.is_key, state.stats, self._draft_meter, state.generator)
        proposal = rnd.run(state.ids, state.generated, k)
        state.stats.t_draft += time.perf_counter() - td
        # (A calibrated draft's own probabilities already priced every token it kept.)
        if not call.calibrated and not sched.worth(len(proposal.tokens)):
            return Proposal()  # cut short by tau to a length whose verify costs more than it can save
        return proposal

    def _verify(self, call: _Call, state: _State, proposal: Proposal) -> tuple[VerifyLayout, Verdict]:
        """Score ``[pending] + layout`` in ONE target forward, judge the draft, roll the cache back."""
        base = cache_len(state.cache)
        layout = self._layout(proposal, call.config, state.sched)
        logits, h = self._forward(
            [state.ids[-1]] + layout.tokens, state.cache, call.config.pad_to, call.want_feats, layout
        )
        state.stats.target_forwards += 1
        verdict = self._accept(logits, proposal, layout, call.config, state.generator)
        self._rollback(state, base, verdict, h)
        return layout, verdict

    def _accept(
        self,
        logits: torch.Tensor,
        proposal: Proposal,
        layout: VerifyLayout,
        config: DecodeConfig,
        generator: torch.Generator | None,
    ) -> Verdict:
        """The acceptance rule for this round: sampled, tree (alternates are laid out under greedy,
        lossless decoding only) or greedy (with the opt-in relaxed threshold)."""
        if config.temperature > 0:
            m, nxt = self._accept_sampled(logits, proposal.tokens, proposal.dists or [], config, generator)
            return Verdict(m, nxt)
        if layout.alternates:
            return tree_accept(torch.argmax(logits[:, : self.vocab_size], dim=-1).tolist(), layout)
        relaxed = config.relaxed_threshold if config.relaxed else None
        return greedy_accept(logits, proposal.tokens, self.vocab_size, relaxed)

    def _accept_sampled(
        self,
        logits: torch.Tensor,
        draft: list[int],
        dists: list[torch.Tensor | None],
        config: DecodeConfig,
        generator: torch.Generator | None,
    ) -> tuple[int, int]:
        """(accepted, next token) by speculative sampling; a seam the tests replace with broken rules
        to show that the distribution tests catch them."""
        v = sampled_accept(logits, draft, dists, config.temperature, self.vocab_size, generator)
        return v.accepted, v.next_token

    def _rollback(self, state: _State, base: int, verdict: Verdict, h: torch.Tensor | None) -> None:
        """Crop the target cache (from ``base``, its length before the verify) to the pending token and
        the accepted drafts, and keep their feature rows."""
        m, alt_row = verdict.accepted, verdict.alt_row
        kept = 1 + m
        if alt_row is not None:
            # The accepted alternate's keys sit after the chain's: move them next to the accepted chain
            # tokens, where its position id already says it belongs.
            move_entry(state.cache, base + alt_row, base + 1 + m)
            kept += 1
        crop(state.cache, base + kept)
        if h is not None:
            rows = h[: m + 1] if alt_row is None else torch.cat([h[: m + 1], h[alt_row : alt_row + 1]])
            state.feats.add(rows)

    def _record(self, state: _State, proposal: Proposal, layout: VerifyLayout, verdict: Verdict) -> list[int]:
        """Feed the round to the scheduler and the stats; the draft tokens kept (an alternate last)."""
        m, alt_row, stats = verdict.accepted, verdict.alt_row, state.stats
        kept = proposal.tokens[:m]
        if alt_row is not None:
            kept = kept + [layout.tokens[alt_row - 1]]
            stats.alt_accepted += 1
        if proposal.tokens:
            state.sched.update(len(proposal.tokens), m)
            # Token i was judged with every earlier one accepted when i <= m (the first rejected ends it).
            slots = proposal.slots
            stats.calibration.extend((c, i < m, slots[i] if i < len(slots) else NO_SLOT)
                                     for i, c in enumerate(proposal.confidence[: m + 1]))
        stats.proposed += len(proposal.tokens)
        for i, source in enumerate(proposal.sources[: len(proposal.tokens)]):
            stats.source_proposed[source] += 1
            stats.source_accepted[source] += int(i < m)
        stats.alt_proposed += len(layout.alternates)
        stats.accepted += len(kept)
        stats.accepted_hist[len(kept)] += 1
        return kept

    # ------------------------------------------------------------------------------------- the end
    def _emit(self, call: _Call, state: _State, tokens: list[int]) -> None:
        """Append new tokens up to an EOS (which ends the call, unstreamed) or the token cap, then
        stream them and ask the stop rule."""
        for tok in tokens:
            if tok in call.eos_ids:
                state.stop_reason = "eos"
                return
            state.generated.append(tok)
            state.ids.append(tok)
            if len(state.generated) >= call.config.max_new_tokens:
                break
        if call.on_tokens is not None:
            call.on_tokens(list(state.generated))
        if call.stop is not None and call.stop(list(state.generated)):
            state.stop_reason = "stop"

    def _finish(self, call: _Call, state: _State, t0: float) -> DecodeResult:
        """Close the stats and give the target cache back to the prefix cache."""
        stats, sched, cache = state.stats, state.sched, state.cache
        stats.new_tokens = len(state.generated)
        stats.k_trace = list(sched.k_trace)
        stats.tau_trace = [round(t, 4) for t in sched.tau_trace]
        stats.stop_reason = state.stop_reason or "max_tokens"
        if self.prefix_cache is not None and cache_len(cache) > 0:  # cancelled before any slice: nothing
            # The cache may cover tokens past an EOS or the token cap; store exactly what it covers.
            full = call.prompt + state.generated
            covered = min(cache_len(cache), len(full))
            crop(cache, covered)
            self.prefix_cache.put(full[:covered], cache, state.feats.upto(covered))
        stats.t_total = time.perf_counter() - t0
        return DecodeResult(tokens=state.generated, stats=stats, scheduler_state=sched.state())

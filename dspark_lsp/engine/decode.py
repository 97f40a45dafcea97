"""The DSpark decode loop: draft, verify in one target forward, accept the longest matching prefix.

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

from dspark_lsp.engine.alternates import Alternate, VerifyLayout, choose_alternates
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.draft import DraftSource, Proposal
from dspark_lsp.engine.kv import (
    TreeRows,
    cache_len,
    crop,
    forward,
    forward_hidden,
    model_dtype,
    move_entry,
    new_cache,
)
from dspark_lsp.engine.prefix_cache import Features, PrefixCache
from dspark_lsp.engine.scheduler import ConfidenceScheduler
from dspark_lsp.engine.stats import DecodeStats

# Prefill in slices: bounded attention memory, and a cancelled request stops between slices instead of
# holding the worker for a whole multi-second prefill. 256 tokens (~1.3 s of fp32 0.5B on 2 cores, the
# default prompt budget) rather than 128: a 256-token prompt took 1.51 s in two slices, 1.32 s in one.
PREFILL_CHUNK = 256

KeyFn = Callable[[list[int]], bool]  # generated ids so far -> is the next position a key position?
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


class SpeculativeDecoder:
    """Runs one target model; draft sources are passed per call. Thread-compatible, not re-entrant."""

    def __init__(self, target: Any, *, vocab_size: int | None = None, prefix_cache: PrefixCache | None = None):
        self.target = target
        # Qwen pads its embedding matrix past the tokenizer; drafts and sampling work on this many ids.
        self.vocab_size = int(vocab_size or target.config.vocab_size)
        self.prefix_cache = prefix_cache
        self._lock = threading.Lock()
        # ms per draft forward, per draft source name (smoothed; kept across calls): the cost-aware stop
        # rule weighs it against the target's verify cost.
        self._draft_ms: dict[str, float] = {}

    # ----------------------------------------------------------------------------------------- drafting
    def _draft(
        self,
        draft: DraftSource,
        ids: list[int],
        generated: list[int],
        k: int,
        sched: ConfidenceScheduler,
        config: DecodeConfig,
        is_key: KeyFn | None,
        stats: DecodeStats,
        generator: torch.Generator | None,
    ) -> Proposal:
        tau = sched.tau
        out = Proposal(dists=[] if config.temperature > 0 else None, alternates=[])
        name = str(getattr(draft, "name", "draft"))
        cum = 1.0  # the draft's own probability that every token so far is right
        calibrated = bool(getattr(draft, "calibrated", False))
        by_cost = calibrated and sched.config.calibrated_stop == "cost"
        key_cut = False  # the last block stopped at a position already classified as key
        while len(out.tokens) < k:
            if config.draft_mode == "ar" or not draft.supports_parallel:
                parallel = False
            elif config.draft_mode == "parallel":
                parallel = True
            else:
                parallel = not (key_cut or (is_key(generated + out.tokens) if is_key is not None else False))
            want = k - len(out.tokens) if parallel else 1
            t0 = time.perf_counter()
            p = draft.propose(
                ids + out.tokens,
                want,
                parallel=parallel,
                tau=tau,
                temperature=config.temperature,
                generator=generator,
            )
            if p.forwards > 0:
                ms = (time.perf_counter() - t0) * 1000 / p.forwards
                old = self._draft_ms.get(name)
                self._draft_ms[name] = ms if old is None else 0.8 * old + 0.2 * ms
            stats.draft_forwards += p.forwards
            if parallel:
                stats.draft_steps_parallel += 1
            else:
                stats.draft_steps_ar += 1
            if not p.tokens:
                break
            low_confidence = False
            # tau stops drafting at an unsure token, because drafting on would spend draft forwards and
            # verify slots on guesses that rarely land. In cost-aware mode that spend is known: a token
            # is also kept when the draft's probability of getting this far covers what it costs (a
            # lookup, or a token already in this proposal, costs no draft forward; on a flat verify
            # curve it costs no verify time either).
            tokens = p.tokens[:want]
            key_cut = False
            for i, tok in enumerate(tokens):
                conf = p.confidence[i] if i < len(p.confidence) else 1.0
                n = len(out.tokens)
                # Semi-autoregressive: a parallel block ends where the text reaches a key position
                # (a guess there, made blind to the tokens before it, is the least likely to land);
                # the next step drafts that position autoregressively. A free lookup is not cut.
                if (
                    i > 0 and parallel and p.forwards > 0 and config.draft_mode == "semi"
                    and is_key is not None and is_key(generated + out.tokens)
                ):
                    key_cut = True
                    break
                cum *= conf
                # The first token of a round is always kept: verifying 2 tokens costs about what
                # verifying 1 does on a memory-bound CPU, so a weak guess is nearly free. A calibrated
                # confidence (a confidence head's) is trusted to say when even that is not worth it.
                if by_cost:
                    if not sched.pays_at_rate(n + 1, cum, 0.0):
                        low_confidence = True
                        break
                elif conf < tau and (n > 0 or calibrated) and not sched.pays(n + 1, cum, 0.0):
                    low_confidence = True
                    break
                out.tokens.append(int(tok))
                out.confidence.append(conf)
                assert out.alternates is not None
                out.alternates.append(p.alternates[i] if p.alternates is not None and i < len(p.alternates) else [])
                if out.dists is not None:
                    out.dists.append(p.dists[i] if p.dists is not None and i < len(p.dists) else None)
                more_ms = 0.0 if i + 1 < len(tokens) else self._draft_ms.get(name, 0.0)
                if by_cost:
                    # (The next token's own confidence is not known yet: this one's is its best guess.)
                    if not sched.pays_at_rate(n + 2, cum * conf, more_ms):
                        low_confidence = True
                        break
                elif conf < tau and not sched.pays(n + 2, cum, more_ms):
                    low_confidence = True
                    break
            if key_cut:
                continue
            # A source that returned fewer tokens than asked (a lookup that ran out, a draft that
            # stopped at its own tau) does not end the round: whether to draft on is the rule above's
            # call, and the next step starts from an exact context instead of a blind mask guess.
            if low_confidence:
                break
        return out

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

    # ----------------------------------------------------------------------------------- verification
    def _accept_greedy(
        self, logits: torch.Tensor, draft: list[int], config: DecodeConfig
    ) -> tuple[int, int]:
        """Returns (number accepted, the target's next token)."""
        preds = torch.argmax(logits[:, : self.vocab_size], dim=-1).tolist()
        m = 0
        probs: torch.Tensor | None = None
        for i, d in enumerate(draft):
            if preds[i] == d:
                m += 1
                continue
            if config.relaxed:
                if probs is None:
                    probs = torch.softmax(logits[:, : self.vocab_size], dim=-1)
                if float(probs[i, d]) >= config.relaxed_threshold:
                    m += 1
                    continue
            break
        return m, int(preds[m])

    def _accept_sampled(
        self,
        logits: torch.Tensor,
        draft: list[int],
        dists: list[torch.Tensor | None],
        config: DecodeConfig,
        generator: torch.Generator | None,
    ) -> tuple[int, int]:
        """Speculative sampling: accept d with prob min(1, p(d)/q(d)); else sample norm(max(p - q, 0))."""
        p_all = torch.softmax(logits[:, : self.vocab_size] / config.temperature, dim=-1)
        for i, d in enumerate(draft):
            p = p_all[i]
            q = dists[i] if i < len(dists) else None
            q_d = 1.0 if q is None else float(q[d])
            r = float(torch.rand((), generator=generator))
            if q_d > 0 and r < min(1.0, float(p[d]) / q_d):
                continue
            if q is None:
                residual = p.clone()
                residual[d] = 0.0
            else:
                residual = torch.clamp(p - q.to(p.dtype), min=0.0)
            total = float(residual.sum())
            residual = residual / total if total > 0 else p
            return i, int(torch.multinomial(residual, 1, generator=generator).item())
        return len(draft), int(torch.multinomial(p_all[len(draft)], 1, generator=generator).item())

    def _pick(self, logits: torch.Tensor, config: DecodeConfig, generator: torch.Generator | None) -> int:
        logits = logits[: self.vocab_size]
        if config.temperature > 0:
            probs = torch.softmax(logits / config.temperature, dim=-1)
            return int(torch.multinomial(probs, 1, generator=generator).item())
        return int(torch.argmax(logits).item())

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
    ) -> DecodeResult:
        if not prompt:
            raise ValueError("prompt must contain at least one token")
        config = config or DecodeConfig()
        config.validate()
        with self._lock:
            return self._generate(
                list(prompt), config, draft, set(eos_ids), is_key, stop, on_tokens, cancel, scheduler_state
            )

    def _generate(
        self,
        prompt: list[int],
        config: DecodeConfig,
        draft: DraftSource | None,
        eos_ids: set[int],
        is_key: KeyFn | None,
        stop: StopFn | None,
        on_tokens: TokensFn | None,
        cancel: threading.Event | None,
        scheduler_state: tuple[float, ...] | None,
    ) -> DecodeResult:
        t0 = time.perf_counter()
        stats = DecodeStats(prompt_tokens=len(prompt))
        sched = ConfidenceScheduler(config.scheduler or SchedulerConfig())
        if scheduler_state is not None:
            sched.restore(scheduler_state)
        generator: torch.Generator | None = None
        if config.temperature > 0:
            generator = torch.Generator()
            generator.manual_seed(config.seed if config.seed is not None else int(time.time_ns() % 2**31))

        # Prefill the whole prompt (as `model.generate` does, so greedy output matches it bit for bit),
        # reusing a cached prefix; at least the last prompt token is always fed to get its logits.
        # A feature-conditioned draft reads the target's last hidden states: keep them for every
        # position the target runs (a reused prefix brings its own when the prefix cache stored them).
        want_feats = draft is not None and bool(getattr(draft, "wants_features", False))
        calibrated = draft is not None and bool(getattr(draft, "calibrated", False))
        cache, reused, stored = (None, 0, None)
        if self.prefix_cache is not None and len(prompt) > 1:
            cache, reused, stored = self.prefix_cache.take_with_features(prompt[:-1])
        if cache is None:
            cache, reused = new_cache(self.target), 0
        feats = _FeatureTrack(reused, stored if want_feats else None)
        stats.reused_tokens = reused
        stats.prefill_tokens = len(prompt) - reused
        last_logits: torch.Tensor | None = None
        for start in range(reused, len(prompt), PREFILL_CHUNK):
            # Every slice, the last too: a prompt within one slice (the default 256-token window) was
            # prefilled in full even when cancelled before it started (seconds of a busy worker).
            if cancel is not None and cancel.is_set():
                break
            chunk_logits, h = self._forward(
                prompt[start : start + PREFILL_CHUNK], cache, config.pad_to, want_feats, last_only=True
            )
            last_logits = chunk_logits[-1]
            if h is not None:
                feats.add(h)
        # The prefill produces the first token, so it counts once (however many slices it took):
        # target-only decoding then shows exactly 1.0 tokens per target forward.
        if last_logits is not None:
            stats.target_forwards += 1
        stats.t_prefill = time.perf_counter() - t0

        ids = list(prompt)
        generated: list[int] = []
        stop_reason = "max_tokens"
        # The prefill's own prediction is the first new token; from here on the cache covers ids[:-1].
        if last_logits is None or (cancel is not None and cancel.is_set()):
            stop_reason, config_max = "cancelled", 0
        elif config.max_new_tokens > 0:
            assert last_logits is not None
            first = self._pick(last_logits, config, generator)
            if first in eos_ids:
                stop_reason = "eos"
                config_max = 0
            else:
                generated.append(first)
                ids.append(first)
                config_max = config.max_new_tokens
                if on_tokens is not None:
                    on_tokens(list(generated))
                if stop is not None and stop(list(generated)):
                    stop_reason = "stop"
                    config_max = 0
        else:
            config_max = 0
        while len(generated) < config_max:
            if cancel is not None and cancel.is_set():
                stop_reason = "cancelled"
                break
            room = config.max_new_tokens - len(generated) - 1  # the target adds one token per round
            proposal = Proposal()
            if draft is not None and room > 0:
                k = sched.next_k()
                if calibrated:
                    # The draft's confidences are calibrated acceptance probabilities: let the per-token
                    # cost rule in _draft end the draft instead of a length guessed from past rounds.
                    k = max(k, sched.config.k_max)
                k = min(k, room)
                if k > 0 and want_feats and feats.rows is not None:
                    draft.set_features(feats.start, feats.rows)  # type: ignore[attr-defined]
                if k > 0:
                    td = time.perf_counter()
                    proposal = self._draft(draft, ids, generated, k, sched, config, is_key, stats, generator)
                    stats.t_draft += time.perf_counter() - td
                    # (A calibrated draft's own probabilities already priced every token it kept.)
                    if not calibrated and not sched.worth(len(proposal.tokens)):
                        # Cut short by tau to a length whose verify costs more than it can save.
                        proposal = Proposal()
            tv = time.perf_counter()
            base = cache_len(cache)
            layout = self._layout(proposal, config, sched)
            logits, h = self._forward([ids[-1]] + layout.tokens, cache, config.pad_to, want_feats, layout)
            stats.target_forwards += 1
            alt_row: int | None = None
            if config.temperature > 0:
                m, nxt = self._accept_sampled(
                    logits, proposal.tokens, proposal.dists or [], config, generator
                )
            elif layout.alternates:
                m, alt_row, nxt = layout.accept(torch.argmax(logits[:, : self.vocab_size], dim=-1).tolist())
            else:
                m, nxt = self._accept_greedy(logits, proposal.tokens, config)
            kept = [ids[-1]] + proposal.tokens[:m]
            if alt_row is not None:
                # The accepted alternate's keys sit after the chain's: move them next to the accepted
                # chain tokens, where its position id already says it belongs.
                move_entry(cache, base + alt_row, base + 1 + m)
                kept.append(layout.tokens[alt_row - 1])
                stats.alt_accepted += 1
            crop(cache, base + len(kept))
            if h is not None:
                rows = h[: m + 1] if alt_row is None else torch.cat([h[: m + 1], h[alt_row : alt_row + 1]])
                feats.add(rows)  # the pending token and the accepted drafts
            stats.t_verify += time.perf_counter() - tv
            if proposal.tokens:
                sched.update(len(proposal.tokens), m)
                # Token i was judged with every earlier one accepted when i <= m (the first rejected ends it).
                stats.calibration.extend((c, i < m) for i, c in enumerate(proposal.confidence[: m + 1]))
            stats.proposed += len(proposal.tokens)
            stats.alt_proposed += len(layout.alternates)
            stats.accepted += len(kept) - 1
            stats.accepted_hist[len(kept) - 1] += 1
            new = kept[1:] + [nxt]
            finished = False
            for tok in new:
                if tok in eos_ids:
                    stop_reason = "eos"
                    finished = True
                    break
                generated.append(tok)
                ids.append(tok)
                if len(generated) >= config.max_new_tokens:
                    break
            if finished:
                break
            if on_tokens is not None:
                on_tokens(list(generated))
            if stop is not None and stop(list(generated)):
                stop_reason = "stop"
                break

        stats.new_tokens = len(generated)
        stats.k_trace = list(sched.k_trace)
        stats.tau_trace = [round(t, 4) for t in sched.tau_trace]
        stats.stop_reason = stop_reason
        if self.prefix_cache is not None and cache_len(cache) > 0:  # cancelled before any slice: nothing
            # The cache may cover tokens past an EOS or the token cap; store exactly what it covers.
            full = prompt + generated
            covered = min(cache_len(cache), len(full))
            crop(cache, covered)
            self.prefix_cache.put(full[:covered], cache, feats.upto(covered))
        stats.t_total = time.perf_counter() - t0
        return DecodeResult(tokens=generated, stats=stats, scheduler_state=sched.state())

"""The local decoder: our engine on the loaded target and draft (a completion.Decoder).

It holds the prefix cache, the speculative decoder and this machine's verify-cost curve, prefills prompts
ahead of requests (warm-ups) and decodes a prepared request, token healing included, into the text the
service shows. service.CompletionService runs the pipeline around it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from dspark_lsp.completion import Decoded, Prepared, ServiceConfig, finish_text, ids_covering, stop_ids
from dspark_lsp.contract import CompletionStats
from dspark_lsp.engine.cost_plans import CostPlans
from dspark_lsp.engine.costs import ForwardPlan, calibrate_forwards, cost_profile
from dspark_lsp.engine.cpu_share import CpuWatch, ThreadPolicy
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource, RecentOutputs
from dspark_lsp.engine.healing import Heal
from dspark_lsp.engine.prefix_cache import PrefixCache
from dspark_lsp.models.gguf_target import weights_kind
from dspark_lsp.models.packing import is_packed
from dspark_lsp.prompt import FimPrompt, outside_window_ids
from dspark_lsp.quick_answer import EarlyStop
from dspark_lsp.warm_slices import WarmSlices

# A background warm-up prefills in slices, the longest a real request waits behind one. Measured on the
# 0.5B, 961 prompt tokens, 2 threads, quiet host: slices of 64 / 128 / 256 took 6.1 / 4.5 / 3.4 s in all
# (a slice pays a fixed cost for reading the weights), i.e. up to ~0.4 / 0.6 / 0.9 s of waiting. So 128
# tokens on the 0.5B, and on a slower model fewer (warm_slices.WarmSlices).


class LocalDecoder:
    """Our engine on the loaded target and draft: the prefix cache, the speculative decoder and this
    machine's verify-cost curve (a completion.Decoder)."""

    # The engine can constrain the first tokens, so a prompt may back off its last one (engine.healing).
    heals = True

    def __init__(self, config: ServiceConfig, target: Any, tokenizer: Any, draft: DraftSource | None) -> None:
        from dspark_lsp.models.fim import detect_fim_tokens

        self.target = target
        self.tokenizer = tokenizer
        self.draft = draft
        self.stop_ids = stop_ids(detect_fim_tokens(tokenizer))
        self.prefix_cache = PrefixCache(
            max_entries=4, max_tokens=4 * max(config.context_window + config.context_budget, 512)
        )
        self.engine = SpeculativeDecoder(target, prefix_cache=self.prefix_cache if config.prefix_reuse else None)
        self.warmed_tokens = 0  # prompt tokens prefilled ahead of requests (warm)
        self.draft_warmed_tokens = 0  # the same on the draft model's own cache
        param = next(target.parameters())
        self.weights = weights_kind(target)
        # The thread count follows the other programs' use of the CPU (engine/cpu_share.py); on a GPU
        # the CPU threads hardly matter and stay as they are.
        self._on_cpu = param.device.type == "cpu"
        self._all_threads = torch.get_num_threads()
        self.cpu_watch = CpuWatch(self._thread_policy(config))
        if self._on_cpu:
            self.cpu_watch.start()
        # Its reading thread holds the watch, not this decoder: stop it with the decoder even when no
        # one calls close() (tests, a reload that drops the old service).
        weakref.finalize(self, self.cpu_watch.stop)
        # The scheduler needs this machine's verify-cost curve: measured here (1-2 s for the 0.5B on a
        # CPU; it also finds forward lengths worth padding to), or the published profile for the device
        # when calibration is off. One per thread count (engine/cost_plans.py): this one is the load's.
        if config.calibrate:
            plan = calibrate_forwards(target)
        else:
            plan = ForwardPlan(cost_ms=cost_profile(str(param.device), self.weights, packed=is_packed(target)))
        self.verify_cost_ms, self.pad_to = plan.cost_ms, plan.pad_to
        self.cost_plans = CostPlans({self._all_threads: plan}, measure=config.calibrate and self._on_cpu)
        self.warm_slices = WarmSlices.from_verify_cost(self.verify_cost_ms)

    def configure(self, config: ServiceConfig) -> None:
        self.engine.prefix_cache = self.prefix_cache if config.prefix_reuse else None
        self.cpu_watch.policy = self._thread_policy(config)
        if self._on_cpu:
            self.cpu_watch.start()  # no-op when running; starts it when threads went from fixed to 0

    def _thread_policy(self, config: ServiceConfig) -> ThreadPolicy:
        return ThreadPolicy(most=config.threads or self._all_threads, adaptive=config.threads == 0)

    def use_threads(self) -> int:
        """Set the calling thread's torch thread count for the next piece of work (torch keeps the count
        per thread: set it where the forwards run) and return it."""
        if not self._on_cpu:
            return torch.get_num_threads()
        n = self.cpu_watch.threads()
        if n != torch.get_num_threads():
            torch.set_num_threads(n)
        return n

    def close(self) -> None:
        self.cpu_watch.stop()
        self.prefix_cache.clear()
        self.engine.drop_partial()

    def warm(self, fp: FimPrompt, config: ServiceConfig, cancel: threading.Event | None, *,
             keep_current: bool = False) -> int:
        if fp.heal:  # the vocabulary's byte table (~0.5 s, once) is built here rather than in a request
            from dspark_lsp.models.token_bytes import token_table

            token_table(self.tokenizer)
        # A thread count the engine ran with and has no cost curve of its own yet: measured here, in
        # the background, stopped between two short forwards by a request.
        self.cost_plans.fill(self.target, self.use_threads(), cancel)
        done = self._warm_target(fp, config, cancel, keep_current)
        # A draft model keeps one cache of its own: the current prompt's, never a look-ahead's (which
        # would replace it). Its prefill is the draft's share of a cold request (the 0.5B drafting for
        # the 1.5B: ~250 ms a 100 tokens), paid here while the user is not waiting.
        if self.draft is not None and not keep_current and not (cancel is not None and cancel.is_set()):
            self.use_threads()
            self.draft_warmed_tokens += self.draft.prefill(fp.ids, cancel)
        return done

    def _warm_target(self, fp: FimPrompt, config: ServiceConfig, cancel: threading.Event | None,
                     keep_current: bool) -> int:
        if not config.prefix_reuse or self.prefix_cache.covered(fp.ids) >= len(fp.ids) - 1:
            return 0  # nothing to keep it in, or cached already (the decode always feeds the last token)
        plan = self.cost_plans.for_threads(self.use_threads())
        decode_config = replace(config.decode_config(None, plan.cost_ms, plan.pad_to), max_new_tokens=0,
                                prefill_chunk=self.warm_slices.size(), keep_others=keep_current)
        res = self.engine.generate(fp.ids, config=decode_config, draft=self.draft, cancel=cancel)
        done = 0 if res.stats.stop_reason == "cancelled" else int(res.stats.prefill_tokens)
        self.warm_slices.observe(done, res.stats.t_prefill)
        self.warmed_tokens += done
        return done

    def decode(self, prep: Prepared, config: ServiceConfig, decode_text: Callable[[list[int]], str], *,
               scheduler_state: tuple[float, ...] | None, cancel: threading.Event | None,
               on_text: Callable[[str], None] | None) -> Decoded:
        return self._decode(prep, [], config, decode_text, scheduler_state=scheduler_state, cancel=cancel,
                            on_text=on_text, deadline=prep.deadline)

    def extend(self, prep: Prepared, head: list[int], config: ServiceConfig,
               decode_text: Callable[[list[int]], str], *, scheduler_state: tuple[float, ...] | None,
               cancel: threading.Event | None) -> Decoded:
        """Decode on from a completion answered early (quick_answer.py), whose tokens so far are ``head``:
        the prompt plus ``head`` (cached but for its last token), then on to the end. The answer covers
        ``head`` and what followed, as if the decode had never stopped."""
        return self._decode(prep, list(head), config, decode_text, scheduler_state=scheduler_state,
                            cancel=cancel, on_text=None, deadline=None)

    def _decode(self, prep: Prepared, head: list[int], config: ServiceConfig,
                decode_text: Callable[[list[int]], str], *, scheduler_state: tuple[float, ...] | None,
                cancel: threading.Event | None, on_text: Callable[[str], None] | None,
                deadline: float | None) -> Decoded:
        req, fp, tracker = prep.req, prep.fp, prep.tracker
        early = EarlyStop(tracker, deadline,
                          lambda text: finish_text(tracker.probe(), text, prep.after, capped=True)[0])

        def text_of(ids: list[int]) -> str:
            return decode_text(head + ids)

        def is_key(ids: list[int]) -> bool:
            return bool(tracker.is_key_next(text_of(ids)))

        def on_tokens(ids: list[int]) -> None:
            if on_text is not None:
                on_text(text_of(ids))

        draft = self.draft
        set_lookup_corpus(draft, lambda: outside_window_ids(req.text, req.offset, fp, self.tokenizer))
        if draft is not None:
            draft.set_recent(RecentOutputs(prep.recent, prep.anchor, len(fp.ids)) if prep.recent else None)
        total = req.max_new_tokens or config.max_new_tokens
        heal = self.heal_for(fp.heal, head)
        threads = self.use_threads()
        plan = self.cost_plans.for_threads(threads)
        res = self.engine.generate(
            fp.ids + head,
            config=config.decode_config(max(total - len(head), 1), plan.cost_ms, plan.pad_to),
            draft=draft,
            eos_ids=self.stop_ids,
            is_key=is_key,
            stop=lambda ids: early(text_of(ids)),
            on_tokens=on_tokens if on_text is not None else None,
            cancel=cancel,
            scheduler_state=scheduler_state,
            heal=heal,
        )
        tokens = head + list(res.tokens)
        st = res.stats
        # Stopped by the deadline or a cancel, the last line is as unfinished as one the budget cut short.
        # Judged on a probe: the tracker itself stays unjudged for a continuation (extend) of this decode.
        final = tracker.probe()
        text, cut = finish_text(final, decode_text(tokens), prep.after,
                                capped=st.stop_reason in ("max_tokens", "cancelled") or early.hit)
        ids = ids_covering(tokens, len(text), decode_text)
        # "gguf": the target computes from its GGUF's quantized blocks; else its torch dtype
        stats = CompletionStats.from_decode(st, latency_ms=prep.elapsed_ms(), draft=getattr(draft, "name", "none"),
                                            weights=self.weights, threads=threads)
        cancelled = st.stop_reason == "cancelled"
        # At the token budget there is nothing left to go on with: an ordinary end.
        unfinished = early.hit and not cancelled and len(tokens) < total
        reason = "deadline" if unfinished else st.stop_reason if cut is None or cancelled else "syntax"
        return Decoded(text, ids, stats, final.scope.value, cancelled, reason, res.scheduler_state,
                       raw_ids=tokens)

    def heal_for(self, text: str, head: list[int]) -> Heal | None:
        """The constraint for a prompt that backed off ``text`` (FimPrompt.heal), of which the tokens
        ``head`` (an early answer's, continued) may have spelled some or all already."""
        if not text:
            return None
        from dspark_lsp.models.token_bytes import token_table

        table = token_table(self.tokenizer)
        rest = table.left_after(text.encode("utf-8"), head)
        return Heal(table, rest) if rest else None


def set_lookup_corpus(draft: DraftSource | None, corpus: Callable[[], list[int]]) -> None:
    """Let the draft's n-gram lookup (if it drafts with one) also search ``corpus()``: for a completion,
    the document outside the prompt window. ``corpus`` is called only when there is a lookup to take it.
    The benchmarks set their drafts up through this too."""
    if draft is not None:
        draft.set_corpus(corpus)

"""One completion, end to end: document + cursor → FIM prompt → DSpark decode → cleaned text.

The CLI's `complete`, the language server and the benchmarks all go through `CompletionService`, so
what a user sees in the editor is exactly what the tests and benchmarks measure. This module wires the
engine (torch), the syntax layer (tree-sitter) and the model registry together; the first two never
see each other: syntax facts reach the engine as plain callables built here.

The service is the pipeline around a decoder (completion.Decoder): local_decoder.LocalDecoder, our engine
on the loaded models, or remote.service.RemoteDecoder, an OpenAI-compatible server. This module imports the
remote one when the `backend` setting asks for it; the remote module never imports this one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dspark_lsp.completion import (
    Decoder,
    Prepared,
    Progress,
    ServiceConfig,
    Shown,
    decide_scope,
    finish_text,
    ids_covering,
)
from dspark_lsp.contract import CompletionRequest, CompletionResult, CompletionStats, ServiceRecord
from dspark_lsp.draft_loading import load_draft
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.engine.prefix_cache import PrefixCache
from dspark_lsp.errors import UserError
from dspark_lsp.latency_note import SlowAnswers
from dspark_lsp.local_decoder import LocalDecoder, set_lookup_corpus
from dspark_lsp.prompt import (
    FimPrompt,
    PromptContext,
    build_fim_prompt,
    detect_repo_format,
    text_after_heal,
)
from dspark_lsp.quick_answer import Unfinished

if TYPE_CHECKING:
    from dspark_lsp.remote.service import RemoteDecoder

# Names that moved to dspark_lsp.completion, still importable from here.
_Shown, _Prepared, _ids_covering = Shown, Prepared, ids_covering

# How far ahead a warm-up looks for the window's next slide, in typed tokens: about 25 s of typing, while
# warm-ups come at every typing pause and after every completion, so none is missed; small enough that the
# slid window is rarely prefilled for a slide the user never reaches.
LOOKAHEAD_TOKENS = 64
# The recent outputs' lookup (NgramDraftSource.set_recent) matches at most 4 tokens, so a short anchor
# before the cursor is all it reads; 200 characters hold far more than 8 tokens of code.
ANCHOR_TOKENS = 8
ANCHOR_CHARS = 200

log = logging.getLogger(__name__)


class CompletionService:
    """The completion pipeline around a decoder (completion.Decoder): the cursor check, the typed-through
    cache, the syntax scope, the FIM prompt, the clean-up and the per-request records are the same for
    every decoder. ``complete`` is blocking; call it from a worker thread."""

    RECENT = 50
    SHOWN_CACHE = 100
    # The target's raw outputs kept per document for the next requests' lookup (NgramDraftSource.set_recent):
    # a few pauses' worth, which is where the next answer's text comes back.
    OUTPUTS_PER_DOC = 4

    def __init__(self, config: ServiceConfig, tokenizer: Any, decoding: Decoder, *, description: str = "",
                 notice: str | None = None) -> None:
        from dspark_lsp.models.fim import detect_fim_tokens

        self.config = config
        self.tokenizer = tokenizer
        self.decoding = decoding
        self.description = description
        # One line the user should read once (the LSP shows it as a warning, the CLI on stderr): serving
        # another model than the settings named, say (models/default_choice.py).
        self.notice = notice
        # Watches the default model's answers for a machine too slow for it (set by load; latency_note.py).
        self.slow_answers: SlowAnswers | None = None
        self.fim = detect_fim_tokens(tokenizer)
        self.repo_format = detect_repo_format(tokenizer)
        self._recent: deque[ServiceRecord] = deque(maxlen=self.RECENT)
        self._shown: OrderedDict[str, list[Shown]] = OrderedDict()
        # Per-document scheduler state (what the confidence scheduler learnt), bounded LRU.
        self._sched_state: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        # Per-document recent raw outputs (oldest first), bounded LRU like the others.
        self._outputs: OrderedDict[str, deque[tuple[int, ...]]] = OrderedDict()
        # Per-document completion answered early whose decode goes on in the background (quick_answer.py).
        self._unfinished: dict[str, Unfinished] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- the local engine, where it runs
    @property
    def target(self) -> Any:
        return self.decoding.target

    @property
    def draft(self) -> DraftSource | None:
        draft: DraftSource | None = self.decoding.draft
        return draft

    @property
    def weights(self) -> str:
        return self.decoding.weights

    def _local(self) -> LocalDecoder:
        if not isinstance(self.decoding, LocalDecoder):
            raise AttributeError("this service decodes on a server: it has no local engine")
        return self.decoding

    @property
    def decoder(self) -> SpeculativeDecoder:
        return self._local().engine

    @property
    def prefix_cache(self) -> PrefixCache:
        return self._local().prefix_cache

    @property
    def verify_cost_ms(self) -> dict[int, float]:
        return self._local().verify_cost_ms

    @property
    def pad_to(self) -> dict[int, int]:
        return self._local().pad_to

    @property
    def warmed_tokens(self) -> int:
        return self._local().warmed_tokens

    # ------------------------------------------------------------------------------------- loading
    @classmethod
    def load(cls, config: ServiceConfig, progress: Progress | None = None) -> CompletionService:
        errs = config.problems()
        if errs:
            raise UserError("invalid configuration: " + "; ".join(errs))
        if config.backend is not None:
            return RemoteCompletionService.load(config, progress)
        from dspark_lsp.models.default_choice import choose_pair, slow_default_note
        from dspark_lsp.models.loader import load_causal_lm, release_load_temporaries

        choice = choose_pair(config.model, config.draft_model, config.cache_dir)
        pair = choice.pair
        if choice.note:
            log.info("%s", choice.note)  # shown to the user once by the caller (LSP: a warning; CLI: stderr)
        if progress:
            progress(f"loading target {pair.target}", 0.0)
        target, tokenizer = load_causal_lm(
            pair.target, device=config.device, dtype=config.dtype, cache_root=config.cache_dir, pack=config.pack_weights
        )
        draft, desc = load_draft(pair, target, config, progress)
        release_load_temporaries()  # the draft's load-time copies, before calibration allocates more
        if progress and config.calibrate:
            # Calibration (in LocalDecoder) times the target's forwards: seconds, more on a loaded machine;
            # "ready" before it left the status bar at 100% for half a minute.
            progress("measuring this machine's forward costs", 0.9)
        service = cls(config, tokenizer, LocalDecoder(config, target, tokenizer, draft), description=desc,
                      notice=choice.note)
        note = slow_default_note(config.model, pair.target, config.cache_dir)
        service.slow_answers = SlowAnswers(note) if note is not None else None
        if progress:
            progress("ready", 1.0)
        return service

    def update_config(self, config: ServiceConfig) -> None:
        """Decode knobs only (the models stay loaded); the caller reloads when needs_reload says so."""
        errs = config.problems()
        if errs:
            raise UserError("invalid configuration: " + "; ".join(errs))
        with self._lock:
            if config.threshold != self.config.threshold:
                self._sched_state.clear()  # a new tau applies to every document, not only new ones
            self.config = config
            self.decoding.configure(config)
            if not config.completion_cache:
                self._shown.clear()

    def close(self) -> None:
        self.decoding.close()
        self._shown.clear()
        self._outputs.clear()
        self._unfinished.clear()

    def forget(self, doc_key: str) -> None:
        """Drop a closed document's state: its shown completions (each holds a copy of the document's
        text), its recent outputs and what the scheduler learnt. Both are LRU-bounded anyway; this frees them at once rather
        than after a hundred other requests. The prefix cache is keyed by tokens, not documents: it stays."""
        with self._lock:
            self._shown.pop(doc_key, None)
            self._sched_state.pop(doc_key, None)
            self._outputs.pop(doc_key, None)
            self._unfinished.pop(doc_key, None)

    def recent_stats(self) -> list[dict[str, Any]]:
        """The last requests' records in their wire form (dspark/stats' "service" list)."""
        return [record.to_json() for record in self._recent]

    # ---------------------------------------------------------------------------------- completion
    def _prepare(self, req: CompletionRequest) -> CompletionResult | Prepared:
        """What every backend does first: check the cursor; answer from the typed-through cache or as out
        of scope (both recorded, returned as results); else build the FIM prompt and the syntax tracker."""
        t0 = time.perf_counter()
        if not 0 <= req.offset <= len(req.text):
            raise UserError(f"cursor offset {req.offset} is outside the document (length {len(req.text)})")
        from dspark_lsp.syntax import Scope, SyntaxDocument, detect_language

        cfg = self.config
        before, after = req.text[: req.offset], req.text[req.offset :]
        cached = self._typed_through(req.doc_key, before, after) if cfg.completion_cache else None
        if cached is not None:
            cached.stats.latency_ms = round((time.perf_counter() - t0) * 1000, 2)
            self._record(req, cached)
            return cached
        doc = SyntaxDocument(req.text, detect_language(req.path, req.language_id))
        scope = decide_scope(doc, req.offset, cfg.multiline)
        if scope is Scope.NONE:
            result = CompletionResult("", "", [], scope.value, CompletionStats(latency_ms=0.0), stop_reason="scope_none")
            self._record(req, result)
            return result
        fp = self.prompt_for(req, doc)
        tracker = doc.generation(req.offset, scope, continue_lines=cfg.multiline == "auto")
        with self._lock:
            recent = tuple(self._outputs.get(req.doc_key, ()))
        quick = req.automatic and cfg.quick_answer_ms > 0
        deadline = t0 + cfg.quick_answer_ms / 1000 if quick else None
        # The anchor ends where the prompt does: a healed prompt's output starts by spelling its backed-off text.
        anchor = self._anchor(fp.prefix[: len(fp.prefix) - len(fp.heal)])
        return Prepared(req, t0, before, after, scope, fp, tracker, recent, anchor, deadline)

    def warm(self, req: CompletionRequest, cancel: threading.Event | None = None) -> int:
        """Prefill the prompt a completion at ``req`` would use into the prefix cache, answering nothing:
        the KV of the context and the window is paid before the user asks (a document opened, typing
        paused, the cursor settled). An answer given early there is decoded on first. Small prefill
        slices, so a real request (which sets ``cancel``) waits at most one slice; what was prefilled
        before the cancel is kept. Returns the tokens prefilled (0: all cached already, no completion
        possible there, or cancelled)."""
        if not 0 <= req.offset <= len(req.text) or (cancel is not None and cancel.is_set()):
            return 0
        self.finish_early_answer(req, cancel)  # the answer the user may be reading goes first
        from dspark_lsp.syntax import Scope, SyntaxDocument, detect_language

        doc = SyntaxDocument(req.text, detect_language(req.path, req.language_id))
        cancelled = cancel is not None and cancel.is_set()
        if cancelled or decide_scope(doc, req.offset, self.config.multiline) is Scope.NONE:
            return 0
        fp = self.prompt_for(req, doc)
        done = self.decoding.warm(fp, self.config, cancel)
        # The window slides when the prefix outgrows its budget: its start jumps a block of lines and the
        # request after it re-prefills everything past the context (605 tokens, 2.5-4 s on the 0.5B in
        # the typing replay). When that is near, prefill the slid window too, beside the current one.
        ahead = self.prompt_for(req, doc, lookahead=LOOKAHEAD_TOKENS)
        if ahead.prefix != fp.prefix and not (cancel is not None and cancel.is_set()):
            done += self.decoding.warm(ahead, self.config, cancel, keep_current=True)
        return done

    def prompt_for(
        self, req: CompletionRequest, doc: Any, lookahead: int = 0, config: ServiceConfig | None = None,
        heal: bool = True,
    ) -> FimPrompt:
        """The FIM prompt a completion at ``req`` decodes from (``doc``: its syntax.SyntaxDocument): the
        settings' window, prefix share and order, and the request's other-files context within its budget.
        The benchmarks build their prompts here too. ``lookahead``: the prompt as it will be after about
        that many more typed tokens (prompt.build_fim_prompt). ``config``: other prompt settings than the
        service's (the eval compares a saved run's prompt with this one's). ``heal``: back off the prompt's
        last token where the order and the decoder call for it; False, for a caller that decodes the ids
        itself without the constraint, gives it the psm prompt instead of an unhealed spm one."""
        cfg = config or self.config
        context = None
        # With a budget, a PromptContext even when no piece was found: its unused budget widens the file's
        # window (prompt.py), so the prompt is contextWindow + contextBudget tokens either way.
        if cfg.context_budget > 0:
            fmt = self.repo_format
            if not fmt.native:  # the plain fallback heads each piece with a comment of the file's language
                fmt = replace(fmt, comment=(doc.spec.line_comment if doc.spec else None) or "#")
            name = req.prompt_path or (req.path.replace("\\", "/").rsplit("/", 1)[-1] if req.path else "")
            context = PromptContext(req.context, cfg.context_budget, name, req.repo_name or "", fmt)
        heals = heal and cfg.token_healing and bool(getattr(self.decoding, "heals", False))
        order = cfg.fim_order
        if order == "spm" and cfg.token_healing and not heals:
            # Suffix first without healing loses where the cursor sits mid-line (repository set: exact match
            # 0.175 against psm's 0.325): a decoder that cannot heal (a remote server, the bench's peers) gets psm.
            order = "psm"
        return build_fim_prompt(req.text, req.offset, self.tokenizer, self.fim, context_window=cfg.context_window,
                                prefix_share=cfg.prefix_share, context=context,
                                order=order, lookahead=lookahead, heal=heals)  # type: ignore[arg-type]

    def complete(
        self,
        req: CompletionRequest,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> CompletionResult:
        prep = self._prepare(req)
        if isinstance(prep, CompletionResult):
            return prep
        with self._lock:
            self._unfinished.pop(req.doc_key, None)  # the model runs for a newer spot: that one is stale
        out = self.decoding.decode(prep, self.config, self._decoder_text(prep.fp.heal), cancel=cancel, on_text=on_text,
                                   scheduler_state=self._sched_state.get(req.doc_key))
        if out.scheduler_state is not None:
            self._sched_state[req.doc_key] = out.scheduler_state
            self._sched_state.move_to_end(req.doc_key)
            while len(self._sched_state) > self.SHOWN_CACHE:
                self._sched_state.popitem(last=False)
        if out.raw_ids:
            self._keep_output(req.doc_key, [*prep.anchor, *out.raw_ids])
        if out.stop_reason == "deadline":
            with self._lock:
                self._unfinished[req.doc_key] = Unfinished(prep, tuple(out.raw_ids),
                                                            self._decoder_text(prep.fp.heal)(out.raw_ids))
        return self._finish(prep, out.text, out.ids, out.stats, scope=out.scope, cancelled=out.cancelled,
                            stop_reason=out.stop_reason)

    def finish_early_answer(self, req: CompletionRequest, cancel: threading.Event | None = None) -> int:
        """Decode on, in the background, the completion answered early for ``req.doc_key`` (quick_answer.py)
        while the document still leads to it; the whole completion (or, when cancelled, its lines finished
        so far) joins the typed-through cache. Returns the tokens decoded (0: nothing to go on with)."""
        key = req.doc_key
        with self._lock:
            job = self._unfinished.get(key)
        extend = getattr(self.decoding, "extend", None)
        if job is None or extend is None or (cancel is not None and cancel.is_set()):
            return 0
        if not job.still_ahead(req.text[: req.offset], req.text[req.offset :]):
            with self._lock:
                if self._unfinished.get(key) is job:
                    del self._unfinished[key]
            return 0
        decode_text = self._decoder_text(job.prep.fp.heal)
        out = extend(job.prep, list(job.head), self.config, decode_text, scheduler_state=self._sched_state.get(key),
                     cancel=cancel)
        with self._lock:
            if self._unfinished.get(key) is not job:
                return 0  # dropped meanwhile (the document closed)
            if out.cancelled:  # a request came: keep the tokens so far and go on from there next time
                self._unfinished[key] = Unfinished(job.prep, tuple(out.raw_ids), decode_text(out.raw_ids))
            else:
                del self._unfinished[key]
        prep = job.prep
        if self.config.completion_cache and out.text:
            self._remember(key, Shown(prep.before, prep.after, out.text, out.ids, prep.fp.text, out.scope))
        if not out.cancelled:
            self._keep_output(key, [*prep.anchor, *out.raw_ids])
        return len(out.raw_ids) - len(job.head)

    def _finish(self, prep: Prepared, text: str, ids: list[int], stats: CompletionStats, *, scope: str,
                cancelled: bool, stop_reason: str) -> CompletionResult:
        """What every backend does last: the result; remembered for typing through it, and recorded."""
        result = CompletionResult(text=text, prompt=prep.fp.text, completion_ids=ids, scope=scope, stats=stats,
                                  cancelled=cancelled, stop_reason=stop_reason)
        if self.config.completion_cache and not cancelled and text:
            self._remember(prep.req.doc_key, Shown(prep.before, prep.after, text, ids, prep.fp.text, scope))
        self._record(prep.req, result)
        return result

    # ------------------------------------------------------------------------------------ helpers
    def _decoder_text(self, heal: str = "") -> Callable[[list[int]], str]:
        """Generated ids -> the text they add at the cursor; ``heal``: the prompt's backed-off text, which
        the first tokens spell out again and which is already in the document (nothing until it is)."""
        tok = self.tokenizer

        def decode(ids: list[int]) -> str:
            text = text_after_heal(str(tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)),
                                   heal)
            # A multi-byte character split across tokens decodes to U+FFFD until its last byte arrives;
            # never show (or judge syntax on) half a character.
            return text.rstrip("\ufffd")

        return decode

    def _remember(self, key: str, shown: Shown) -> None:
        with self._lock:
            entries = self._shown.setdefault(key, [])
            entries.append(shown)
            del entries[:-4]
            self._shown.move_to_end(key)
            while sum(len(v) for v in self._shown.values()) > self.SHOWN_CACHE:
                self._shown.popitem(last=False)

    def _anchor(self, prefix: str) -> tuple[int, ...]:
        """The last tokens before the cursor, as the recent outputs' lookup matches them (RecentOutputs).
        Encoding a tail of the text is enough: only its last tokens are kept, and a cut through the first
        word of the tail does not reach them."""
        ids = self.tokenizer.encode(prefix[-ANCHOR_CHARS:], add_special_tokens=False) if prefix else []
        return tuple(ids[-ANCHOR_TOKENS:])

    def _keep_output(self, key: str, ids: list[int]) -> None:
        with self._lock:
            kept = self._outputs.setdefault(key, deque(maxlen=self.OUTPUTS_PER_DOC))
            if kept and tuple(ids[: len(kept[-1])]) == kept[-1]:
                kept.pop()  # the same output carried on (an early answer's continuation): keep the whole
            kept.append(tuple(ids))
            self._outputs.move_to_end(key)
            while len(self._outputs) > self.SHOWN_CACHE:
                self._outputs.popitem(last=False)

    def _typed_through(self, key: str, before: str, after: str) -> CompletionResult | None:
        """If the user typed (part of) a completion we computed, answer with the rest of it."""
        with self._lock:
            for shown in reversed(self._shown.get(key, [])):
                if after != shown.after or not before.startswith(shown.before):
                    continue
                typed = before[len(shown.before) :]
                if not shown.text.startswith(typed) or len(typed) >= len(shown.text):
                    continue
                rest = shown.text[len(typed) :]
                return CompletionResult(
                    text=rest,
                    prompt=shown.prompt,
                    completion_ids=[],
                    scope=shown.scope,
                    stats=CompletionStats(typed_through=len(typed)),
                    stop_reason="cache",
                    from_cache=True,
                )
        return None

    def _record(self, req: CompletionRequest, result: CompletionResult) -> None:
        self._recent.append(result.record(req.doc_key))
        if self.slow_answers is not None and not result.cancelled and result.stop_reason != "scope_none":
            self.slow_answers.observe(result.stats.latency_ms or 0.0)

    def take_notice(self) -> str | None:
        """A note that came due while serving (latency_note.py), once; else None."""
        note = self.slow_answers.take() if self.slow_answers is not None else None
        if note:
            log.info("%s", note)
        return note


class RemoteCompletionService(CompletionService):
    """A service whose decoder is an OpenAI-compatible server (remote.service.RemoteDecoder)."""

    decoding: RemoteDecoder

    @classmethod
    def load(cls, config: ServiceConfig, progress: Progress | None = None) -> RemoteCompletionService:
        from dspark_lsp.remote.service import load_remote

        tokenizer, decoding, description = load_remote(config, progress)
        service = cls(config, tokenizer, decoding, description=description)
        if progress:
            progress("ready", 1.0)
        return service

    def request_body(self, prompt: str, scope: str, max_new_tokens: int | None = None) -> dict[str, Any]:
        """The `/v1/completions` body for one prompt (the integration check sends the same to vLLM)."""
        return self.decoding.request_body(self.config, prompt, scope, max_new_tokens)


__all__ = [
    "CompletionRequest",
    "CompletionResult",
    "CompletionService",
    "LocalDecoder",
    "Progress",
    "RemoteCompletionService",
    "ServiceConfig",
    "decide_scope",
    "finish_text",
    "set_lookup_corpus",
]

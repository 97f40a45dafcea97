"""One completion, end to end: document + cursor → FIM prompt → DSpark decode → cleaned text.

The CLI's `complete`, the language server and the benchmarks all go through `CompletionService`, so
what a user sees in the editor is exactly what the tests and benchmarks measure. This module wires the
engine (torch), the syntax layer (tree-sitter) and the model registry together; the first two never
see each other: syntax facts reach the engine as plain callables built here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from dspark_lsp.contract import CompletionRequest, CompletionResult, CompletionStats, ServiceRecord
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.costs import calibrate_forwards, cost_profile
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource
from dspark_lsp.engine.prefix_cache import PrefixCache
from dspark_lsp.errors import ModelNotPrepared, UserError
from dspark_lsp.models.gguf_target import weights_kind
from dspark_lsp.models.packing import is_packed
from dspark_lsp.prompt import (
    FimPrompt,
    PromptContext,
    build_fim_prompt,
    detect_repo_format,
    outside_window_ids,
)
from dspark_lsp.remote.config import RemoteSettings
from dspark_lsp.settings_schema import BY_NAME, LSP_ONLY, SERVICE_FIELDS, config_problems

if TYPE_CHECKING:
    from dspark_lsp.models.registry import PairSpec

Progress = Callable[[str, float | None], None]

# Prefill slice of a background warm-up, the longest a real request waits behind one. Measured on the
# 0.5B, 961 prompt tokens, 2 threads, quiet host: slices of 64 / 128 / 256 took 6.1 / 4.5 / 3.4 s in all
# (a slice pays a fixed cost for reading the weights), i.e. up to ~0.4 / 0.6 / 0.9 s of waiting.
WARM_CHUNK = 128

log = logging.getLogger(__name__)


@dataclass
class ServiceConfig:
    model: str = "default"
    draft_model: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    threshold: float = 0.9
    k_min: int = 1
    k_max: int = 5
    # Runner-up draft tokens verified beside the chain per round (engine.alternates); 0 = chain only.
    alternates: int = 3
    max_new_tokens: int = 64
    # 768 + 256 of other files, suffix ~10%: chosen on the repository-level set (eval --repo, 2026-12-03:
    # exact match 0.29 -> 0.42 against 256 tokens of the file alone) and the typing replay (a small suffix
    # is what a keystroke re-prefills; prefixShare 0.94 matched 0.75 at 1,024 tokens on 60 holes).
    context_window: int = 768
    prefix_share: float = 0.9
    # Tokens of other files' context (open documents' chunks, imported definitions) before the FIM part,
    # on top of context_window; 0 = none. Which sources feed it: context_open_files / _definitions.
    context_budget: int = 256
    context_open_files: bool = True
    context_definitions: bool = True
    # The FIM arrangement: psm (prefix, suffix, middle) or spm (suffix first: typing then changes only
    # the prompt's end, so more of its KV is reused).
    fim_order: str = "psm"
    # Prefill prompts in the background (a document opened, typing paused, the cursor rested: lsp/warm.py),
    # so the request finds their KV cached. Read by the language server; the service only answers warm().
    warm_up: bool = True
    relaxed: bool = False
    multiline: str = "auto"
    cache_dir: str | None = None
    prefix_reuse: bool = True
    completion_cache: bool = True
    draft_mode: str = "semi"
    temperature: float = 0.0
    calibrate: bool = True
    # Pre-pack linear layers for the CPU (models.packing): auto/on/off.
    pack_weights: str = "auto"
    # Completions from an OpenAI-compatible server instead of the local engine (dspark_lsp.remote);
    # the `backend` setting, an object, is parsed by remote.config (the table's entry delegates to it).
    backend: RemoteSettings | None = None

    # camelCase setting -> field name, generated from the settings table (dspark_lsp/settings_schema.py).
    SETTINGS: ClassVar[dict[str, str]] = SERVICE_FIELDS

    def problems(self) -> list[str]:
        """Human-readable reasons why this config is invalid (empty when valid): each field against the
        settings table's range or choices, then the one rule between fields."""
        out = config_problems(self)
        k_range = (BY_NAME["kMin"], BY_NAME["kMax"])
        if all(s.check(getattr(self, s.field_name)) for s in k_range) and self.k_min > self.k_max:
            out.append(f"kMin must be at most kMax, got kMin {self.k_min} > kMax {self.k_max}")
        return out

    @classmethod
    def from_settings(
        cls, settings: dict[str, Any] | None, base: ServiceConfig | None = None
    ) -> tuple[ServiceConfig, list[str]]:
        """Apply camelCase settings onto ``base``; invalid values are reported and fall back."""
        base = base or cls()
        problems: list[str] = []
        if settings is None:
            return replace(base), problems
        if not isinstance(settings, dict):
            return replace(base), [f"settings must be an object, got {type(settings).__name__}"]
        defaults = cls()
        cfg = replace(base)
        for key, value in settings.items():
            name = cls.SETTINGS.get(key)
            if name is None:
                if key not in LSP_ONLY:  # client/server-side settings are handled by the LSP layer
                    problems.append(f"unknown setting {key!r} ignored")
                continue
            setting = BY_NAME[key]
            if setting.parse is not None:  # an object: its own parser reports, and falls back itself
                typed, parse_problems = setting.parse(value)
                cfg = replace(cfg, **{name: typed})
                problems.extend(parse_problems)
                continue
            trial = replace(cfg, **{name: value})
            errs = trial.problems()
            if errs and len(errs) > len(cfg.problems()):
                problems.append(f"invalid {key}={value!r}: {errs[0]}; using {getattr(defaults, name)!r}")
                cfg = replace(cfg, **{name: getattr(defaults, name)})
            else:
                cfg = trial
        return cfg, problems

    def needs_reload(self, other: ServiceConfig) -> bool:
        return any(
            getattr(self, f) != getattr(other, f) for f in ("model", "draft_model", "device", "dtype", "cache_dir", "pack_weights", "backend")
        )

    def decode_config(
        self,
        max_new_tokens: int | None = None,
        verify_cost_ms: dict[int, float] | None = None,
        pad_to: dict[int, int] | None = None,
    ) -> DecodeConfig:
        return DecodeConfig(
            max_new_tokens=max_new_tokens or self.max_new_tokens,
            pad_to=pad_to,
            temperature=self.temperature,
            draft_mode=self.draft_mode,  # type: ignore[arg-type]
            relaxed=self.relaxed,
            alternates=self.alternates,
            scheduler=SchedulerConfig(
                k_min=self.k_min,
                k_max=self.k_max,
                k_start=min(max(3, self.k_min), self.k_max),
                tau=self.threshold,
                verify_cost_ms=verify_cost_ms,
            ),
        )


@dataclass
class _Shown:
    """A completion the editor may be showing: typing through it is answered without the model."""

    before: str  # document text before the cursor when it was computed
    after: str  # document text after the cursor
    text: str
    ids: list[int]
    prompt: str
    scope: str


@dataclass
class _Prepared:
    """A request that needs the model (local or remote): not answered from the typed-through cache, not
    out of scope. ``scope`` is a syntax Scope, ``tracker`` its generation tracker (syntax is imported
    lazily, so both stay untyped here). Both backends' ``complete`` take one from ``_prepare``, decode,
    and hand it with the text to ``_finish``."""

    req: CompletionRequest
    t0: float
    before: str
    after: str
    scope: Any
    fp: FimPrompt
    tracker: Any

    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self.t0) * 1000, 2)


def _load_draft(pair: PairSpec, target: Any, config: ServiceConfig,
                progress: Progress | None) -> tuple[DraftSource | None, str]:
    """The pair's draft source and the service's description. A draft *model* that is known but not
    prepared (the 1.5B's 0.5B draft, say) is not a reason to give no completions: the target is there,
    so the service drafts by n-gram lookup meanwhile and says once which command fixes it."""
    if pair.draft_kind == "none":
        return None, f"{pair.target} + none"
    from dspark_lsp.drafts.registry import DraftSpec, LoadOptions, build_draft, spec_for

    if pair.draft_kind == "ngram" or pair.draft is None:
        return build_draft(DraftSpec("ngram")), f"{pair.target} + ngram"
    if progress:
        progress(f"loading draft {pair.draft}", 0.6)
    load = LoadOptions(config.device, config.dtype, config.cache_dir, config.pack_weights)
    try:
        draft = build_draft(spec_for(pair.draft, load=load), target)
    except ModelNotPrepared as exc:
        log.warning("draft %s unavailable (%s); drafting by n-gram lookup until it is prepared",
                    pair.draft, exc)
        if progress:
            progress(f"draft {pair.draft} not prepared: n-gram drafting (dspark-lsp models prepare {pair.draft})",
                     0.7)
        return build_draft(DraftSpec("ngram")), f"{pair.target} + ngram ({pair.draft} not prepared)"
    return draft, f"{pair.target} + {pair.draft}"


class CompletionService:
    """Loaded models + decode settings. ``complete`` is blocking; call it from a worker thread."""

    RECENT = 50
    SHOWN_CACHE = 100

    def __init__(
        self,
        config: ServiceConfig,
        target: Any,
        tokenizer: Any,
        draft: DraftSource | None,
        *,
        description: str = "",
    ) -> None:
        from dspark_lsp.models.fim import detect_fim_tokens

        self.config = config
        self.target = target
        self.tokenizer = tokenizer
        self.draft = draft
        self.description = description
        self.fim = detect_fim_tokens(tokenizer)
        self.repo_format = detect_repo_format(tokenizer)
        self.prefix_cache = PrefixCache(
            max_entries=4, max_tokens=4 * max(config.context_window + config.context_budget, 512)
        )
        self.decoder = SpeculativeDecoder(target, prefix_cache=self.prefix_cache if config.prefix_reuse else None)
        self._recent: deque[ServiceRecord] = deque(maxlen=self.RECENT)
        self._shown: OrderedDict[str, list[_Shown]] = OrderedDict()
        # Per-document scheduler state (what the confidence scheduler learnt), bounded LRU.
        self._sched_state: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.warmed_tokens = 0  # prompt tokens prefilled ahead of requests (warm)
        param = next(target.parameters())
        self.weights = weights_kind(target)
        # The scheduler needs this machine's verify-cost curve: measured here (1-2 s for the 0.5B on a
        # CPU; it also finds forward lengths worth padding to), or the published profile for the device
        # when calibration is off.
        self.pad_to: dict[int, int] = {}
        if config.calibrate:
            plan = calibrate_forwards(target)
            self.verify_cost_ms, self.pad_to = plan.cost_ms, plan.pad_to
        else:
            self.verify_cost_ms = cost_profile(str(param.device), self.weights, packed=is_packed(target))

    # ------------------------------------------------------------------------------------- loading
    @classmethod
    def load(cls, config: ServiceConfig, progress: Progress | None = None) -> CompletionService:
        errs = config.problems()
        if errs:
            raise UserError("invalid configuration: " + "; ".join(errs))
        if config.backend is not None:
            from dspark_lsp.remote.service import RemoteCompletionService

            return RemoteCompletionService.load(config, progress)
        from dspark_lsp.models.loader import load_causal_lm, release_load_temporaries
        from dspark_lsp.models.registry import pair_for

        pair = pair_for(config.model, config.draft_model)
        if progress:
            progress(f"loading target {pair.target}", 0.0)
        target, tokenizer = load_causal_lm(
            pair.target, device=config.device, dtype=config.dtype, cache_root=config.cache_dir, pack=config.pack_weights
        )
        draft, desc = _load_draft(pair, target, config, progress)
        release_load_temporaries()  # the draft's load-time copies, before calibration allocates more
        if progress and config.calibrate:
            # Calibration (in __init__) times the target's forwards: seconds, more on a loaded machine;
            # "ready" before it left the status bar at 100% for half a minute.
            progress("measuring this machine's forward costs", 0.9)
        service = cls(config, target, tokenizer, draft, description=desc)
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
            self.decoder.prefix_cache = self.prefix_cache if config.prefix_reuse else None
            if not config.completion_cache:
                self._shown.clear()

    def close(self) -> None:
        self.prefix_cache.clear()
        self._shown.clear()

    def forget(self, doc_key: str) -> None:
        """Drop a closed document's state: its shown completions (each holds a copy of the document's
        text) and what the scheduler learnt. Both are LRU-bounded anyway; this frees them at once rather
        than after a hundred other requests. The prefix cache is keyed by tokens, not documents: it stays."""
        with self._lock:
            self._shown.pop(doc_key, None)
            self._sched_state.pop(doc_key, None)

    def recent_stats(self) -> list[dict[str, Any]]:
        """The last requests' records in their wire form (dspark/stats' "service" list)."""
        return [record.to_json() for record in self._recent]

    # ---------------------------------------------------------------------------------- completion
    def _prepare(self, req: CompletionRequest) -> CompletionResult | _Prepared:
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
        fp = self._prompt(req, doc)
        tracker = doc.generation(req.offset, scope, continue_lines=cfg.multiline == "auto")
        return _Prepared(req, t0, before, after, scope, fp, tracker)

    def warm(self, req: CompletionRequest, cancel: threading.Event | None = None) -> int:
        """Prefill the prompt a completion at ``req`` would use into the prefix cache, answering nothing:
        the KV of the context and the window is paid before the user asks (a document opened, typing
        paused, the cursor settled). Small prefill slices, so a real request (which sets ``cancel``)
        waits at most one slice; what was prefilled before the cancel is kept. Returns the tokens
        prefilled (0: all cached already, no completion possible there, or cancelled)."""
        if not 0 <= req.offset <= len(req.text) or (cancel is not None and cancel.is_set()):
            return 0
        from dspark_lsp.syntax import Scope, SyntaxDocument, detect_language

        doc = SyntaxDocument(req.text, detect_language(req.path, req.language_id))
        if decide_scope(doc, req.offset, self.config.multiline) is Scope.NONE:
            return 0
        fp = self._prompt(req, doc)
        config = replace(self.config.decode_config(None, self.verify_cost_ms, self.pad_to), max_new_tokens=0,
                         prefill_chunk=WARM_CHUNK)
        res = self.decoder.generate(fp.ids, config=config, draft=self.draft, cancel=cancel)
        done = 0 if res.stats.stop_reason == "cancelled" else int(res.stats.prefill_tokens)
        self.warmed_tokens += done
        return done

    def _prompt(self, req: CompletionRequest, doc: Any) -> FimPrompt:
        cfg = self.config
        context = None
        if req.context and cfg.context_budget > 0:
            fmt = self.repo_format
            if not fmt.native:  # the plain fallback heads each piece with a comment of the file's language
                fmt = replace(fmt, comment=(doc.spec.line_comment if doc.spec else None) or "#")
            name = req.prompt_path or (req.path.replace("\\", "/").rsplit("/", 1)[-1] if req.path else "")
            context = PromptContext(req.context, cfg.context_budget, name, req.repo_name or "", fmt)
        return build_fim_prompt(req.text, req.offset, self.tokenizer, self.fim, context_window=cfg.context_window,
                                prefix_share=cfg.prefix_share, context=context,
                                order=cfg.fim_order)  # type: ignore[arg-type]

    def complete(
        self,
        req: CompletionRequest,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> CompletionResult:
        prep = self._prepare(req)
        if isinstance(prep, CompletionResult):
            return prep
        cfg, fp, tracker = self.config, prep.fp, prep.tracker
        decode_text = self._decoder_text()

        def is_key(ids: list[int]) -> bool:
            return bool(tracker.is_key_next(decode_text(ids)))

        def stop(ids: list[int]) -> bool:
            return tracker.stop_index(decode_text(ids)) is not None

        def on_tokens(ids: list[int]) -> None:
            if on_text is not None:
                on_text(decode_text(ids))

        draft = self.draft
        set_lookup_corpus(draft, lambda: outside_window_ids(req.text, req.offset, fp, self.tokenizer))
        res = self.decoder.generate(
            fp.ids,
            config=cfg.decode_config(req.max_new_tokens, self.verify_cost_ms, self.pad_to),
            draft=draft,
            # A FIM marker in the output means the model thinks the middle is over.
            eos_ids=(*self.fim.eos_ids, self.fim.prefix_id, self.fim.suffix_id, self.fim.middle_id),
            is_key=is_key,
            stop=stop,
            on_tokens=on_tokens if on_text is not None else None,
            cancel=cancel,
            scheduler_state=self._sched_state.get(req.doc_key),
        )
        if res.scheduler_state is not None:
            self._sched_state[req.doc_key] = res.scheduler_state
            self._sched_state.move_to_end(req.doc_key)
            while len(self._sched_state) > self.SHOWN_CACHE:
                self._sched_state.popitem(last=False)
        full_text = decode_text(res.tokens)
        text, cut = finish_text(tracker, full_text, prep.after, capped=res.stats.stop_reason == "max_tokens")
        ids = _ids_covering(res.tokens, len(text), decode_text)
        st = res.stats
        # "gguf": the target computes from its GGUF's quantized blocks; else its torch dtype
        stats = CompletionStats.from_decode(st, latency_ms=prep.elapsed_ms(), draft=getattr(draft, "name", "none"),
                                            weights=self.weights)
        cancelled = st.stop_reason == "cancelled"
        return self._finish(prep, text, ids, stats, scope=tracker.scope.value, cancelled=cancelled,
                            stop_reason=st.stop_reason if cut is None or cancelled else "syntax")

    def _finish(self, prep: _Prepared, text: str, ids: list[int], stats: CompletionStats, *, scope: str,
                cancelled: bool, stop_reason: str) -> CompletionResult:
        """What every backend does last: the result; remembered for typing through it, and recorded."""
        result = CompletionResult(text=text, prompt=prep.fp.text, completion_ids=ids, scope=scope, stats=stats,
                                  cancelled=cancelled, stop_reason=stop_reason)
        if self.config.completion_cache and not cancelled and text:
            self._remember(prep.req.doc_key, _Shown(prep.before, prep.after, text, ids, prep.fp.text, scope))
        self._record(prep.req, result)
        return result

    # ------------------------------------------------------------------------------------ helpers
    def _decoder_text(self) -> Callable[[list[int]], str]:
        tok = self.tokenizer

        def decode(ids: list[int]) -> str:
            text = str(tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
            # A multi-byte character split across tokens decodes to U+FFFD until its last byte arrives;
            # never show (or judge syntax on) half a character.
            return text.rstrip("\ufffd")

        return decode

    def _remember(self, key: str, shown: _Shown) -> None:
        with self._lock:
            entries = self._shown.setdefault(key, [])
            entries.append(shown)
            del entries[:-4]
            self._shown.move_to_end(key)
            while sum(len(v) for v in self._shown.values()) > self.SHOWN_CACHE:
                self._shown.popitem(last=False)

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


def decide_scope(doc: Any, offset: int, multiline: str) -> Any:
    """The syntax layer's scope at ``offset`` (a ``Scope``), overridden by the ``multiline`` setting."""
    from dspark_lsp.syntax import Scope

    scope = doc.completion_scope(offset)
    if multiline == "always" and scope is not Scope.NONE:
        return Scope.MULTI_LINE
    if multiline == "never" and scope is Scope.MULTI_LINE:
        return Scope.SINGLE_LINE
    return scope


def finish_text(tracker: Any, full_text: str, after: str, capped: bool = False) -> tuple[str, int | None]:
    """What the user is shown of the decoded ``full_text``: cut where the stop rules say (the cut index,
    or None), then cleaned against the text after the cursor. `eval --rescore` re-runs this offline.
    The clean-up follows the scope the completion ended with (``tracker.scope``: a single-line one may
    have continued onto the next lines). ``capped``: the token budget ended the decode (a multi-line
    completion then drops a last line the budget cut short)."""
    cut = tracker.stop_index(full_text, final=True, capped=capped)
    text = full_text if cut is None else full_text[:cut]
    return _clean(text, after, tracker.scope.value, tracker.line_before), cut


def _clean(text: str, after: str, scope: str, line_before: str = "") -> str:
    """Drop what would duplicate the text right after the cursor, and trailing blank space.

    On a single line, an ending equal to the rest of the line is dropped unless the brackets say it is
    the completion's own: kept, the line balances; dropped, it would not. The stop rules have often cut
    the re-typed rest already, and dropping the same closer again broke the line (``len(`` +
    ``set(s.lower())`` -> ``set(s.lower()``; eval, HumanEval/16 and /116)."""
    from dspark_lsp.syntax.stops import brackets_balanced
    from dspark_lsp.syntax.textutil import is_word_char

    line_rest = after.split("\n", 1)[0].rstrip("\r")
    if scope == "single_line":
        text = text.split("\n", 1)[0].rstrip("\r")
        stripped = line_rest.strip()
        if stripped and text.rstrip().endswith(stripped):
            kept = text.rstrip()[: len(text.rstrip()) - len(stripped)]
            own = brackets_balanced(line_before + text + line_rest) and not brackets_balanced(
                line_before + kept + line_rest
            )
            if not own:
                text = kept
        if line_rest[:1] and is_word_char(line_rest[0]) and text[-1:] and is_word_char(text[-1]):
            return ""  # it would run into the word after the cursor (``x`` + ``foo`` -> ``xfoo``)
        return text.rstrip() if not line_rest.strip() else text
    return text.rstrip()


def _ids_covering(ids: list[int], n_chars: int, decode: Callable[[list[int]], str]) -> list[int]:
    """The shortest prefix of ``ids`` whose text covers the first ``n_chars`` characters."""
    if n_chars <= 0:
        return []
    for n in range(1, len(ids) + 1):
        if len(decode(ids[:n])) >= n_chars:
            return ids[:n]
    return list(ids)


def set_lookup_corpus(draft: DraftSource | None, corpus: Callable[[], list[int]]) -> None:
    """Let the draft's n-gram lookup (if it drafts with one) also search ``corpus()``: for a completion,
    the document outside the prompt window. ``corpus`` is called only when there is a lookup to take it.
    The benchmarks set their drafts up through this too."""
    if draft is not None:
        draft.set_corpus(corpus)


__all__ = [
    "CompletionRequest",
    "CompletionResult",
    "CompletionService",
    "ServiceConfig",
]

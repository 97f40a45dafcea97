"""What every way of decoding a completion shares, and the :class:`Decoder` protocol they implement.

The completion pipeline (dspark_lsp.service.CompletionService: prompt, syntax scope, caches, records,
clean-up) hands a prepared request to a decoder: the local engine (local_decoder.LocalDecoder) or an
OpenAI-compatible server (remote.service.RemoteDecoder). Both import this module and the remote one
never imports the service, which chooses between them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

from dspark_lsp.contract import CompletionRequest, CompletionStats
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.prompt import FimPrompt
from dspark_lsp.remote.config import RemoteSettings
from dspark_lsp.settings_schema import BY_NAME, LSP_ONLY, SERVICE_FIELDS, config_problems

Progress = Callable[[str, float | None], None]


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
    # An automatic request answers with the lines finished once this many ms have passed (0: never
    # early); the rest is decoded in the background for typing through / accepting it (quick_answer.py).
    quick_answer_ms: int = 200
    # 768 + 256 of other files, suffix ~10%: chosen on the repository-level set (eval --repo, 300 holes:
    # exact match 0.253 -> 0.307 against 256 tokens of the file alone, docs/CONTEXT.md) and the typing
    # replay (a small suffix is what a keystroke re-prefills; prefixShare 0.94 matched 0.75 at 1,024 tokens
    # on 60 holes).
    context_window: int = 768
    prefix_share: float = 0.9
    # Tokens of other files' context (open documents' chunks, imported definitions) before the FIM part,
    # on top of context_window (what they leave unused widens the window); 0 = none. Which sources feed
    # it: context_open_files / _definitions (in context_definition_languages).
    context_budget: int = 256
    # Sources on by default only where they earned it on eval --repo (2026-12-04, docs/CONTEXT.md):
    # definitions in Python and Go; open-document chunks nowhere. What the sources leave unused goes to the window.
    context_open_files: bool = False
    context_definitions: bool = True
    context_definition_languages: str = "python,go"
    # The FIM arrangement: spm (suffix first: typing changes only the prompt's end, so mid-file only the
    # typed tokens are prefilled) or psm (prefix, suffix, middle). spm with token healing (back off the
    # prompt's last token, engine.healing) beat psm on both sets: repository set exact match 0.550 vs 0.333,
    # and HumanEval (bench/results/2026-12-06-token-healing/). Without healing spm loses mid-line (0.175).
    fim_order: str = "spm"
    token_healing: bool = True
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
    # CPU threads for the local engine's forwards; 0 = all the cores torch found, dropping to fewer while
    # other programs keep a core busy (engine/cpu_share.py). A number fixes the count.
    threads: int = 0
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
class Shown:
    """A completion the editor may be showing: typing through it is answered without the model."""

    before: str  # document text before the cursor when it was computed
    after: str  # document text after the cursor
    text: str
    ids: list[int]
    prompt: str
    scope: str


@dataclass
class Prepared:
    """A request that needs the model (local or remote): not answered from the typed-through cache, not
    out of scope. ``scope`` is a syntax Scope, ``tracker`` its generation tracker (syntax is imported
    lazily, so both stay untyped here). CompletionService makes one (``_prepare``) and hands it to its
    Decoder, whose answer it finishes (``_finish``)."""

    req: CompletionRequest
    t0: float
    before: str
    after: str
    scope: Any
    fp: FimPrompt
    tracker: Any
    # The target's outputs for this document's last requests, oldest first, each after its prompt's last
    # tokens before the cursor; ``anchor``: this prompt's (engine.draft.RecentOutputs).
    recent: tuple[tuple[int, ...], ...] = ()
    anchor: tuple[int, ...] = ()
    # perf_counter time from which the decode may answer with its finished lines (quickAnswerMs); None:
    # the whole completion.
    deadline: float | None = None

    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self.t0) * 1000, 2)


def stop_ids(fim: Any) -> tuple[int, ...]:
    """The ids a completion stops at (``fim`` a models.fim.FimTokens): the end-of-text ids and the FIM
    markers (a FIM marker in the output means the model thinks the middle is over). Defined once, for
    the local decode, the stop ids sent to a server, and the benchmark's reference."""
    return tuple(dict.fromkeys((*fim.eos_ids, fim.prefix_id, fim.suffix_id, fim.middle_id)))


@dataclass
class Decoded:
    """What a decoder made of a prepared request: the shown text (cut and cleaned), the ids covering it,
    its figures, the scope it ended with, and how it ended; ``scheduler_state``: what the local
    scheduler learnt for the document (None: nothing to keep)."""

    text: str
    ids: list[int]
    stats: CompletionStats
    scope: str
    cancelled: bool
    stop_reason: str
    scheduler_state: tuple[float, ...] | None = None
    # Every token the decoder produced, before the stop rules' cut (the local engine's; empty for a
    # server): kept per document as the next requests' lookup corpus.
    raw_ids: list[int] = field(default_factory=list)


class Decoder(Protocol):
    """Decodes a prepared request; the pipeline around it is CompletionService's.

    ``weights``: what the figures call its weights ("gguf", a torch dtype, or "remote"); ``target`` and
    ``draft``: the local models (None for a server)."""

    weights: str
    target: Any
    draft: Any

    def decode(self, prep: Prepared, config: ServiceConfig, decode_text: Callable[[list[int]], str], *,
               scheduler_state: tuple[float, ...] | None, cancel: Any, on_text: Callable[[str], None] | None
               ) -> Decoded:
        """Decode ``prep`` under ``config``; ``cancel`` a threading.Event or None; ``on_text`` gets the
        text so far as it grows."""
        ...

    def warm(self, fp: FimPrompt, config: ServiceConfig, cancel: Any, *, keep_current: bool = False) -> int:
        """Prefill ``fp`` ahead of a request where that means anything; the tokens prefilled.
        ``keep_current``: ``fp`` is a second prompt of the document; leave the cached KV of the first."""
        ...

    def configure(self, config: ServiceConfig) -> None:
        """The decode knobs changed (models stay loaded)."""
        ...

    def close(self) -> None: ...



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


def ids_covering(ids: list[int], n_chars: int, decode: Callable[[list[int]], str]) -> list[int]:
    """The shortest prefix of ``ids`` whose text covers the first ``n_chars`` characters."""
    if n_chars <= 0:
        return []
    for n in range(1, len(ids) + 1):
        if len(decode(ids[:n])) >= n_chars:
            return ids[:n]
    return list(ids)

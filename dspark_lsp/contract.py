"""The service contract: what a completion service is asked, what it answers, and its figures' wire form.

Torch-free (it imports nothing of the engine, the models or the syntax layer at run time), so the
language server, the CLI, the test fakes and the benchmarks' clients share these types without paying
for torch. ``dspark_lsp.service`` (the local engine) and ``dspark_lsp.remote.service`` (an
OpenAI-compatible server) answer with them; the LSP layer reads them (``lsp/backend.ServiceLike``).

* `CompletionRequest`: a document, a cursor offset (code points) and where the document lives.
* `CompletionResult`: the text to show and how it ended; its `stats` are a `CompletionStats`.
* `CompletionStats`: every per-request figure a service reports, one typed field each, built once
  (`from_decode` for the local engine's `DecodeStats`). `to_json` / `from_json` are its one wire form:
  what `dspark/stats`, `dspark-lsp complete --json` and `recent_stats()` carry. A figure that is not
  reported is None and absent from the wire form (a remote answer's `first_text_ms`, `finish_reason` and
  `served_model` are sent as null instead: the server did not say). Figures a service reports outside
  the declared ones (the test fake's) travel in `extra`.
* `ServiceRecord`: one entry of a service's `recent_stats()` (dspark/stats' "service" list): the result's
  flags and its stats' scalar figures, flat.

The stats also read as a read-only mapping of their wire form (``stats["tokens"]``, ``"speedup" in
stats``) for scripts and tests that index them; code in this package uses the attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from dspark_lsp.context.types import ContextFile

if TYPE_CHECKING:
    from dspark_lsp.engine.stats import DecodeStats


@dataclass
class CompletionRequest:
    text: str
    offset: int  # code points into `text`
    language_id: str | None = None
    path: str | None = None
    doc_key: str = ""  # the document's identity for per-document state (the LSP layer: its URI)
    max_new_tokens: int | None = None
    # Other files' pieces for the prompt (dspark_lsp.context.gather), least important first; the
    # service keeps what fits its contextBudget. Empty: the prompt holds the current file only.
    context: tuple[ContextFile, ...] = ()
    repo_name: str | None = None  # the repository's name in the prompt (the workspace folder's name)
    prompt_path: str | None = None  # the current file's name in the prompt (workspace-relative)
    # Asked by the editor as the user types (LSP triggerKind Automatic), not by a keybinding: such a
    # request may be answered early with its finished lines (the quickAnswerMs setting).
    automatic: bool = False


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# A declared field's annotation -> what a wire value for it must be (None is always allowed: not reported).
_CHECKS: dict[str, Callable[[object], bool]] = {
    "int | None": _is_int,
    "float | None": _is_num,
    "str | None": lambda v: isinstance(v, str),
    "list[int] | None": lambda v: isinstance(v, list) and all(_is_int(x) for x in v),
    "list[float] | None": lambda v: isinstance(v, list) and all(_is_num(x) for x in v),
}

# Sent (as null when unknown) whenever the answer came from a remote server (`backend` set).
_REMOTE_ALWAYS = ("first_text_ms", "finish_reason", "served_model")


@dataclass
class CompletionStats(Mapping[str, Any]):
    """One request's figures. Wire names are the field names; None = not reported (absent on the wire)."""

    latency_ms: float | None = None  # request in -> result out, inside the service
    tokens: int | None = None  # tokens decoded (remote: the server's usage count, when it sends one)
    seconds: float | None = None  # the decode's own time
    prompt_tokens: int | None = None
    prefill_tokens: int | None = None
    reused_tokens: int | None = None  # prompt tokens whose KV came from the prefix cache
    resumed_tokens: int | None = None  # prefilled tokens finished from a stopped warm-up's layers
    target_forwards: int | None = None
    draft_forwards: int | None = None
    accepted_per_forward: float | None = None  # tokens per target forward
    proposed: int | None = None
    accepted: int | None = None
    k_trace: list[int] | None = None
    tau_trace: list[float] | None = None
    t_prefill_ms: float | None = None
    t_draft_ms: float | None = None
    t_verify_ms: float | None = None
    t_other_ms: float | None = None
    draft: str | None = None  # the draft source's name; "remote" for a server's answer
    weights: str | None = None  # "gguf", a torch dtype, or "remote"
    threads: int | None = None  # CPU threads the local engine ran with (engine/cpu_share.py)
    # The speed-up status bars show: tokens per target forward (see from_decode); absent when nothing
    # was decoded or no model ran.
    speedup: float | None = None
    # A remote server's answer (dspark_lsp.remote): ms to its first text, its finish_reason, its URL and
    # the model it served.
    first_text_ms: float | None = None
    finish_reason: str | None = None
    backend: str | None = None
    served_model: str | None = None
    # Answered from the typed-through cache: how many characters of the shown completion were typed.
    typed_through: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        clash = set(self.extra) & set(_FIELDS)
        if clash:
            raise ValueError(f"extra figures {sorted(clash)} shadow declared ones")

    # ------------------------------------------------------------------------------------ building
    @classmethod
    def from_decode(cls, st: DecodeStats, *, latency_ms: float, draft: str, weights: str,
                    threads: int | None = None) -> CompletionStats:
        """The local engine's figures for one completion, from its decode's `DecodeStats`."""
        per_forward = round(st.tokens_per_forward, 3)
        return cls(
            latency_ms=round(latency_ms, 2),
            tokens=st.new_tokens,
            seconds=round(st.t_total, 4),
            prompt_tokens=st.prompt_tokens,
            prefill_tokens=st.prefill_tokens,
            reused_tokens=st.reused_tokens,
            resumed_tokens=st.resumed_tokens,
            target_forwards=st.target_forwards,
            draft_forwards=st.draft_forwards,
            accepted_per_forward=per_forward,
            proposed=st.proposed,
            accepted=st.accepted,
            k_trace=list(st.k_trace),
            tau_trace=list(st.tau_trace),
            t_prefill_ms=round(st.t_prefill * 1000, 2),
            t_draft_ms=round(st.t_draft * 1000, 2),
            t_verify_ms=round(st.t_verify * 1000, 2),
            t_other_ms=round(st.t_other * 1000, 2),
            draft=draft,
            weights=weights,
            threads=threads,
            # The target alone runs one forward per token (the prefill counts once and yields the
            # first), so forwards saved = tokens per target forward. It counts forwards, not seconds (a
            # verify forward of several tokens costs more than a 1-token one, engine.costs), so the
            # wall-clock gain is at most this. Absent when nothing was decoded.
            speedup=per_forward if st.new_tokens > 0 and st.target_forwards > 0 else None,
        )

    # ----------------------------------------------------------------------------------- wire form
    def to_json(self) -> dict[str, Any]:
        """The wire form: the reported figures (lists copied), then `extra`."""
        remote = self.backend is not None
        out: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not None or (remote and name in _REMOTE_ALWAYS):
                out[name] = list(value) if isinstance(value, list) else value
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompletionStats:
        """The inverse of `to_json`: declared figures type-checked (ValueError), the rest into `extra`."""
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            check = _FIELDS.get(key)
            if check is None:
                extra[key] = value
            elif value is None or check(value):
                known[key] = list(value) if isinstance(value, list) else value
            else:
                raise ValueError(f"stats figure {key}={value!r} is not {_TYPES[key].removesuffix(' | None')}")
        return cls(**known, extra=extra)

    def scalars(self) -> dict[str, Any]:
        """The wire form without the per-round lists (what per-request records keep)."""
        return {k: v for k, v in self.to_json().items() if not isinstance(v, list)}

    def without_lists(self) -> CompletionStats:
        """A copy holding only what `scalars` reports (a record keeps no per-round traces)."""
        extra = {k: v for k, v in self.extra.items() if not isinstance(v, list)}
        return replace(self, k_trace=None, tau_trace=None, extra=extra)

    # ---------------------------------------------------- read-only mapping view of the wire form
    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())


_TYPES: dict[str, str] = {f.name: str(f.type) for f in fields(CompletionStats) if f.name != "extra"}
_FIELDS: dict[str, Callable[[object], bool]] = {name: _CHECKS[t] for name, t in _TYPES.items()}
STATS_FIELDS: tuple[str, ...] = tuple(_FIELDS)

# The result's own flags, beside its stats in every per-request record.
RESULT_FLAGS = ("from_cache", "stop_reason", "scope", "cancelled")


@dataclass
class CompletionResult:
    text: str
    prompt: str
    completion_ids: list[int]
    scope: str  # a syntax Scope's value: "single_line", "multi_line", "none"
    stats: CompletionStats = field(default_factory=CompletionStats)
    cancelled: bool = False
    stop_reason: str = ""
    from_cache: bool = False  # answered from the typed-through cache: no model ran

    def record(self, doc_key: str) -> ServiceRecord:
        """This result as an entry of the service's `recent_stats()` (a copy of its stats' scalars)."""
        return ServiceRecord(
            doc=doc_key, chars=len(self.text), scope=self.scope, from_cache=self.from_cache,
            cancelled=self.cancelled, stop_reason=self.stop_reason, stats=self.stats.without_lists(),
        )

    def figures(self) -> dict[str, Any]:
        """The stats' scalar figures and the result's flags, flat (the worker's per-request record)."""
        out = self.stats.scalars()
        out.update({name: getattr(self, name) for name in RESULT_FLAGS})
        return out


@dataclass
class ServiceRecord:
    """One entry of `recent_stats()` (dspark/stats' "service" list)."""

    doc: str
    chars: int
    scope: str
    from_cache: bool
    cancelled: bool
    stop_reason: str
    stats: CompletionStats = field(default_factory=CompletionStats)

    def __post_init__(self) -> None:
        clash = set(self.stats.extra) & set(RECORD_FLAGS)
        if clash:
            raise ValueError(f"extra figures {sorted(clash)} shadow the record's own fields")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "doc": self.doc, "chars": self.chars, "scope": self.scope, "from_cache": self.from_cache,
            "cancelled": self.cancelled, "stop_reason": self.stop_reason,
        }
        out.update(self.stats.scalars())
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServiceRecord:
        """The inverse of `to_json` (ValueError when a field is missing or of the wrong type)."""
        flags: dict[str, Any] = {name: data.get(name) for name in RECORD_FLAGS}
        for name, kind in RECORD_FLAGS.items():
            value = flags[name]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ValueError(f"service record field {name}={value!r} is not {kind.__name__}")
        stats = CompletionStats.from_json({k: v for k, v in data.items() if k not in RECORD_FLAGS})
        return cls(stats=stats, **flags)


RECORD_FLAGS: dict[str, type] = {
    "doc": str, "chars": int, "scope": str, "from_cache": bool, "cancelled": bool, "stop_reason": str,
}
# A `ServiceRecord` on the wire (`to_json()`): what `recent_stats()` returns and dspark/stats sends as
# is. Its keys beyond RECORD_FLAGS are the stats' declared figures, so `from_json` is its type check.
ServiceRecordWire = dict[str, Any]


def as_result(answer: object) -> CompletionResult:
    """What a service answered, as a `CompletionResult`: the object itself when it is one. A service
    outside the contract (a test double with some of the attributes) is read through it once here; its
    dict stats through `CompletionStats.from_json` (figures of the wrong type: none)."""
    if isinstance(answer, CompletionResult):
        return answer
    stats = getattr(answer, "stats", None)
    if not isinstance(stats, CompletionStats):
        try:
            stats = CompletionStats.from_json(stats) if isinstance(stats, Mapping) else CompletionStats()
        except ValueError:
            stats = CompletionStats()
    ids = getattr(answer, "completion_ids", None)
    return CompletionResult(
        text=str(getattr(answer, "text", "") or ""),
        prompt=str(getattr(answer, "prompt", "") or ""),
        completion_ids=list(ids) if isinstance(ids, list) else [],
        scope=str(getattr(answer, "scope", "") or ""),
        stats=stats,
        cancelled=bool(getattr(answer, "cancelled", False)),
        stop_reason=str(getattr(answer, "stop_reason", "") or ""),
        from_cache=bool(getattr(answer, "from_cache", False)),
    )


__all__ = [
    "RECORD_FLAGS",
    "RESULT_FLAGS",
    "STATS_FIELDS",
    "CompletionRequest",
    "CompletionResult",
    "CompletionStats",
    "ServiceRecord",
    "ServiceRecordWire",
    "as_result",
]

"""Runs completions off the event loop: debounce, cancel-previous per document, $/cancelRequest.

A request gets a `Cancellation`; a newer request on the same document cancels the older one (its
debounce wakes at once, its decode stops at the next round because the service polls the
threading.Event). The superseded request answers with an empty result rather than an error: the editor
has already moved on and an error would only be noise in its log. `$/cancelRequest` cancels the
asyncio task (pygls then answers RequestCancelled); we translate that into the same event so a running
decode stops too.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from dspark_lsp.contract import CompletionRequest, CompletionResult, as_result
from dspark_lsp.errors import UserError
from dspark_lsp.lsp import memory
from dspark_lsp.lsp.backend import ServiceLike
from dspark_lsp.lsp.loader import ModelManager

log = logging.getLogger(__name__)

RECENT = 100  # per-request records kept for dspark/stats


class Cancellation:
    """A cancel flag visible to both the event loop (awaitable) and the worker thread (polled)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._wake = asyncio.Event()  # created on the loop: only the loop may set/await it

    @property
    def cancelled(self) -> bool:
        return self.event.is_set()

    def cancel(self) -> None:
        self.event.set()
        self._wake.set()

    async def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True if cancelled meanwhile (returns as soon as it is)."""
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass
        return self.cancelled


@dataclass
class Outcome:
    """What a completion request ended as. `text` is empty unless status == "ok"."""

    status: str  # ok | empty | superseded | cancelled | not_ready | error
    text: str = ""
    result: CompletionResult | None = None
    latency_ms: float = 0.0
    detail: str = ""


@dataclass
class _Record:
    uri: str
    status: str
    latency_ms: float
    debounce_ms: int
    chars: int
    service: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "status": self.status,
            "latencyMs": round(self.latency_ms, 2),
            "debounceMs": self.debounce_ms,
            "chars": self.chars,
            "service": self.service,
        }


class CompletionWorker:
    def __init__(self, models: ModelManager, executor: Executor) -> None:
        self._models = models
        self._executor = executor
        self._active: dict[str, Cancellation] = {}
        self._warming: threading.Event | None = None  # the background warm-up queued or running
        self.warm_log: deque[tuple[int, float]] = deque(maxlen=RECENT)  # (tokens, ms) of finished warm-ups
        self.counters: Counter[str] = Counter()
        self.records: deque[_Record] = deque(maxlen=RECENT)
        self.on_done: Callable[[Outcome], None] | None = None

    # -- loop thread ---------------------------------------------------------------------------
    def cancel_document(self, uri: str) -> None:
        if (old := self._active.pop(uri, None)) is not None:
            old.cancel()

    def warm(self, uri: str, make_request: Callable[[], CompletionRequest], *, finish_only: bool = False) -> bool:
        """Loop thread: queue a background prefill of the prompt ``make_request`` builds (lsp/warm.py),
        unless a completion is active or waiting (it goes first) or the service cannot warm. Any
        completion request cancels it (``run``). True when queued. ``finish_only``: only decode on an
        answer given early there (the service's finish_early_answer), no prefill."""
        service = self._models.service
        warm = getattr(service, "finish_early_answer" if finish_only else "warm", None)
        if self._active or not callable(warm):
            return False
        self.cancel_warm()
        try:
            request = make_request()
        except UserError as exc:
            log.debug("no warm-up for %s: %s", uri, exc)
            return False
        event = threading.Event()
        self._warming = event
        self.counters["warm"] += 1
        job = self._executor.submit(_warm, warm, request, event)
        job.add_done_callback(self._warm_done)
        return True

    def _warm_done(self, job: Future[Any]) -> None:
        """Worker thread: what a warm-up did, for dspark/stats' "warm" (the replay reports it)."""
        if job.cancelled() or job.exception() is not None:
            return
        tokens, ms = job.result()
        if tokens:
            self.warm_log.append((tokens, ms))

    def cancel_warm(self) -> None:
        if self._warming is not None:
            self._warming.set()
            self._warming = None

    def cancel_all(self) -> None:
        self.cancel_warm()
        for cancellation in self._active.values():
            cancellation.cancel()
        self._active.clear()

    async def run(
        self,
        uri: str,
        make_request: Callable[[], CompletionRequest],
        debounce_ms: int,
    ) -> Outcome:
        """Debounce, then complete on the worker thread. Never raises except CancelledError."""
        started = time.perf_counter()
        self.counters["requests"] += 1
        self.cancel_warm()  # a real request never waits behind a guess
        self.cancel_document(uri)  # cancel-previous: the user typed on, the old answer is stale
        cancellation = Cancellation()
        self._active[uri] = cancellation
        outcome = Outcome("error")
        try:
            outcome = await self._run(cancellation, make_request, debounce_ms)
            return outcome
        except asyncio.CancelledError:  # $/cancelRequest or shutdown
            cancellation.cancel()
            outcome = Outcome("cancelled")
            raise
        finally:
            if self._active.get(uri) is cancellation:
                del self._active[uri]
            outcome.latency_ms = (time.perf_counter() - started) * 1000
            self.counters[outcome.status] += 1
            self.records.append(
                _Record(
                    uri,
                    outcome.status,
                    outcome.latency_ms,
                    debounce_ms,
                    len(outcome.text),
                    outcome.result.figures() if outcome.result is not None else {},
                )
            )
            if self.on_done is not None:
                try:
                    self.on_done(outcome)
                except Exception:
                    log.debug("on_done hook failed", exc_info=True)

    async def _run(
        self, cancellation: Cancellation, make_request: Callable[[], CompletionRequest], debounce_ms: int
    ) -> Outcome:
        if debounce_ms > 0 and await cancellation.wait(debounce_ms / 1000):
            return Outcome("superseded")
        if cancellation.cancelled:
            return Outcome("superseded")
        service = self._models.service
        if service is None:
            return Outcome("not_ready", detail=self._models.state)
        try:
            request = make_request()
        except UserError as exc:
            log.warning("cannot complete: %s", exc)
            return Outcome("error", detail=str(exc))
        job = self._executor.submit(_complete, service, request, cancellation.event)
        answer = asyncio.wrap_future(job)  # first: the loop hears of the result before the trim runs
        if memory.enabled():
            # On the job's end, not on this coroutine's: a request the editor cancelled ($/cancelRequest,
            # this task cancelled) still ran its prefill. Under load nearly every request ends so.
            job.add_done_callback(self._release_memory)
        answered = await answer
        if isinstance(answered, Outcome):
            return answered
        result = as_result(answered)  # the service's answer read once, in the contract's types
        if cancellation.cancelled or result.cancelled:
            return Outcome("superseded", result=result)
        return Outcome("ok" if result.text else "empty", text=result.text, result=result)

    def _release_memory(self, job: Future[Any]) -> None:
        """When a completion job that ran the model ends (worker thread): queue malloc_trim behind it
        (memory.py). It runs after the answer went to the loop, and only if no other job waits."""
        if job.cancelled() or job.exception() is not None:
            return
        result = job.result()
        if getattr(result, "from_cache", False) or (isinstance(result, Outcome) and result.status == "superseded"):
            return  # typed through a shown completion, or never started: the model did not run
        try:
            self._executor.submit(_trim_when_idle, self._executor)
        except RuntimeError:  # shut down meanwhile
            pass

    def _warm_stats(self) -> dict[str, Any]:
        return _warm_stats_of(self.warm_log, self.counters["warm"])

    def stats(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "warm": self._warm_stats(),
            "requests": [r.as_dict() for r in self.records],
            "peakRssKb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "mallocTrim": {
                "enabled": memory.enabled(),
                "trims": memory.totals["trims"],
                "ms": round(memory.totals["seconds"] * 1000, 1),
            },
        }


def _warm_stats_of(log_: deque[tuple[int, float]], queued: int) -> dict[str, Any]:
    done = list(log_)
    ms = sorted(m for _, m in done)
    return {"queued": queued, "finished": len(done), "tokens": sum(t for t, _ in done),
            "p50Ms": round(ms[len(ms) // 2], 1) if ms else None, "maxMs": round(ms[-1], 1) if ms else None}


def _trim_when_idle(executor: Executor) -> None:
    """Worker-thread body: malloc_trim unless a job waits (the next completion goes first; it trims too)."""
    queued = getattr(executor, "queued", None)
    if queued is not None and queued() > 0:
        return
    memory.release_free_memory()


def _complete(service: ServiceLike, request: CompletionRequest, cancel: threading.Event) -> CompletionResult | Outcome:
    """Worker-thread body. A job cancelled while it waited in the queue never starts decoding."""
    if cancel.is_set():
        return Outcome("superseded")
    try:
        return service.complete(request, cancel)
    except UserError as exc:
        log.warning("completion failed: %s", exc)
        return Outcome("error", detail=str(exc))
    except Exception as exc:  # a decode bug must cost one empty answer, not the server
        log.exception("completion failed")
        return Outcome("error", detail=f"{type(exc).__name__}: {exc}")


def _warm(warm: Callable[..., int], request: CompletionRequest, cancel: threading.Event) -> tuple[int, float]:
    """Worker-thread body of a warm-up: (tokens prefilled, ms). A failure costs the warm-up only (logged),
    never the worker."""
    if cancel.is_set():
        return 0, 0.0
    t0 = time.perf_counter()
    try:
        tokens = int(warm(request, cancel))
    except Exception:
        log.exception("warm-up failed")
        return 0, 0.0
    ms = (time.perf_counter() - t0) * 1000
    if tokens:
        log.debug("warmed %d prompt tokens of %s in %.0f ms", tokens, request.doc_key, ms)
    return tokens, ms

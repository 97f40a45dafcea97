"""Loads the completion service in the background and swaps it on a model change.

All service calls (load, complete, update_config, close) run on ONE worker thread (`executor`): the
models are CPU-bound and not shared safely between threads, and serialising them gives a simple
ordering guarantee — an old service is closed only after the decode that was using it has returned,
and a new one is loaded only after the old one's memory is released.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Executor
from typing import TYPE_CHECKING

from lsprotocol import types

from dspark_lsp.errors import UserError
from dspark_lsp.lsp.backend import Backend, ServiceLike
from dspark_lsp.lsp.channel import Channel

if TYPE_CHECKING:
    from dspark_lsp.service import ServiceConfig

log = logging.getLogger(__name__)

# States reported in dspark/status.
IDLE, LOADING, READY, ERROR, DISABLED = "idle", "loading", "ready", "error", "disabled"


class ModelManager:
    def __init__(self, backend: Backend, executor: Executor, channel: Channel) -> None:
        self._backend = backend
        self._executor = executor
        self._channel = channel
        self._lock = threading.Lock()
        self._generation = 0  # bumped by every (re)load request; a finished load that is stale is dropped
        self.state = IDLE
        self.message = ""
        self.service: ServiceLike | None = None
        self.loaded_config: ServiceConfig | None = None
        self.closing = False
        self._pending_config: ServiceConfig | None = None  # the config of the load that is queued or running

    # -- called on the event loop ------------------------------------------------------------
    def apply(self, config: ServiceConfig, enable: bool) -> None:
        """Bring the service in line with `config`: load, reload, update knobs, or disable."""
        if self.closing:
            return
        if not enable:
            with self._lock:
                self._generation += 1
                old, self.service = self.service, None
                self.loaded_config = None
            self._set_state(DISABLED, "completions disabled by the dspark.enable setting")
            if old is not None:
                self._executor.submit(self._close, old)
            return
        with self._lock:
            service, loaded, pending = self.service, self.loaded_config, self._pending_config
            if service is not None and loaded is not None and not loaded.needs_reload(config):
                self.loaded_config = config
                update: ServiceLike | None = service
            elif service is None and pending is not None and not pending.needs_reload(config):
                # A load of the same models is already queued: it will pick up the newer knobs.
                self._pending_config = config
                return
            else:
                update = None
        if update is not None:
            self._executor.submit(self._update, update, config)
            return
        self._start_load(config)

    def _start_load(self, config: ServiceConfig) -> None:
        with self._lock:
            self._generation += 1
            generation = self._generation
            old, self.service = self.service, None
            self.loaded_config = None
            self._pending_config = config
        self._set_state(LOADING, "loading models")
        if old is not None:
            self._executor.submit(self._close, old)
        self._executor.submit(self._load, generation)

    def shutdown(self) -> None:
        """Stop accepting work; the service is closed on the worker after any running call."""
        with self._lock:
            self.closing = True
            self._generation += 1
            old, self.service = self.service, None
        if old is not None:
            try:
                self._executor.submit(self._close, old)
            except RuntimeError:  # executor already shut down
                self._close(old)

    # -- worker thread -------------------------------------------------------------------------
    def _load(self, generation: int) -> None:
        with self._lock:
            if generation != self._generation or self.closing:
                return  # superseded before it started: a newer load is queued behind us
            config = self._pending_config
        if config is None:  # _start_load sets it before queueing this; a failed load cleared it
            return
        token = self._channel.progress_create()
        if token:
            self._channel.progress_begin(token, "DSpark", "loading models")

        def progress(message: str, fraction: float | None) -> None:
            log.info("loading: %s%s", message, "" if fraction is None else f" ({fraction:.0%})")
            if token:
                self._channel.progress_report(token, message, fraction)
            # The same step in dspark/status, so a status bar shows "loading… 60%" by itself (work-done
            # progress is drawn by the client library in a place of its own, and not every client asks
            # for it). A superseded or disabled load stays quiet: its state is no longer the server's.
            with self._lock:
                current = generation == self._generation and not self.closing
            if current:
                self._set_state(LOADING, message, progress=_clamp_fraction(fraction))

        started = time.perf_counter()
        try:
            service = self._backend.load(config, progress)
        except UserError as exc:
            self._fail(generation, str(exc), token)
            return
        except Exception as exc:  # a broken model must not take the server down
            log.exception("loading the models failed")
            self._fail(generation, f"{type(exc).__name__}: {exc}", token)
            return
        elapsed = time.perf_counter() - started
        with self._lock:
            stale = generation != self._generation or self.closing
            if not stale:
                self.service = service
                self.loaded_config = self._pending_config
                self._pending_config = None
        if stale:
            log.info("a newer configuration arrived while loading; dropping this load")
            self._close(service)
            if token:
                self._channel.progress_end(token, "superseded")
            return
        loaded = self.loaded_config
        if loaded is not None and loaded is not config:  # knobs changed during the load
            self._update(service, loaded)
        log.info("models ready in %.1f s", elapsed)
        if token:
            self._channel.progress_end(token, f"ready in {elapsed:.1f} s")
        self._set_state(READY, f"models ready in {elapsed:.1f} s")
        if service.notice:
            self._channel.show_message(f"DSpark: {service.notice}", types.MessageType.Warning)

    def _fail(self, generation: int, message: str, token: str | None) -> None:
        if token:
            self._channel.progress_end(token, "failed")
        with self._lock:
            if generation != self._generation:
                return
            self._pending_config = None
        log.error("could not load the models: %s", message)
        self._channel.show_message(f"DSpark: could not load the models: {message}", types.MessageType.Error)
        self._set_state(ERROR, message)

    def _update(self, service: ServiceLike, config: ServiceConfig) -> None:
        try:
            service.update_config(config)
        except Exception:
            log.exception("updating the service configuration failed")

    def _close(self, service: ServiceLike) -> None:
        try:
            service.close()
        except Exception:
            log.exception("closing the service failed")

    def _set_state(self, state: str, message: str, progress: float | None = None) -> None:
        self.state, self.message = state, message
        self._channel.status(state, message, progress=progress)


def _clamp_fraction(fraction: float | None) -> float | None:
    """A load step's fraction as dspark/status carries it: within [0, 1], two decimals; None if unknown."""
    if fraction is None or fraction != fraction:  # None or NaN: no figure rather than a wrong one
        return None
    return round(max(0.0, min(1.0, float(fraction))), 2)

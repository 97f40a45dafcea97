"""Thread-safe messages to the client: notifications, showMessage, logMessage, work-done progress.

pygls writes to stdout from whichever thread calls it, so two threads sending at once could interleave
two messages' bytes. Everything that does not run on the event loop (model loading, completion workers,
log records from any thread) goes through `Channel`, which hops onto the loop first.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import uuid
from concurrent.futures import Future
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

STATUS_METHOD = "dspark/status"

# The channel of the session the current code runs for. Under --tcp several editors share the process
# (and its loggers); each connection's task and its worker thread set this, so a log record reaches the
# editor whose request caused it, not whichever connected first. Unset (stdio): the handler's own.
SESSION_CHANNEL: contextvars.ContextVar[Channel | None] = contextvars.ContextVar(
    "dspark_session_channel", default=None
)

# Set while this thread is inside a send to the client. Sending logs by itself: pygls' write-error path,
# our "not sending after exit", a failed send's own debug line. Those records, forwarded as logMessage,
# sent again, logged again... recursed until RecursionError, every `exit` at --log-level debug (issue 19).
# ClientLogHandler skips the client for a record made during a send; stderr and the log file keep it.
_SENDING = threading.local()


def sending_to_client() -> bool:
    """True while the current thread is inside a send to the client (see `_SENDING`)."""
    return bool(getattr(_SENDING, "active", False))


class Channel:
    def __init__(self, server: LanguageServer) -> None:
        self._server = server
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called on the loop once it runs (first request); messages before that are dropped."""
        self._loop = loop

    def _call(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is None or self.closed or loop.is_closed():
            return
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._safe(fn, *args)
        else:
            try:
                loop.call_soon_threadsafe(self._safe, fn, *args)
            except RuntimeError:  # loop closed between the check and the call (shutdown race)
                pass

    def _safe(self, fn: Any, *args: Any) -> None:
        if self.closed:
            return
        outer = sending_to_client()
        _SENDING.active = True
        try:
            fn(*args)
        except (BrokenPipeError, ConnectionError) as exc:
            # The client's end is gone: later messages are dropped here instead of failing one by one.
            self.closed = True
            log.debug("the client's end is closed (%s); no more messages are sent to it", exc)
        except Exception:  # a message we cannot send must never take a worker down
            log.debug("could not send a message to the client", exc_info=True)
        finally:
            _SENDING.active = outer

    # -- plain messages --------------------------------------------------------------------------
    def notify(self, method: str, params: Any) -> None:
        self._call(self._server.protocol.notify, method, params)

    def status(self, state: str, message: str = "", **figures: Any) -> None:
        payload: dict[str, Any] = {"state": state, "message": message}
        payload.update({k: v for k, v in figures.items() if v is not None})
        self.notify(STATUS_METHOD, payload)

    def show_message(self, message: str, kind: types.MessageType) -> None:
        self._call(self._server.window_show_message, types.ShowMessageParams(type=kind, message=message))

    def log_message(self, message: str, kind: types.MessageType) -> None:
        self._call(self._server.window_log_message, types.LogMessageParams(type=kind, message=message))

    # -- work-done progress ----------------------------------------------------------------------
    def supports_progress(self) -> bool:
        try:
            caps = self._server.client_capabilities
        except Exception:
            return False
        window = caps.window if caps is not None else None
        return bool(window is not None and window.work_done_progress)

    def progress_create(self, timeout: float = 5.0) -> str | None:
        """Create a progress token (blocking; call from a worker thread). None if unsupported/failed."""
        loop = self._loop
        if (
            loop is None
            or not self.supports_progress()
            or threading.current_thread() is threading.main_thread()
        ):
            return None
        token = f"dspark-{uuid.uuid4().hex[:12]}"
        done: Future[None] = Future()

        def send() -> None:
            fut = self._server.work_done_progress.create(token)
            fut.add_done_callback(
                lambda f: done.set_exception(e) if (e := f.exception()) else done.set_result(None)
            )

        self._call(send)
        try:
            done.result(timeout=timeout)
        except Exception as exc:
            log.info("client did not create a progress token (%s); loading without a progress bar", exc)
            return None
        return token

    def progress_begin(self, token: str, title: str, message: str) -> None:
        value = types.WorkDoneProgressBegin(title=title, message=message, percentage=0, cancellable=False)
        self._call(self._server.work_done_progress.begin, token, value)

    def progress_report(self, token: str, message: str, fraction: float | None) -> None:
        pct = None if fraction is None else max(0, min(100, int(round(fraction * 100))))
        self._call(
            self._server.work_done_progress.report,
            token,
            types.WorkDoneProgressReport(message=message, percentage=pct),
        )

    def progress_end(self, token: str, message: str) -> None:
        self._call(self._server.work_done_progress.end, token, types.WorkDoneProgressEnd(message=message))


class ClientLogHandler(logging.Handler):
    """Forwards our own log records (the `dspark_lsp` logger tree only, never pygls', which logs
    every message it sends and would loop) to `window/logMessage`."""

    _LEVELS = (
        (logging.ERROR, types.MessageType.Error),
        (logging.WARNING, types.MessageType.Warning),
        (logging.INFO, types.MessageType.Info),
    )

    def __init__(self, channel: Channel, level: int) -> None:
        super().__init__(level)
        self._channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        if sending_to_client():
            return  # made by a send to the client (see _SENDING): forwarding it would recurse
        try:
            kind = next((k for lvl, k in self._LEVELS if record.levelno >= lvl), types.MessageType.Log)
            channel = SESSION_CHANNEL.get() or self._channel
            channel.log_message(self.format(record), kind)
        except Exception:
            self.handleError(record)

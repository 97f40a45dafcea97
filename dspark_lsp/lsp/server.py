"""The DSpark language server: pygls wiring, transport, and robustness against bad input.

Handlers live in `dspark_lsp.lsp.handlers` (one module per concern); this module owns the server object,
its protocol subclass (which answers malformed messages instead of dropping them), and `run_server`,
the entry point `dspark-lsp --stdio | --tcp HOST:PORT` maps onto.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.io_ import StdoutWriter, run_async
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from dspark_lsp.errors import UserError
from dspark_lsp.lsp.backend import Backend, ServiceFactory, default_backend
from dspark_lsp.lsp.channel import Channel
from dspark_lsp.lsp.documents import DocumentStore
from dspark_lsp.lsp.executor import SerialExecutor
from dspark_lsp.lsp.loader import READY, ModelManager
from dspark_lsp.lsp.logs import configure_logging
from dspark_lsp.lsp.positions import Encoding
from dspark_lsp.lsp.settings import LspSettings
from dspark_lsp.lsp.stdin import DaemonStdinReader
from dspark_lsp.lsp.worker import CompletionWorker, Outcome

log = logging.getLogger(__name__)

SERVER_NAME = "dspark-lsp"
try:
    from importlib.metadata import version as _version

    SERVER_VERSION = _version("dspark-lsp")
except Exception:  # running from a source tree that is not installed
    SERVER_VERSION = "0.0.0"

# JSON-RPC error codes pygls has no helper for.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600

# These we replace with our own document store (see documents.py for why).
_OWN_SYNC_METHODS = (
    types.TEXT_DOCUMENT_DID_OPEN,
    types.TEXT_DOCUMENT_DID_CHANGE,
    types.TEXT_DOCUMENT_DID_CLOSE,
)


class _Invalid:
    """Stand-in for a message that could not be decoded; handle_message drops it (already answered)."""

    jsonrpc = "invalid"


class DSparkProtocol(LanguageServerProtocol):
    def __init__(self, server: LanguageServer, converter: Any) -> None:
        super().__init__(server, converter)
        for method in _OWN_SYNC_METHODS:
            self.fm.builtin_features.pop(method, None)

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            # pygls raises here and the request id is lost, so the client would wait forever for an
            # answer: reply with the error on the request's own id.
            msg_id = data.get("id") if isinstance(data, dict) else None
            if isinstance(data, dict) and "method" in data and isinstance(msg_id, (int, str)):
                log.warning(
                    "invalid params for %s (id %s): answering with an error", data.get("method"), msg_id
                )
                error = exc if isinstance(exc, JsonRpcInvalidParams) else JsonRpcInternalError()
                response = error.to_response_error()
                response.message = f"invalid params for {data.get('method')}: {exc.__cause__ or exc}"
                self._send_response(msg_id, error=response)
            else:
                log.warning("dropping an undecodable message: %s", exc.__cause__ or exc)
            return _Invalid()

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _Invalid):
            return
        if not hasattr(message, "jsonrpc"):
            # Valid JSON but not a JSON-RPC message (an array, a number, an object without "jsonrpc").
            msg_id = message.get("id") if isinstance(message, dict) else None
            log.warning("not a JSON-RPC message: %.200r", message)
            self._send_raw_error(
                msg_id if isinstance(msg_id, (int, str)) else None, INVALID_REQUEST, "Invalid Request"
            )
            return
        if (
            self._shutdown
            and getattr(message, "method", None) not in (None, types.EXIT)
            and hasattr(message, "id")
        ):
            # pygls drops requests after shutdown without a reply; a client awaiting one would hang.
            self._send_raw_error(message.id, INVALID_REQUEST, "the server is shutting down")
            return
        super().handle_message(message)

    def _send_raw_error(self, msg_id: int | str | None, code: int, message: str) -> None:
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


class DSparkServer(LanguageServer):
    """Server state lives here; handlers (handlers/*.py) read and update it on the event loop."""

    def __init__(self, backend_factory: Any) -> None:
        super().__init__(
            SERVER_NAME,
            SERVER_VERSION,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=DSparkProtocol,
        )
        self._backend_factory = backend_factory
        self.backend: Backend | None = None
        self._backend_lock = threading.Lock()
        self.docs = DocumentStore()
        self.channel = Channel(self)
        self.executor = SerialExecutor()
        self.models: ModelManager | None = None
        self.worker: CompletionWorker | None = None
        # Completion requests answered empty before the worker existed (before `initialized`): the
        # worker's counters cannot see them, dspark/stats adds them to its "not_ready" count.
        self.not_ready_early = 0
        # The last decoded completion's figures, repeated in dspark/status until the next one.
        self.last_speedup: float | None = None
        self.last_accepted_per_forward: float | None = None
        self.encoding: Encoding = "utf-16"
        self.init_options: dict[str, Any] = {}
        self.latest_section: dict[str, Any] | None = None
        self.lsp_settings = LspSettings()
        self.config: Any = None
        self.exit_code = 1  # exit without shutdown is an error per the LSP spec

    def ensure_backend(self) -> Backend:
        """Resolve the service backend lazily: importing the real one costs torch's import time."""
        with self._backend_lock:  # the import may run on the worker while a config change arrives
            if self.backend is None:
                backend = self._backend_factory()
                self.models = ModelManager(backend, self.executor, self.channel)
                self.worker = CompletionWorker(self.models, self.executor)
                self.worker.on_done = self._report_completion
                self.backend = backend
            return self.backend

    def _report_completion(self, outcome: Outcome) -> None:
        """Refresh dspark/status with the last completion's figures (status bars show them)."""
        models = self.models
        if outcome.status != "ok" or models is None or models.state != READY:
            return
        stats = getattr(outcome.result, "stats", None)
        stats = stats if isinstance(stats, dict) else {}
        if not getattr(outcome.result, "from_cache", False):
            # The service's figure: tokens per target forward, i.e. how many times fewer target
            # forwards than the target alone (CompletionService.complete); absent when nothing was
            # decoded. An answer from the typed-through cache ran no model: the bar keeps the last
            # decoded completion's figures.
            speedup = stats.get("speedup")
            self.last_speedup = float(speedup) if isinstance(speedup, (int, float)) else None
            per_forward = stats.get("accepted_per_forward")
            self.last_accepted_per_forward = per_forward if isinstance(per_forward, (int, float)) else None
        self.channel.status(
            READY,
            models.message,
            lastLatencyMs=round(outcome.latency_ms, 1),
            speedup=self.last_speedup,
            acceptedPerForward=self.last_accepted_per_forward,
        )

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls' default pops a window for every internal error; we log, and answer a parse error."""
        if isinstance(error, json.JSONDecodeError):
            log.warning("malformed JSON from the client: %s", error)
            protocol = self.protocol
            if isinstance(protocol, DSparkProtocol):
                protocol._send_raw_error(None, PARSE_ERROR, f"Parse error: {error}")
            return
        log.error("internal error (%s): %s", getattr(source, "__name__", source), error)

    # -- transport -----------------------------------------------------------------------------
    def start_io(self, stdin: Any = None, stdout: Any = None) -> None:
        """Like pygls' start_io, but reads stdin on a daemon thread so `exit` never waits for EOF."""
        self._stop_event = threading.Event()
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        try:
            asyncio.run(self._serve(stdin))
        except BrokenPipeError:
            log.error("the client closed the connection")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    async def _serve(self, stdin: Any) -> None:
        assert self._stop_event is not None
        reader = DaemonStdinReader(stdin or sys.stdin.buffer, asyncio.get_running_loop())
        await run_async(
            stop_event=self._stop_event,
            reader=reader,
            protocol=self.protocol,
            logger=logging.getLogger("pygls.io_"),
            error_handler=self.report_server_error,
        )

    def shutdown(self) -> None:
        """Stop the transport and release the models (does not wait for a running model load)."""
        self.channel.closed = True
        if self.worker is not None:
            self.worker.cancel_all()
        if self.models is not None:
            self.models.shutdown()
        self.executor.shutdown(wait=False)
        # Give a running decode a moment to see its cancel flag and the service to close cleanly.
        self.executor.join(timeout=2.0)
        if self._stop_event is not None:
            self._stop_event.set()
        if self._server is not None:
            self._server.close()


def create_server(
    service_factory: ServiceFactory | None = None,
    *,
    backend: Backend | None = None,
) -> DSparkServer:
    """Build the server. `service_factory(config, progress)` replaces CompletionService.load;
    `backend` replaces the whole service module (config parsing and requests too) — both for tests."""
    from dspark_lsp.lsp import handlers

    if backend is not None:
        chosen = backend

        def factory() -> Backend:
            return chosen

    else:

        def factory() -> Backend:
            return default_backend(service_factory)

    server = DSparkServer(factory)
    handlers.register_all(server)
    return server


def run_server(
    *,
    stdio: bool,
    tcp: tuple[str, int] | None,
    log_level: str,
    log_file: str | None,
    server: DSparkServer | None = None,
) -> int:
    """Run until the client says `exit` (0 after `shutdown`, 1 otherwise) or the connection ends."""
    if stdio == (tcp is not None):
        raise UserError("choose exactly one transport: --stdio or --tcp HOST:PORT")
    server = server or create_server()
    configure_logging(server.channel, log_level, log_file)
    if stdio:
        # Anything a library prints must not corrupt the protocol stream: the protocol gets a private
        # duplicate of stdout and fd 1 / sys.stdout are pointed at stderr.
        protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
        sys.stdout.flush()
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        sys.stdout = sys.stderr
        log.info("%s %s on stdio", SERVER_NAME, SERVER_VERSION)
        server.start_io(sys.stdin.buffer, protocol_out)
    else:
        assert tcp is not None
        host, port = tcp
        log.info("%s %s on tcp %s:%d", SERVER_NAME, SERVER_VERSION, host, port)
        try:
            server.start_tcp(host, port)
        except OSError as exc:
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            server.shutdown()
    for handler in logging.getLogger().handlers:
        handler.flush()
    return server.exit_code

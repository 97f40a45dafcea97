"""The DSpark language server: the pygls server object, the transports, and `run_server`, the entry point
`dspark-lsp --stdio | --tcp HOST:PORT` maps onto.

Where the rest lives: the session's state in session.py, which method goes to which handler in router.py
(the handlers in handlers/*.py), answering malformed messages in protocol.py (with envelope.py and
framing.py), the TCP listener in tcp.py.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcMethodNotFound
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from dspark_lsp.errors import UserError
from dspark_lsp.lsp import router
from dspark_lsp.lsp.backend import Backend, ServiceFactory, default_backend
from dspark_lsp.lsp.executor import SerialExecutor
from dspark_lsp.lsp.framing import FrameReader
from dspark_lsp.lsp.logs import configure_logging
from dspark_lsp.lsp.protocol import PARSE_ERROR, DSparkProtocol
from dspark_lsp.lsp.session import Session
from dspark_lsp.lsp.stdin import DaemonStdinReader
from dspark_lsp.lsp.tcp import TcpListener

log = logging.getLogger(__name__)

SERVER_NAME = "dspark-lsp"
try:
    from importlib.metadata import version as _version

    SERVER_VERSION = _version("dspark-lsp")
except Exception:  # running from a source tree that is not installed
    SERVER_VERSION = "0.0.0"

# How long `exit` (or the end of the stream) waits for a running model call to see its cancel flag.
EXIT_GRACE_S = 2.0


class DSparkServer(LanguageServer):
    """The pygls side of one session: its protocol and transport. The state the handlers read and
    change is `self.session` (session.py); `build` gives a server with every route registered."""

    def __init__(self, backend_factory: Callable[[], Backend]) -> None:
        super().__init__(
            SERVER_NAME,
            SERVER_VERSION,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=DSparkProtocol,
        )
        self.session = Session(self, backend_factory)

    @classmethod
    def build(cls, backend_factory: Callable[[], Backend]) -> DSparkServer:
        server = cls(backend_factory)
        router.register(server, server.session)
        return server

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls' default pops a window for every internal error; we log, and answer a parse error."""
        if isinstance(error, json.JSONDecodeError):
            log.warning("malformed JSON from the client: %s", error)
            protocol = self.protocol
            if isinstance(protocol, DSparkProtocol):
                protocol._send_raw_error(None, PARSE_ERROR, f"Parse error: {error}")
            return
        if isinstance(error, JsonRpcMethodNotFound):
            # The client got its -32601 already; a method we do not serve is no internal error (it
            # went to the editor's log as an Error for every probe of an unserved method).
            log.info("%s", error)
            return
        log.error("internal error (%s): %s", getattr(source, "__name__", source), error)

    # -- transport -----------------------------------------------------------------------------
    @property
    def dspark_protocol(self) -> DSparkProtocol:
        protocol = self.protocol
        assert isinstance(protocol, DSparkProtocol)
        return protocol

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
        reader = DaemonStdinReader(stdin or sys.stdin.buffer, asyncio.get_running_loop())
        await self.serve_frames(reader.read)

    async def serve_frames(self, read: Any) -> None:
        """Read frames until `exit`, the end of the stream, or the server stops (our framing.py, not
        pygls' reader)."""
        frames = FrameReader(read)
        protocol = self.dspark_protocol
        while not protocol.exited and (self._stop_event is None or not self._stop_event.is_set()):
            frame = await frames.next()
            if frame is None:
                break
            protocol.handle_body(frame)
            # Let the handler task just created take its first step (the completion handlers take
            # their document snapshot there) before the next frame is handled. Without this, frames
            # already buffered (a didChange right behind a completion request, as one write) were
            # applied first, and the request was answered on a later version of the document than
            # the one its position refers to (found by the fuzz test).
            await asyncio.sleep(0)

    def start_tcp(self, host: str, port: int) -> None:
        """Serve every editor that connects, each in its own session (tcp.py)."""
        self._stop_event = threading.Event()
        listener = TcpListener(self.new_connection, host, port)
        try:
            asyncio.run(listener.run())
        finally:
            self.session.exit_code = listener.exit_code

    def new_connection(self) -> DSparkServer:
        """A fresh server for one TCP connection: its own protocol and session (documents, settings,
        models), on the same backend factory."""
        return DSparkServer.build(self.session.backend_factory)

    def shutdown(self) -> None:
        """The process's end: the session ends (Session.close, waiting EXIT_GRACE_S for a running
        decode) and the transport stops."""
        self.session.close(EXIT_GRACE_S)
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
    if backend is not None:
        chosen = backend

        def factory() -> Backend:
            return chosen

    else:

        def factory() -> Backend:
            return default_backend(service_factory)

    return DSparkServer.build(factory)


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
    configure_logging(server.session.channel, log_level, log_file)
    _stack_dumps_on_signal()
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
    _flush_logs()
    return _finish(server.session.exit_code)


def _stack_dumps_on_signal() -> None:
    """``kill -USR1 <pid>`` writes every thread's Python stack to stderr (the editor's server log): how
    a server that stopped answering shows where it is stuck, without a debugger on the user's machine.
    The fuzz test sends it when a request goes unanswered (a CI run failed so, with no clue where)."""
    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is None:  # Windows
        return
    try:
        faulthandler.register(usr1, file=sys.stderr, all_threads=True)
    except (ValueError, OSError, RuntimeError, AttributeError) as exc:  # no usable stderr; not main thread
        log.debug("no stack dumps on SIGUSR1: %s", exc)


# After DSparkServer.shutdown's own wait (EXIT_GRACE_S) for the worker to see its cancel flag: what the
# other executors (TCP sessions closed without waiting) get on top, from one shared deadline.
EXIT_LEFTOVER_S = 0.5


def _finish(code: int) -> int:
    """`code` when no worker thread is inside a model call; otherwise the process ends here.

    A decode's cancel is seen between forwards, but one forward (a 256-token prefill slice, a model
    load) cannot be interrupted and takes seconds on a loaded machine. Returning would let the
    interpreter finalize with that daemon thread inside torch, and CPython 3.11 kills such a thread
    with pthread_exit when the op returns: the unwind through pybind11's noexcept gil_scoped_release
    destructor is std::terminate, i.e. SIGABRT (exit -6) instead of the exit code the LSP spec asks
    for (0 after shutdown, 1 without). Nothing is left for interpreter teardown to do that matters
    here (no files to write; the logs are flushed below; the models are only memory), so after
    flushing, os._exit ends the process at once with the right code and without running finalizers.
    """
    if SerialExecutor.join_all(EXIT_LEFTOVER_S):
        return code
    log.warning("a model call is still running after exit; ending the process without waiting for it")
    _flush_logs()
    os._exit(code)


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # a closed stream must not turn a clean exit into a traceback
            pass
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass

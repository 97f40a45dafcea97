"""The DSpark language server: pygls wiring, transport, and robustness against bad input.

The session's state is in session.py; which method goes to which handler is the table in router.py
(the handlers, functions of (session, params), in handlers/*.py). This module owns the server object,
its protocol subclass (which answers malformed messages instead of dropping them), and `run_server`,
the entry point `dspark-lsp --stdio | --tcp HOST:PORT` maps onto.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import logging
import os
import re
import signal
import sys
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcMethodNotFound,
)
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from dspark_lsp.errors import UserError
from dspark_lsp.lsp import router
from dspark_lsp.lsp.backend import Backend, ServiceFactory, default_backend
from dspark_lsp.lsp.channel import SESSION_CHANNEL
from dspark_lsp.lsp.executor import SerialExecutor
from dspark_lsp.lsp.framing import Frame, FrameReader
from dspark_lsp.lsp.logs import configure_logging
from dspark_lsp.lsp.session import Session
from dspark_lsp.lsp.stdin import DaemonStdinReader

log = logging.getLogger(__name__)

SERVER_NAME = "dspark-lsp"
try:
    from importlib.metadata import version as _version

    SERVER_VERSION = _version("dspark-lsp")
except Exception:  # running from a source tree that is not installed
    SERVER_VERSION = "0.0.0"

# How long `exit` (or the end of the stream) waits for a running model call to see its cancel flag.
EXIT_GRACE_S = 2.0

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


def _valid_id(value: Any) -> bool:
    """JSON-RPC ids are strings or numbers. A bool is an int in Python (and pygls would turn `true` into
    1, answering as if for request 1): refused with the other wrong types."""
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)


class DSparkProtocol(LanguageServerProtocol):
    def __init__(self, server: LanguageServer, converter: Any) -> None:
        super().__init__(server, converter)
        for method in _OWN_SYNC_METHODS:
            self.fm.builtin_features.pop(method, None)
        # Set for a TCP session: `exit` ends this connection (called with the exit code) instead of
        # the process, which other editors may still be connected to.
        self.on_exit: Any = None
        # Set by `exit`: the writer closes right after, and the answers of requests the exit cancelled
        # (pygls answers each cancelled task) must not be written to it (a traceback per request).
        self.exited = False
        # The first `initialize` was handled; LSP allows one per session. pygls ran a second one too,
        # and its position encoding replaced the agreed one mid-session (found by the fuzz test).
        self.initialize_seen = False
        # Likewise `initialized`: a second one re-ran the start-up and left dspark/status at "loading".
        self.initialized_seen = False
        # The ids of our own requests to the client still waiting for an answer.
        self._sent_requests: set[Any] = set()

    # -- one frame's body -> one message ---------------------------------------------------------
    def handle_body(self, frame: Frame) -> None:
        """Decode a frame and dispatch it. Every request that can be identified gets exactly one answer:
        its result, or an error on its own id; what cannot be identified gets one error with id null."""
        body = frame.body
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            # The id may still be readable; answering on it spares the client a request that hangs.
            msg_id = _id_of(body.decode("utf-8", errors="replace"))
            log.warning("a message that is not UTF-8 (%s): answering with a parse error", exc)
            self._send_raw_error(msg_id, PARSE_ERROR, f"Parse error: the message is not UTF-8 ({exc.reason})")
            return
        # A byte order mark before the JSON may be ignored (RFC 8259 §8.1); json.loads refuses it, and
        # the request was answered with id null only (found by the fuzz test).
        text = text.removeprefix("\ufeff")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            why = frame.problem or str(exc)
            log.warning("malformed JSON from the client (%s)", why)
            # A cut-short frame may still name its id (the cut fell after it): answer on it if so. So
            # may JSON nested too deeply for the decoder (valid, most likely): it was answered with id
            # null only, and its request never (found by the fuzz test).
            deep = isinstance(exc, RecursionError)
            msg_id = _id_of(text) if deep or not frame.complete else None
            self._send_raw_error(msg_id, PARSE_ERROR, f"Parse error: {why}")
            return
        if not frame.complete and frame.problem:
            log.warning("a frame with a wrong Content-Length still held one message (%s)", frame.problem)
        envelope_problem = _envelope_problem(data)
        if envelope_problem is not None:
            msg_id = data.get("id") if isinstance(data, dict) else None
            log.warning("not a valid JSON-RPC message (%s): %.200r", envelope_problem, data)
            if isinstance(data, dict) and "method" not in data and ("result" in data or "error" in data):
                return  # a malformed response to one of our requests: nobody waits for an answer to it
            self._send_raw_error(
                msg_id if _valid_id(msg_id) else None, INVALID_REQUEST, f"Invalid Request: {envelope_problem}"
            )
            return
        if "id" in data and "method" in data and self._is_notification(data["method"]):
            # pygls structured it as the notification, dropping the id, and never answered: a client
            # that sent it as a request waited forever (found by the fuzz test). Refused, not applied.
            # `exit` still ends the session: a client that sends it with an id is gone either way.
            log.warning("%s sent as a request (id %s): refused", data["method"], data["id"])
            self._send_raw_error(
                data["id"], INVALID_REQUEST, f"{data['method']} is a notification: it is sent without an id"
            )
            return
        if "method" in data and "params" not in data:
            # `params` may be omitted (JSON-RPC 2.0 §4); pygls' request types require the key.
            data = {**data, "params": None}
        # Only the top level is a message. pygls decodes with json.loads(object_hook=...), which also
        # tried to decode nested objects (a setting, a document's params) that contain "jsonrpc" and
        # "id" as messages, and answered them.
        try:
            message = self.structure_message(data)
            self.handle_message(message)
        except Exception as exc:  # a handler bug must cost one message, not the connection
            log.exception("could not handle a message")
            msg_id = data.get("id")
            if "method" in data and _valid_id(msg_id) and msg_id not in self._request_futures:
                self._send_raw_error(msg_id, JsonRpcInternalError.CODE, f"internal error: {exc}")

    def _is_notification(self, method: str) -> bool:
        """An LSP notification other than `exit` (its lsprotocol type has no id field)."""
        fields = getattr(self.get_message_type(method), "__attrs_attrs__", None)
        return method != types.EXIT and fields is not None and all(f.name != "id" for f in fields)

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            # pygls raises here and the request id is lost, so the client would wait forever for an
            # answer: reply with the error on the request's own id.
            msg_id: Any = data.get("id") if isinstance(data, dict) else None
            # Any valid id (a float too: it was dropped here and its request never answered).
            if isinstance(data, dict) and "method" in data and _valid_id(msg_id):
                log.warning(
                    "invalid params for %s (id %s): answering with an error", data.get("method"), msg_id
                )
                error = exc if isinstance(exc, JsonRpcInvalidParams) else JsonRpcInternalError()
                response = error.to_response_error()
                response.message = f"invalid params for {data.get('method')}: {exc.__cause__ or exc}"
                self._send_response(msg_id, error=response)
            elif (
                isinstance(data, dict)
                and "method" not in data
                and _valid_id(msg_id)
                and msg_id in self._sent_requests
            ):
                # A malformed answer to one of our requests (a workspace/configuration pull): fail
                # that request. Dropped, it stayed pending forever and its handler never finished.
                # (pygls files the client's own running requests in the same table: only ids we
                # sent are looked up, so an answer on the id of a client request touches nothing.)
                future = self._request_futures.pop(msg_id, None)
                log.warning("a malformed answer to request %s: %s", msg_id, exc.__cause__ or exc)
                if future is not None and not future.done():
                    future.set_exception(JsonRpcInternalError(f"malformed answer: {exc.__cause__ or exc}"))
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
        if getattr(message, "method", None) == types.INITIALIZE and hasattr(message, "id"):
            if self.initialize_seen:
                log.warning(
                    "a second initialize (id %s): refused, the session keeps its settings", message.id
                )
                self._send_raw_error(
                    message.id, INVALID_REQUEST, "initialize was already received; it may be sent only once"
                )
                return
            self.initialize_seen = True
        if getattr(message, "method", None) == types.INITIALIZED and not hasattr(message, "id"):
            if self.initialized_seen:
                log.warning("a second initialized notification: ignored")
                return
            self.initialized_seen = True
        super().handle_message(message)

    def send_request(
        self,
        method: str,
        params: Any | None = None,
        callback: Any = None,
        msg_id: Any = None,
    ) -> Future[Any]:
        msg_id = str(uuid.uuid4()) if msg_id is None else msg_id
        self._sent_requests.add(msg_id)
        future = super().send_request(method, params, callback, msg_id)
        future.add_done_callback(lambda _: self._sent_requests.discard(msg_id))
        return future

    def _send_data(self, data: Any) -> None:
        if self.exited:
            log.debug("after exit, not sending %.200r", data)
            return
        super()._send_data(data)

    def _send_raw_error(self, msg_id: int | float | str | None, code: int, message: str) -> None:
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Any:
        """pygls' exit calls sys.exit; a TCP session ends only its own connection (see on_exit)."""
        self.exited = True
        # Nothing goes to the client from here on (the exit handler's own log line included).
        session = getattr(self._server, "session", None)
        if isinstance(session, Session):
            session.channel.closed = True
        if self.on_exit is None:
            yield from super().lsp_exit(*args)
            return
        if (user_handler := self.fm.features.get(types.EXIT)) is not None:
            yield user_handler, args, None
        self.on_exit(0 if self._shutdown else 1)


def _id_of(text: str) -> Any:
    """The id of a request whose body is damaged (cut short, or nested too deeply for json.loads), when
    its top level names a "method" and a number or string "id" before the damage; None otherwise (the
    error then goes out with id null, as JSON-RPC says)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        value = data.get("id")
        return value if "method" in data and _valid_id(value) else None
    return _top_level_id(text)


# JSON tokens, enough to walk the top level: strings (an unterminated one runs to the end), punctuation,
# and any other run (numbers, literals, junk).
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[{}\[\]:,]|[^\s{}\[\]:,"]+')


def _top_level_id(text: str) -> Any:
    """Walk the tokens of a JSON object without building it; deeper levels are only counted, so an id
    inside params is never taken for the request's own."""
    depth = 0
    state = "start"  # at depth 1: key, colon, value, after (a value; expecting , or })
    key: Any = None
    candidate: str | None = None
    msg_id: Any = None
    has_method = False
    for match in _TOKEN.finditer(text):
        token = match.group()
        if depth > 1:
            if token in ("{", "["):
                depth += 1
            elif token in ("}", "]"):
                depth -= 1
            continue
        if state == "start":
            if token != "{":
                return None
            depth, state = 1, "key"
        elif state == "key":
            if token == "}":
                break
            try:
                key = json.loads(token)
            except ValueError:
                break
            state = "colon"
        elif state == "colon":
            if token != ":":
                break
            has_method = has_method or key == "method"
            state = "value"
        elif state == "value":
            if token in ("{", "["):
                depth = 2
            elif key == "id":
                candidate = token
            state = "after"
        elif state == "after":
            if token not in (",", "}"):
                break
            if candidate is not None:  # the id's token is whole: a , or } followed it
                try:
                    msg_id = json.loads(candidate)
                except ValueError:
                    return None
                candidate = None
            if has_method and msg_id is not None or token == "}":
                break
            state = "key"
    return msg_id if has_method and _valid_id(msg_id) else None


def _envelope_problem(data: Any) -> str | None:
    """What makes `data` no JSON-RPC 2.0 message (None when it is one)."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    if data.get("jsonrpc") != "2.0":
        return f'"jsonrpc" is {data.get("jsonrpc")!r}, not "2.0"'
    if "id" in data and not _valid_id(data["id"]):
        return f'"id" is {data["id"]!r}; ids are numbers or strings'
    if "method" in data:
        if not isinstance(data["method"], str):
            return f'"method" is {data["method"]!r}, not a string'
        params = data.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return f'"params" is a {type(params).__name__}; params are an object or an array'
    elif "result" not in data and "error" not in data:
        return "neither a request, a notification nor a response"
    return None


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
        """Read frames until the stream ends or the server stops (our framing.py, not pygls' reader)."""
        frames = FrameReader(read)
        protocol = self.dspark_protocol
        while self._stop_event is None or not self._stop_event.is_set():
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
        """Serve every editor that connects, each in its own session (see `_TcpListener`)."""
        self._stop_event = threading.Event()
        listener = _TcpListener(self, host, port)
        try:
            asyncio.run(listener.run())
        finally:
            self.session.exit_code = listener.exit_code

    def new_session(self) -> DSparkServer:
        """A fresh server for one TCP connection: its own protocol and session (documents, settings,
        models), on the same backend factory."""
        return DSparkServer.build(self.session.backend_factory)

    def close_session(self) -> None:
        """Release one TCP session without touching the process (never blocks: the loop serves others)."""
        session = self.session
        session.channel.closed = True
        session.warmer.drop_all()
        session.project.close()
        if session.worker is not None:
            session.worker.cancel_all()
        if session.models is not None:
            session.models.shutdown()
        session.executor.shutdown(wait=False)

    def shutdown(self) -> None:
        """Stop the transport and release the models (does not wait for a running model load)."""
        session = self.session
        session.channel.closed = True
        session.warmer.drop_all()
        session.project.close()
        if session.worker is not None:
            session.worker.cancel_all()
        if session.models is not None:
            session.models.shutdown()
        session.executor.shutdown(wait=False)
        # Give a running decode a moment to see its cancel flag and the service to close cleanly
        # (run_server's _finish ends the process if it is still inside a model call after this).
        session.executor.join(timeout=EXIT_GRACE_S)
        if self._stop_event is not None:
            self._stop_event.set()
        if self._server is not None:
            self._server.close()


class _TcpListener:
    """`--tcp`: every connection is one editor with its own session (initialize, documents, settings,
    models), so answers and document states never cross between editors: a file open in both has one
    mirror per editor, each in step with that editor's buffer. (pygls' start_tcp shares one protocol,
    so a second connection took over the first one's replies.)

    The process ends when a session ends with `exit` and no other editor is connected (exit code of that
    session: 0 after `shutdown`). An editor that disconnects without `exit` (it crashed) leaves the
    server listening, so it can reconnect.
    """

    def __init__(self, template: DSparkServer, host: str, port: int) -> None:
        self.template = template
        self.host, self.port = host, port
        self.sessions: set[DSparkServer] = set()
        self.exit_code = 1
        self._done: asyncio.Event | None = None

    async def run(self) -> None:
        self._done = asyncio.Event()
        server = await asyncio.start_server(self._connection, self.host, self.port)
        bound = ", ".join(_address(sock.getsockname()) for sock in server.sockets)
        loopback_only = all(_is_loopback(sock.getsockname()[0]) for sock in server.sockets)
        scope = (
            "loopback only; pass --host or --tcp HOST:PORT to listen elsewhere"
            if loopback_only
            else "reachable from other machines: anyone who can connect can read the documents sent"
        )
        # stderr, not only the log: the person who started the server reads where it listens (and a
        # port chosen by the system, --tcp 0) there.
        print(f"dspark-lsp: listening on {bound} ({scope})", file=sys.stderr, flush=True)
        log.info("listening on %s (%s)", bound, scope)
        try:
            await self._done.wait()
        finally:
            server.close()
            for session in list(self.sessions):
                session.close_session()
                writer = getattr(session.protocol, "writer", None)
                if writer is not None:
                    writer.close()
            await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = self.template.new_session()
        protocol = session.dspark_protocol
        protocol.set_writer(writer)  # type: ignore[arg-type]  # StreamWriter.write is what pygls calls
        exited: list[int] = []

        def on_exit(code: int) -> None:
            exited.append(code)
            session.session.channel.closed = True
            writer.close()  # the read loop then sees the end of the stream

        protocol.on_exit = on_exit
        # Log records from this connection's handlers and worker go to this editor only (channel.py).
        SESSION_CHANNEL.set(session.session.channel)
        session.session.executor.submit(SESSION_CHANNEL.set, session.session.channel)
        peer = writer.get_extra_info("peername")
        self.sessions.add(session)
        log.info("editor connected from %s (%d connected)", peer, len(self.sessions))
        try:
            await session.serve_frames(reader.read)
        except (ConnectionError, OSError) as exc:
            log.info("connection from %s lost: %s", peer, exc)
        finally:
            self.sessions.discard(session)
            session.close_session()
            if not writer.is_closing():
                writer.close()
            log.info(
                "editor from %s gone (%s; %d connected)",
                peer,
                "exit" if exited else "disconnected",
                len(self.sessions),
            )
            if exited and not self.sessions and self._done is not None:
                self.exit_code = exited[0]
                self._done.set()


def _address(sockname: Any) -> str:
    host, port = sockname[0], sockname[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


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

"""The protocol object: one frame's body -> one message, answering what pygls would drop or mishandle.

Every request that can be identified gets exactly one answer (its result, or an error on its own id);
what cannot be identified gets one error with id null. The cases come from the protocol fuzz test
(tests/lsp/test_lsp_fuzz.py); the pure checks of a decoded message are in envelope.py, the framing (bytes ->
frames) in framing.py.
"""

from __future__ import annotations

import json
import logging
import uuid
from concurrent.futures import Future
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from dspark_lsp.lsp.envelope import envelope_problem, id_of, valid_id
from dspark_lsp.lsp.framing import Frame

log = logging.getLogger(__name__)

# JSON-RPC error codes pygls has no helper for.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600

# These we replace with our own document store (see documents.py for why).
_OWN_SYNC_METHODS = (
    types.TEXT_DOCUMENT_DID_OPEN,
    types.TEXT_DOCUMENT_DID_CHANGE,
    types.TEXT_DOCUMENT_DID_CLOSE,
)


# What _decode returns for a body that is not JSON (already answered).
_UNDECODED = object()


class _Invalid:
    """Stand-in for a message that could not be decoded; handle_message drops it (already answered)."""

    jsonrpc = "invalid"


class DSparkProtocol(LanguageServerProtocol):
    def __init__(self, server: LanguageServer, converter: Any) -> None:
        super().__init__(server, converter)
        for method in _OWN_SYNC_METHODS:
            self.fm.builtin_features.pop(method, None)
        # Set by `exit`: the read loop stops (server.serve_frames), the writer closes right after, and
        # the answers of requests the exit cancelled (pygls answers each cancelled task) must not be
        # written to it (a traceback per request).
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
        data = self._decode(frame)
        if data is _UNDECODED or not self._acceptable(data):
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
            if "method" in data and valid_id(msg_id) and msg_id not in self._request_futures:
                self._send_raw_error(msg_id, JsonRpcInternalError.CODE, f"internal error: {exc}")

    def _decode(self, frame: Frame) -> Any:
        """The frame's JSON, or _UNDECODED when it is not JSON (answered here with a parse error). JSON
        `null` decodes to None, which is no message: _acceptable answers it."""
        body = frame.body
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            # The id may still be readable; answering on it spares the client a request that hangs.
            msg_id = id_of(body.decode("utf-8", errors="replace"))
            log.warning("a message that is not UTF-8 (%s): answering with a parse error", exc)
            self._send_raw_error(msg_id, PARSE_ERROR, f"Parse error: the message is not UTF-8 ({exc.reason})")
            return _UNDECODED
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
            msg_id = id_of(text) if deep or not frame.complete else None
            self._send_raw_error(msg_id, PARSE_ERROR, f"Parse error: {why}")
            return _UNDECODED
        if not frame.complete and frame.problem:
            log.warning("a frame with a wrong Content-Length still held one message (%s)", frame.problem)
        return data

    def _acceptable(self, data: Any) -> bool:
        """Whether decoded JSON is a message pygls may handle; if not, it was answered (or is a response
        nobody waits for) here."""
        problem = envelope_problem(data)
        if problem is not None:
            msg_id = data.get("id") if isinstance(data, dict) else None
            log.warning("not a valid JSON-RPC message (%s): %.200r", problem, data)
            if isinstance(data, dict) and "method" not in data and ("result" in data or "error" in data):
                return False  # a malformed response to one of our requests: nobody waits for an answer
            self._send_raw_error(msg_id if valid_id(msg_id) else None, INVALID_REQUEST, f"Invalid Request: {problem}")
            return False
        if "id" in data and "method" in data and self._is_notification(data["method"]):
            # pygls structured it as the notification, dropping the id, and never answered: a client
            # that sent it as a request waited forever (found by the fuzz test). Refused, not applied.
            # `exit` still ends the session: a client that sends it with an id is gone either way.
            log.warning("%s sent as a request (id %s): refused", data["method"], data["id"])
            self._send_raw_error(
                data["id"], INVALID_REQUEST, f"{data['method']} is a notification: it is sent without an id"
            )
            return False
        return True

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
            if isinstance(data, dict) and "method" in data and valid_id(msg_id):
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
                and valid_id(msg_id)
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
        """`exit`, for stdio and for a TCP session alike: run our exit handler, stop reading (the read
        loop checks `exited`) and close the writer. The session then ends in Session.close once the
        read loop returns, the same way as when the stream ends without `exit`. (pygls' own exit calls
        sys.exit from inside the handler: a TCP session must end only its own connection, not the
        process other editors may still be connected to.)"""
        self.exited = True  # nothing goes to the client from here on
        if (user_handler := self.fm.features.get(types.EXIT)) is not None:
            yield user_handler, args, None
        if self.writer is not None:
            self.writer.close()

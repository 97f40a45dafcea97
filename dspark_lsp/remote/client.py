"""A small client for an OpenAI-compatible `/v1/completions` endpoint (standard library only).

Streaming (server-sent events) or one JSON answer. The request can be aborted from another thread: a
watcher shuts the socket down when the caller's cancel event is set or the deadline passes, which ends
a blocked read at once (the server sees the connection close and stops generating). Every failure —
refused connection, timeout, HTTP error, an answer that is not the JSON the API promises — is a
`BackendError` with one line a person can act on.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from dspark_lsp.errors import UserError
from dspark_lsp.remote.config import RemoteSettings

MAX_LINE = 1 << 20  # one server-sent event line
MAX_BODY = 8 << 20  # a whole non-streamed answer, or an error body
MAX_TEXT = 1 << 20  # completion text, streamed or not
POLL_S = 0.02  # how often the watcher looks at the cancel flag


class BackendError(UserError):
    """The completions server could not give an answer (one line, for the editor)."""


@dataclass
class Answer:
    text: str
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    first_text_ms: float | None = None  # request sent -> first text received
    total_ms: float = 0.0
    cancelled: bool = False  # the caller's cancel event ended it
    cut: bool = False  # the caller's on_text asked to stop (its own stop rules): the rest was not read


class _Watcher:
    """Shuts the connection's socket down on cancel or at the deadline (from its own thread)."""

    def __init__(self, sock: socket.socket, cancel: threading.Event | None, deadline: float) -> None:
        self.reason: str | None = None
        self._sock = sock
        self._cancel = cancel
        self._deadline = deadline
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dspark-backend-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(POLL_S):
            if self._cancel is not None and self._cancel.is_set():
                self.abort("cancelled")
                return
            if time.monotonic() >= self._deadline:
                self.abort("timeout")
                return

    def abort(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=1.0)


class CompletionsClient:
    def __init__(self, settings: RemoteSettings, api_key: str | None = None) -> None:
        self.settings = settings
        self._api_key = api_key
        parts = urlsplit(settings.endpoint("completions"))
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._base_path = parts.path.rsplit("/", 1)[0]  # .../v1

    @property
    def where(self) -> str:
        return self.settings.url.rstrip("/")

    # ------------------------------------------------------------------------------------ requests
    def models(self, timeout_s: float | None = None) -> list[str]:
        """The model ids the server serves (GET /v1/models)."""
        data = self._json_request("GET", "models", None, timeout_s or self.settings.timeout_s)
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise BackendError(f"{self.where}: /v1/models answered without a data list")
        return [str(m["id"]) for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)]

    def complete(
        self,
        body: dict[str, Any],
        *,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], bool] | None = None,
    ) -> Answer:
        """POST /v1/completions. `on_text(text so far)` is called as text arrives; returning True stops
        reading (the connection is closed, the answer is marked `cut`)."""
        started = time.monotonic()
        deadline = started + self.settings.timeout_s
        conn, watcher = self._open(deadline, cancel)
        answer = Answer("")
        try:
            try:
                response = self._send(conn, "POST", "completions", body)
                if response.status != 200:
                    raise self._http_error(response)
                kind = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
                if kind == "text/event-stream":
                    self._read_stream(response, answer, on_text, started)
                else:
                    data = self._read_json(response)
                    self._take_choice(data, answer, started)
                    if on_text is not None and answer.text:
                        answer.cut = bool(on_text(answer.text))
            except (OSError, http.client.HTTPException) as exc:
                if watcher.reason == "cancelled":
                    answer.cancelled = True
                elif answer.cut:
                    pass  # we closed it ourselves after the cut
                else:
                    raise self._transport_error(exc, watcher.reason) from None
            except BackendError:
                if watcher.reason == "cancelled":
                    answer.cancelled = True
                elif watcher.reason == "timeout":
                    raise self._timeout_error() from None
                else:
                    raise
            if watcher.reason == "cancelled":
                answer.cancelled = True
        finally:
            if answer.cut:
                watcher.abort("cut")
            watcher.stop()
            conn.close()
        answer.total_ms = (time.monotonic() - started) * 1000
        return answer

    # ------------------------------------------------------------------------------------ plumbing
    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout_s, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)

    def _open(
        self, deadline: float, cancel: threading.Event | None
    ) -> tuple[http.client.HTTPConnection, _Watcher]:
        conn = self._connection(max(0.05, deadline - time.monotonic()))
        try:
            conn.connect()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            if time.monotonic() >= deadline:
                raise self._timeout_error() from None
            raise self._transport_error(exc, None) from None
        assert conn.sock is not None
        return conn, _Watcher(conn.sock, cancel, deadline)

    def _headers(self, has_body: bool) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "User-Agent": "dspark-lsp"}
        if has_body:
            headers["Content-Type"] = "application/json"
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _send(
        self, conn: http.client.HTTPConnection, method: str, name: str, body: dict[str, Any] | None
    ) -> http.client.HTTPResponse:
        payload = json.dumps(body).encode("utf-8") if body is not None else None
        conn.request(method, f"{self._base_path}/{name}", body=payload, headers=self._headers(payload is not None))
        return conn.getresponse()

    def _json_request(self, method: str, name: str, body: dict[str, Any] | None, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        conn, watcher = self._open(deadline, None)
        try:
            response = self._send(conn, method, name, body)
            if response.status != 200:
                raise self._http_error(response)
            return self._read_json(response)
        except (OSError, http.client.HTTPException) as exc:
            raise self._transport_error(exc, watcher.reason) from None
        finally:
            watcher.stop()
            conn.close()

    def _read_json(self, response: http.client.HTTPResponse) -> Any:
        raw = response.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            raise BackendError(f"{self.where}: the answer is larger than {MAX_BODY >> 20} MB")
        return self._parse(raw)

    def _parse(self, raw: bytes) -> Any:
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            preview = raw[:80].decode("utf-8", "replace").replace("\n", " ")
            raise BackendError(f"{self.where} answered with something that is not JSON: {preview!r}") from None

    def _take_choice(self, data: Any, answer: Answer, started: float) -> None:
        """Append one answer's (or one stream event's) text; usage and finish_reason when present."""
        if not isinstance(data, dict):
            raise BackendError(f"{self.where}: expected a JSON object, got {type(data).__name__}")
        if "error" in data:
            raise BackendError(f"{self.where}: {_error_text(data)}")
        usage = data.get("usage")
        if isinstance(usage, dict):
            answer.prompt_tokens = _int_or(usage.get("prompt_tokens"), answer.prompt_tokens)
            answer.completion_tokens = _int_or(usage.get("completion_tokens"), answer.completion_tokens)
        choices = data.get("choices")
        if not isinstance(choices, list):
            raise BackendError(f"{self.where}: the answer has no choices list (is this a /v1/completions server?)")
        if not choices:
            return  # the usage-only last event of a stream
        choice = choices[0]
        text = choice.get("text") if isinstance(choice, dict) else None
        if not isinstance(text, str):
            raise BackendError(f"{self.where}: a choice without a text string (is this a /v1/completions server?)")
        if text and answer.first_text_ms is None:
            answer.first_text_ms = round((time.monotonic() - started) * 1000, 2)
        answer.text += text
        if len(answer.text) > MAX_TEXT:
            raise BackendError(f"{self.where}: the completion is longer than {MAX_TEXT} characters")
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            answer.finish_reason = reason

    def _read_stream(
        self,
        response: http.client.HTTPResponse,
        answer: Answer,
        on_text: Callable[[str], bool] | None,
        started: float,
    ) -> None:
        done = False
        while not done:
            line = response.readline(MAX_LINE + 1)
            if not line:
                break
            if len(line) > MAX_LINE:
                raise BackendError(f"{self.where}: a stream event longer than {MAX_LINE >> 20} MB")
            text = line.decode("utf-8", "replace").strip()
            if not text.startswith("data:"):
                continue  # blank separators, comments (": ping"), event names
            payload = text[5:].strip()
            if payload == "[DONE]":
                done = True
                break
            before = len(answer.text)
            self._take_choice(self._parse(payload.encode("utf-8")), answer, started)
            if on_text is not None and len(answer.text) > before and on_text(answer.text):
                answer.cut = True
                return
        if not done and answer.finish_reason is None:
            raise BackendError(f"{self.where}: the stream ended before the completion did")

    # ------------------------------------------------------------------------------------- errors
    def _timeout_error(self) -> BackendError:
        return BackendError(
            f"{self.where} gave no complete answer within {self.settings.timeout_s:g} s (backend.timeoutMs)"
        )

    def _transport_error(self, exc: BaseException, reason: str | None) -> BackendError:
        if reason == "timeout" or isinstance(exc, (socket.timeout, TimeoutError)):
            return self._timeout_error()
        if isinstance(exc, ConnectionRefusedError):
            return BackendError(f"cannot connect to {self.where}: connection refused (is the server running?)")
        if isinstance(exc, socket.gaierror):
            return BackendError(f"cannot connect to {self.where}: unknown host {self._host!r}")
        if isinstance(exc, ssl.SSLError):
            return BackendError(f"cannot connect to {self.where}: TLS error ({exc.reason or exc})")
        if isinstance(exc, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)):
            return BackendError(f"{self.where} closed the connection before answering")
        if isinstance(exc, http.client.HTTPException):
            return BackendError(f"{self.where} sent a malformed HTTP answer ({type(exc).__name__})")
        return BackendError(f"cannot reach {self.where}: {getattr(exc, 'strerror', None) or exc}")

    def _http_error(self, response: http.client.HTTPResponse) -> BackendError:
        try:
            raw = response.read(64 * 1024)
        except (OSError, http.client.HTTPException):
            raw = b""
        detail = ""
        try:
            detail = _error_text(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError):
            detail = raw.decode("utf-8", "replace").strip()
        detail = " ".join(detail.split())[:200]
        hint = {
            401: " (check the key in the variable backend.apiKeyEnv names)",
            403: " (check the key in the variable backend.apiKeyEnv names)",
            404: " (check backend.url and backend.model)",
        }.get(response.status, "")
        text = f"{self.where} answered HTTP {response.status} {response.reason}".rstrip()
        return BackendError(f"{text}{': ' + detail if detail else ''}{hint}")


def _error_text(data: Any) -> str:
    """The message of an OpenAI-style error body ({"error": {"message": ...}}, or vLLM/FastAPI's)."""
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if isinstance(err.get(key), str):
                    return str(err[key])
            detail = err.get("detail")
            if isinstance(detail, list) and detail and isinstance(detail[0], dict):
                return str(detail[0].get("msg", detail[0]))
        if isinstance(err, str):
            return err
    return json.dumps(data)[:200]


def _int_or(value: Any, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default

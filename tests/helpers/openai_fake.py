"""A small OpenAI-compatible completions server for tests (threaded http.server on loopback).

`FakeOpenAI.behaviour` says how the next requests are answered:

* "stream"      : server-sent events, one event per piece of `pieces`, chunked HTTP/1.1, then [DONE]
* "json"        : one JSON answer (what a server does with stream=false)
* "error500"    : HTTP 500 with an OpenAI-style error body
* "garbage"     : HTTP 200 whose body is not JSON; "garbage_stream": an event whose data is not JSON
* "slow"        : waits `delay_s` before sending anything (headers included)
* "no_choices"  : valid JSON without a choices list

Stop strings in the request are honoured the way vLLM does (the text ends before the first one).
Every request body is kept in `requests`; for streams, `disconnected` is set when a write finds the
client gone, and `events_sent` counts the events that went out before that.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-coder"


class FakeOpenAI:
    def __init__(self) -> None:
        self.behaviour = "stream"
        self.pieces: list[str] = ["return", " a", " +", " b", "\n"]
        self.piece_delay_s = 0.0
        self.delay_s = 0.0
        self.models = [MODEL]
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.disconnected = threading.Event()
        self.events_sent = 0
        self.finished_streams = 0
        # Counted by the handler thread after the stream's last bytes: a client that stops reading at
        # `[DONE]` can return before then, so a test waits for the count instead of reading it at once.
        self._finished = threading.Condition()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/v1/models":
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                self._json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in fake.models]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._json(400, {"error": {"message": "request body is not JSON"}})
                    return
                fake.requests.append(body)
                fake.headers.append(dict(self.headers.items()))
                if self.path != "/v1/completions":
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                behaviour = fake.behaviour
                if behaviour == "slow":
                    time.sleep(fake.delay_s)
                    behaviour = "stream" if body.get("stream") else "json"
                if body.get("model") not in fake.models:
                    self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
                elif behaviour == "error500":
                    self._json(500, {"error": {"message": "CUDA out of memory (fake)", "type": "InternalServerError"}})
                elif behaviour == "garbage":
                    self._raw(200, "application/json", b"<html>this is not json</html>")
                elif behaviour == "no_choices":
                    self._json(200, {"id": "x", "object": "text_completion"})
                elif behaviour == "json" or not body.get("stream"):
                    text = fake.text_for(body)
                    self._json(200, {
                        "id": "cmpl-1", "object": "text_completion", "model": MODEL,
                        "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
                    })
                else:
                    self._stream(body, garbage=behaviour == "garbage_stream")

            def _json(self, status: int, data: Any) -> None:
                self._raw(status, "application/json", json.dumps(data).encode())

            def _raw(self, status: int, kind: str, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _stream(self, body: dict[str, Any], garbage: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    if garbage:
                        self._chunk(b"data: {not json at all\n\n")
                        self.wfile.write(b"0\r\n\r\n")  # the last chunk
                        return
                    delay = fake.piece_delay_s  # this stream's pace, whatever later tests set
                    for piece in fake.pieces_for(body):
                        event = {"id": "cmpl-1", "object": "text_completion", "model": MODEL,
                                 "choices": [{"index": 0, "text": piece, "finish_reason": None}]}
                        self._chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
                        fake.events_sent += 1
                        if delay:
                            time.sleep(delay)
                    last = {"id": "cmpl-1", "object": "text_completion", "model": MODEL,
                            "choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}
                    self._chunk(b"data: " + json.dumps(last).encode() + b"\n\n")
                    usage = {"id": "cmpl-1", "object": "text_completion", "model": MODEL, "choices": [],
                             "usage": {"prompt_tokens": 7, "completion_tokens": fake.events_sent, "total_tokens": 9}}
                    self._chunk(b"data: " + json.dumps(usage).encode() + b"\n\n")
                    self._chunk(b"data: [DONE]\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    with fake._finished:
                        fake.finished_streams += 1
                        fake._finished.notify_all()
                except (BrokenPipeError, ConnectionResetError):
                    fake.disconnected.set()
                    self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), name="fake-openai", daemon=True)
        self._thread.start()

    # -- what is answered ------------------------------------------------------------------------
    def pieces_for(self, body: dict[str, Any]) -> list[str]:
        """`pieces`, ending before the first stop string the request names (vLLM drops the stop string)."""
        text = "".join(self.pieces)
        stops = [s for s in body.get("stop") or [] if s and s in text]
        if not stops:
            return list(self.pieces)
        end = min(text.index(s) for s in stops)
        out, used = [], 0
        for piece in self.pieces:
            if used >= end:
                break
            out.append(piece[: end - used])
            used += len(piece)
        return [p for p in out if p]

    def text_for(self, body: dict[str, Any]) -> str:
        return "".join(self.pieces_for(body))

    def reset(self) -> None:
        self.requests.clear()
        self.headers.clear()
        self.disconnected.clear()
        self.events_sent = 0
        self.finished_streams = 0

    def wait_finished(self, count: int, timeout: float = 3.0) -> bool:
        """True once ``count`` streams have been sent to their end (False after ``timeout`` seconds)."""
        with self._finished:
            return self._finished.wait_for(lambda: self.finished_streams >= count, timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""The log path to the client (window/logMessage) never recurses (issue 19).

Sending a message to the client can itself log: pygls reports a failed write through the server's error
hook (which logs), our protocol logs what it does not send after `exit`, and a failed send logs a debug
line. Each such record was forwarded to the client as logMessage, whose send logged again: at
``--log-level debug`` every `exit` recursed to RecursionError and wrote ~130 kB of "--- Logging error ---"
tracebacks to stderr. These tests log while sending, with writers that raise, after the transport
closed, and from a worker thread; and drive the real server process through a whole session at debug.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from dspark_lsp.lsp.channel import Channel, ClientLogHandler
from dspark_lsp.lsp.server import DSparkServer

FIXTURES = Path(__file__).parents[1] / "helpers" / "lsp_fixtures"
pytestmark = pytest.mark.timeout(60)


class RecordingHandler(ClientLogHandler):
    """ClientLogHandler that remembers logging's error path instead of printing a traceback."""

    def __init__(self, channel: Channel) -> None:
        super().__init__(channel, logging.DEBUG)
        self.errors: list[BaseException | None] = []

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802  (logging's name)
        self.errors.append(sys.exc_info()[1])


# A send past this many stops logging and raising, so a recursing log path ends (and fails the test)
# instead of spinning: each level that catches the RecursionError logs it, which recurses again.
MAX_SENDS = 50


class StubServer:
    """Just what Channel calls; `send` decides what a logMessage send does."""

    def __init__(self, send: Any) -> None:
        self.sent: list[str] = []
        self.reentered = 0
        self._depth = 0
        self._send = send

    def window_log_message(self, params: types.LogMessageParams) -> None:
        self.sent.append(params.message)
        if self._depth:
            self.reentered += 1
            return
        if len(self.sent) > MAX_SENDS:
            return
        self._depth += 1
        try:
            self._send(params)
        finally:
            self._depth -= 1


@pytest.fixture
def attach() -> Iterator[Any]:
    """attach(channel) -> a RecordingHandler on the `dspark_lsp` logger at debug (removed afterwards)."""
    ours = logging.getLogger("dspark_lsp")
    old_level, added = ours.level, []

    def attach_(channel: Channel) -> RecordingHandler:
        handler = RecordingHandler(channel)
        ours.addHandler(handler)
        ours.setLevel(logging.DEBUG)
        added.append(handler)
        return handler

    yield attach_
    for handler in added:
        ours.removeHandler(handler)
    ours.setLevel(old_level)


def on_loop(channel: Channel, body: Any) -> None:
    """Bind `channel` to a fresh loop, run `body()` on it, then let queued callbacks run."""

    async def main() -> None:
        channel.bind(asyncio.get_running_loop())
        body()
        for _ in range(5):
            await asyncio.sleep(0)

    asyncio.run(main())


def test_a_send_that_logs_is_not_forwarded_again(attach: Any) -> None:
    log = logging.getLogger("dspark_lsp.test.reentrant")
    stub = StubServer(lambda params: log.warning("while sending %s", params.message[:20]))
    channel = Channel(stub)  # type: ignore[arg-type]
    handler = attach(channel)
    on_loop(channel, lambda: log.info("hello"))
    assert stub.sent == ["hello"]
    assert stub.reentered == 0
    assert handler.errors == []


@pytest.mark.parametrize("error", [ValueError("write to closed file"), RuntimeError("writer failed")])
def test_a_writer_that_raises_costs_one_attempt_per_record(attach: Any, error: Exception) -> None:
    def fail(params: Any) -> None:
        raise error

    log = logging.getLogger("dspark_lsp.test.failing")
    stub = StubServer(fail)
    channel = Channel(stub)  # type: ignore[arg-type]
    handler = attach(channel)
    on_loop(channel, lambda: [log.info("one"), log.error("two")])
    assert len(stub.sent) == 2
    assert handler.errors == []


def test_a_broken_pipe_closes_the_channel(attach: Any) -> None:
    def broken(params: Any) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    log = logging.getLogger("dspark_lsp.test.broken")
    stub = StubServer(broken)
    channel = Channel(stub)  # type: ignore[arg-type]
    handler = attach(channel)
    on_loop(channel, lambda: [log.info("one"), log.info("two"), log.info("three")])
    assert len(stub.sent) == 1  # the client's end is gone: no more tries
    assert channel.closed
    assert handler.errors == []


def test_records_from_a_worker_thread_while_sends_fail(attach: Any) -> None:
    log = logging.getLogger("dspark_lsp.test.worker")

    def fail(params: Any) -> None:
        log.debug("the writer logs too")
        raise ValueError("write to closed file")

    stub = StubServer(fail)
    channel = Channel(stub)  # type: ignore[arg-type]
    handler = attach(channel)

    def from_worker() -> None:
        thread = threading.Thread(target=lambda: [log.info("from the worker %d", i) for i in range(20)])
        thread.start()
        thread.join()

    on_loop(channel, from_worker)
    assert len(stub.sent) == 20
    assert handler.errors == []


class ListWriter:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(data)

    def close(self) -> None:
        pass


def test_logging_after_exit_sends_nothing_and_does_not_recurse(attach: Any) -> None:
    """The real protocol: after `exit` its _send_data logs what it drops; that record used to be sent
    as logMessage, dropped, logged again... until RecursionError."""
    server = DSparkServer(lambda: None)
    writer = ListWriter()
    server.protocol.set_writer(writer)
    sends: list[Any] = []
    send = server.window_log_message

    def capped_send(params: types.LogMessageParams) -> None:
        sends.append(params)
        if len(sends) <= MAX_SENDS:
            send(params)

    server.window_log_message = capped_send  # type: ignore[method-assign]
    handler = attach(server.session.channel)
    log = logging.getLogger("dspark_lsp.test.after_exit")

    def body() -> None:
        log.info("before exit")
        server.dspark_protocol.exited = True  # what `exit` sets, without closing the channel
        log.info("after exit")

    on_loop(server.session.channel, body)
    assert [b"before exit" in chunk for chunk in writer.chunks] == [True]
    assert len(sends) == 2  # one try for each record, none for what the dropped send logged
    assert handler.errors == []


def _frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read_until_id(stream: Any, msg_id: int) -> None:
    while True:
        length = None
        while True:
            line = stream.readline()
            assert line, "the server closed stdout before answering"
            if not line.strip():
                break
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        assert length is not None
        if json.loads(stream.read(length)).get("id") == msg_id:
            return


def test_a_whole_session_at_debug_writes_no_logging_error() -> None:
    """initialize, a document, shutdown and exit on the real server process at --log-level debug: the
    exit handler's own log line started the recursion, every time."""
    proc = subprocess.Popen(
        [sys.executable, str(FIXTURES / "fake_server.py"), "debug"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(
            _frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}})
        )
        proc.stdin.flush()
        _read_until_id(proc.stdout, 1)
        doc = {"uri": "file:///tmp/x.py", "languageId": "python", "version": 1, "text": "def f(\n"}
        for message in (
            {"jsonrpc": "2.0", "method": "initialized", "params": {}},
            {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": doc}},
            {"jsonrpc": "2.0", "id": 2, "method": "shutdown"},
        ):
            proc.stdin.write(_frame(message))
        proc.stdin.flush()
        _read_until_id(proc.stdout, 2)
        proc.stdin.write(_frame({"jsonrpc": "2.0", "method": "exit"}))
        proc.stdin.flush()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = err.decode("utf-8", errors="replace")
    assert proc.returncode == 0, stderr[-2000:]
    assert "Logging error" not in stderr and "RecursionError" not in stderr, stderr[:2000]

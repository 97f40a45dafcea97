"""The router table (dspark_lsp/lsp/router.py) and the one way a session ends (Session.close).

The table is what pygls serves: every route's handler is registered, bound to the server's session, and
nothing else is; every custom method the editors send is routed. However a session ends (`exit`, or the
transport closing without it, on stdio or on a TCP connection), it ends in Session.close, once.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.lsp import router
from dspark_lsp.lsp.backend import Backend
from dspark_lsp.lsp.channel import STATUS_METHOD
from dspark_lsp.lsp.server import EXIT_GRACE_S, DSparkServer, create_server
from dspark_lsp.lsp.session import Session
from dspark_lsp.lsp.tcp import TcpListener

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(60)]

# A backend that is never asked for a model: no test here sends `initialized`.
BACKEND = Backend(
    config_from_settings=lambda settings, base: ({}, []),  # type: ignore[arg-type,return-value]
    make_request=dict,  # type: ignore[arg-type]
    load=lambda config, progress: None,  # type: ignore[arg-type,return-value]
)


def test_every_route_is_served_by_its_handler_bound_to_the_session() -> None:
    server = create_server(backend=BACKEND)
    features = server.protocol.fm.features
    assert set(features) == {route.method for route in router.ROUTES}
    assert len(router.ROUTES) == len(features)  # no method routed twice
    for route in router.ROUTES:
        bound = features[route.method]
        assert bound.func is route.handler and bound.args == (server.session,), route.method
        # pygls runs a coroutine function as a task, anything else in place: the kind decides that.
        assert inspect.iscoroutinefunction(bound) == (route.kind == router.ASYNC), route.method
        if route.options is not None:
            assert server.protocol.fm.feature_options[route.method] is route.options


def test_a_route_whose_kind_is_wrong_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def handler(session: Session, params: Any) -> None:
        pass

    monkeypatch.setattr(router, "ROUTES", (router.Route("dspark/example", handler, router.SYNC),))
    server = DSparkServer(lambda: BACKEND)
    with pytest.raises(TypeError, match="dspark/example"):
        router.register(server, server.session)


def _editor_methods() -> set[str]:
    """The custom methods the VS Code and Neovim clients name in their sources."""
    sources = [*(REPO / "editors/vscode/src").rglob("*.ts"), *(REPO / "editors/nvim").rglob("*.lua")]
    pattern = re.compile(r"""["'](dspark/\w+|textDocument/did\w*Completion)["']""")
    return {m.group(1) for path in sources for m in pattern.finditer(path.read_text(encoding="utf-8"))}


def test_every_custom_method_the_editors_send_is_routed() -> None:
    named = _editor_methods()
    # The scan must see the editors' methods at all (a moved source folder would pass vacuously).
    assert {"dspark/stats", "dspark/cursor", "dspark/didAcceptCompletion", STATUS_METHOD} <= named
    sent = named - {STATUS_METHOD}  # dspark/status goes the other way: the server sends it
    missing = sent - {route.method for route in router.ROUTES}
    assert not missing, f"the editors send methods no route serves: {sorted(missing)}"


# -- the one way a session ends -----------------------------------------------------------------------


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


INITIALIZE = frame({"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}})
SHUTDOWN = frame({"id": 2, "method": "shutdown"})
EXIT = frame({"method": "exit"})
OPEN = frame(
    {
        "method": "textDocument/didOpen",
        "params": {"textDocument": {"uri": "file:///after.py", "languageId": "python", "version": 1, "text": "x"}},
    }
)


@pytest.fixture
def closes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Session, float]]:
    """Every Session.close call: (session, grace_s)."""
    calls: list[tuple[Session, float]] = []
    real_close = Session.close

    def close(self: Session, grace_s: float = 0.0) -> None:
        calls.append((self, grace_s))
        real_close(self, grace_s)

    monkeypatch.setattr(Session, "close", close)
    return calls


class KeptOpen(io.BytesIO):
    """stdout for start_io: remembers being closed but keeps what was written readable."""

    closed_by_server = False

    def close(self) -> None:
        self.closed_by_server = True


def _answer_ids(written: bytes) -> list[Any]:
    bodies = re.split(rb"Content-Length: \d+\r\n(?:[^\r\n]+\r\n)*\r\n", written)
    return [json.loads(body)["id"] for body in bodies if body and "id" in json.loads(body)]


def test_stdio_exit_ends_the_session_in_session_close(closes: list[tuple[Session, float]]) -> None:
    server = create_server(backend=BACKEND)
    stdout = KeptOpen()
    server.start_io(io.BytesIO(INITIALIZE + SHUTDOWN + EXIT + OPEN), stdout)
    assert closes == [(server.session, EXIT_GRACE_S)]
    assert server.session.exit_code == 0  # exit after shutdown
    assert server.session.channel.closed
    assert "file:///after.py" not in server.session.docs  # reading stopped at exit
    assert stdout.closed_by_server  # exit closes the writer
    assert _answer_ids(stdout.getvalue()) == [1, 2]


def test_stdio_end_of_stream_ends_the_session_in_session_close(closes: list[tuple[Session, float]]) -> None:
    server = create_server(backend=BACKEND)
    stdout = KeptOpen()
    server.start_io(io.BytesIO(INITIALIZE + OPEN), stdout)  # then EOF, no exit
    assert closes == [(server.session, EXIT_GRACE_S)]
    assert server.session.exit_code == 1  # no shutdown, no exit: an error per the LSP spec
    assert server.session.channel.closed
    assert "file:///after.py" in server.session.docs  # every frame before the end was read
    assert not stdout.closed_by_server
    assert _answer_ids(stdout.getvalue()) == [1]


def _wait_for(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_tcp_exit_and_disconnect_both_end_their_session_in_session_close(
    closes: list[tuple[Session, float]],
) -> None:
    template = create_server(backend=BACKEND)
    listener = TcpListener(template.new_connection, "127.0.0.1", 0)
    thread = threading.Thread(target=asyncio.run, args=(listener.run(),), daemon=True)
    thread.start()
    _wait_for(lambda: listener.addresses, "the listener never bound")
    port = listener.addresses[0][1]

    crashed = socket.create_connection(("127.0.0.1", port))  # an editor that goes away without exit
    crashed.sendall(INITIALIZE)
    _wait_for(lambda: listener.connections, "the first editor never connected")
    crashed.close()
    _wait_for(lambda: len(closes) == 1, "a disconnect did not end its session")
    assert thread.is_alive()  # the server keeps listening: the editor may reconnect

    leaving = socket.create_connection(("127.0.0.1", port))
    leaving.sendall(INITIALIZE + SHUTDOWN + EXIT)
    thread.join(timeout=20)
    leaving.close()
    assert not thread.is_alive(), "the last editor's exit did not end the listener"
    assert len(closes) == 2 and closes[0][0] is not closes[1][0]  # one per connection, each once
    assert all(grace == 0.0 for _, grace in closes)  # a TCP session never blocks the shared loop
    assert template.session not in {session for session, _ in closes}
    assert listener.exit_code == 0  # the exiting session's code: exit after shutdown
    assert closes[1][0].exit_code == 0 and closes[0][0].exit_code == 1


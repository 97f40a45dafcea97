"""The server process ends with the LSP spec's exit code while a model call is still running.

The soak (bench/soak.py) saw the real server exit with -6 (SIGABRT) after `shutdown` + `exit`: the
worker thread was still inside a torch forward (a prefill slice cannot be interrupted), the interpreter
finalized around it, and CPython's pthread_exit of that daemon thread unwound through a noexcept C++
destructor ("terminate called without an active exception"). Here a service that runs torch for 30 s
and ignores its cancel flag (the worst case of one long forward) stands in for the real model; each
way a session can end is tried while it runs.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.bench.lsp_replay import StdioClient

REPO = Path(__file__).resolve().parents[2]

# A server whose service is busy in torch for BUSY_S seconds per completion and never looks at cancel.
SERVER_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    from typing import Any

    import torch

    from dspark_lsp.lsp.backend import Backend
    from dspark_lsp.lsp.server import create_server, run_server

    MARKER = Path(sys.argv[1])
    BUSY_S = 30.0
    torch.set_num_threads(1)  # one core is enough to be inside torch; the machine is shared


    class Request:
        def __init__(self, **fields: Any) -> None:
            self.__dict__.update(fields)


    class Result:
        text = "x"
        cancelled = False
        stats: dict = {}


    class BusyService:
        notice = None

        def complete(self, req: Any, cancel: Any = None, on_text: Any = None) -> Result:
            a = torch.randn(384, 384)
            MARKER.write_text("in torch")
            end = time.monotonic() + BUSY_S
            while time.monotonic() < end:  # one long, uninterruptible forward: cancel is not polled
                a = torch.tanh(a @ a)
            return Result()

        def update_config(self, config: Any) -> None:
            pass

        def recent_stats(self) -> list:
            return []

        def take_notice(self) -> None:
            return None

        def close(self) -> None:
            pass


    backend = Backend(
        config_from_settings=lambda settings, base: ({}, []),
        make_request=Request,
        load=lambda config, progress: BusyService(),
    )
    server = create_server(backend=backend)
    tcp = ("127.0.0.1", 0) if sys.argv[2:] == ["--tcp"] else None
    sys.exit(run_server(stdio=tcp is None, tcp=tcp, log_level="info", log_file=None, server=server))
    """
)

URI = "file:///tmp/busy.py"
OPEN_PARAMS = {
    "textDocument": {"uri": URI, "languageId": "python", "version": 1, "text": "def f(x):\n    return "}
}
# triggerKind 1 (Invoked): no debounce, the request goes straight to the worker.
COMPLETE_PARAMS = {
    "textDocument": {"uri": URI},
    "position": {"line": 1, "character": 11},
    "context": {"triggerKind": 1},
}


def _start_busy_decode(tmp_path: Path) -> tuple[StdioClient, Path]:
    """A server that is ready, with a completion running in torch (the marker file says so)."""
    script = tmp_path / "busy_server.py"
    script.write_text(SERVER_SCRIPT)
    marker = tmp_path / "in_torch"
    stderr_log = tmp_path / "stderr.log"
    client = StdioClient([sys.executable, str(script), str(marker)], str(stderr_log))
    client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}}).result(timeout=60)
    client.notify("initialized", {})
    client.wait_status({"ready"}, 60)
    client.notify("textDocument/didOpen", OPEN_PARAMS)
    client.send_request("textDocument/inlineCompletion", COMPLETE_PARAMS)
    _wait_in_torch(marker, client.proc)
    return client, stderr_log


def _wait_in_torch(marker: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the completion never reached the service"
        assert proc.poll() is None, "the server died before the completion started"
        time.sleep(0.05)
    time.sleep(0.3)  # well inside the torch loop


def _end(client: StdioClient, how: str) -> None:
    if how == "shutdown+exit":
        client.request("shutdown", None).result(timeout=10)
        client.notify("exit", None)
    elif how == "exit without shutdown":
        client.notify("exit", None)
    elif how == "stdin closed":
        assert client.proc.stdin is not None
        client.proc.stdin.close()
    elif how == "SIGTERM":
        client.proc.send_signal(signal.SIGTERM)
    else:
        raise AssertionError(how)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("shutdown+exit", 0),  # LSP: exit after shutdown is 0
        ("exit without shutdown", 1),  # LSP: exit without shutdown is 1
        ("stdin closed", 1),  # the editor went away: no shutdown was asked for
        ("SIGTERM", -signal.SIGTERM),  # the default disposition: killed by the signal, never an abort
    ],
)
def test_exit_while_a_model_call_runs(tmp_path: Path, how: str, expected: int) -> None:
    client, stderr_log = _start_busy_decode(tmp_path)
    try:
        started = time.monotonic()
        _end(client, how)
        try:
            code = client.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server did not end within 20 s of {how} (the busy call lasts 30 s)")
        took = time.monotonic() - started
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
            client.proc.wait()
        _close_quietly(client)
    stderr = stderr_log.read_text(errors="replace")
    assert "terminate called" not in stderr, stderr[-2000:]
    # The request the exit cancelled is not answered on the closed stream (was a traceback per request).
    assert "Error sending data" not in stderr, stderr[-2000:]
    assert code == expected, f"exit code {code} after {how}; stderr tail:\n{stderr[-2000:]}"
    # Bounded: the 2 s grace for the worker plus the leftover wait and the process's own teardown,
    # not the 30 s the call would take.
    assert took < 10, f"{how}: the server took {took:.1f} s to end"
    if expected >= 0:
        assert "still running after exit" in stderr  # it took the hard-exit path, and said so


def _close_quietly(client: Any) -> None:
    stderr_file = getattr(client, "_stderr_file", None)
    if stderr_file is not None:
        stderr_file.close()


class _TcpEditor:
    """A blocking JSON-RPC client over one TCP connection (reads in order; no server requests here)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.stream = self.sock.makefile("rb")
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def request(self, method: str, params: Any) -> int:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    def read_until(self, wanted: Any) -> dict[str, Any]:
        while True:
            length = 0
            while True:
                line = self.stream.readline()
                assert line, "the server closed the connection"
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
                elif line.strip() == b"" and length:
                    break
            message = json.loads(self.stream.read(length))
            if wanted(message):
                return dict(message)

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


@pytest.mark.slow
def test_tcp_exit_while_a_session_runs_a_model_call(tmp_path: Path) -> None:
    """--tcp: each editor's session has its own worker; the last editor's exit ends the process."""
    script = tmp_path / "busy_server.py"
    script.write_text(SERVER_SCRIPT)
    marker = tmp_path / "in_torch"
    stderr_log = tmp_path / "stderr.log"
    with stderr_log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(marker), "--tcp"], stdin=subprocess.DEVNULL, stderr=err
        )
    editor: _TcpEditor | None = None
    try:
        deadline = time.monotonic() + 60
        while (found := re.search(r"listening on 127\.0\.0\.1:(\d+)", stderr_log.read_text())) is None:
            assert time.monotonic() < deadline and proc.poll() is None, stderr_log.read_text()[-2000:]
            time.sleep(0.05)
        editor = _TcpEditor(int(found.group(1)))
        init = editor.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        editor.read_until(lambda m: m.get("id") == init)
        editor.send({"method": "initialized", "params": {}})
        editor.read_until(
            lambda m: m.get("method") == "dspark/status" and m["params"].get("state") == "ready"
        )
        editor.send({"method": "textDocument/didOpen", "params": OPEN_PARAMS})
        editor.request("textDocument/inlineCompletion", COMPLETE_PARAMS)
        _wait_in_torch(marker, proc)
        started = time.monotonic()
        shutdown = editor.request("shutdown", None)
        editor.read_until(lambda m: m.get("id") == shutdown)
        editor.send({"method": "exit", "params": None})
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("the server did not end within 20 s of exit (the busy call lasts 30 s)")
        took = time.monotonic() - started
    finally:
        if editor is not None:
            editor.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = stderr_log.read_text(errors="replace")
    assert "terminate called" not in stderr, stderr[-2000:]
    assert code == 0, f"exit code {code}; stderr tail:\n{stderr[-2000:]}"
    assert took < 10, f"the server took {took:.1f} s to end"

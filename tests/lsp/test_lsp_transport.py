"""Transports and logging: --tcp, --log-file, --log-level, and requests after shutdown."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parents[1] / "helpers" / "lsp_fixtures"
pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.timeout(60)]


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any]:
    length = 0
    while True:
        line = await asyncio.wait_for(reader.readline(), 15)
        if not line:
            raise EOFError
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        elif line.strip() == b"" and length:
            return json.loads(await reader.readexactly(length))


async def response(reader: asyncio.StreamReader, writer: Any, msg_id: int) -> dict[str, Any]:
    while True:
        message = await read_message(reader)
        if "method" in message and "id" in message:
            writer.write(frame({"id": message["id"], "result": None}))
        elif message.get("id") == msg_id and "method" not in message:
            return message


INIT = {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_tcp_transport_serves_a_session() -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(FIXTURES / "fake_server.py"),
        "info",
        "--tcp",
        f"127.0.0.1:{port}",
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        # Up to a minute: importing the server alone takes ~10 s at nice 19 on a loaded 2-core host
        # (5 s was too short there).
        deadline = time.monotonic() + 60
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise AssertionError("the server never listened") from None
                await asyncio.sleep(0.05)
        writer.write(frame(INIT))
        reply = await response(reader, writer, 1)
        assert "inlineCompletionProvider" in reply["result"]["capabilities"]
        assert reply["result"]["serverInfo"]["name"] == "dspark-lsp"
        writer.write(frame({"id": 2, "method": "shutdown", "params": None}))
        await response(reader, writer, 2)
        writer.write(frame({"method": "exit", "params": None}))
        await writer.drain()
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_log_file_and_requests_after_shutdown(tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(FIXTURES / "fake_server.py"),
        "debug",
        "--log-file",
        str(log_file),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(frame(INIT))
        await response(proc.stdout, proc.stdin, 1)
        proc.stdin.write(frame({"id": 2, "method": "shutdown", "params": None}))
        await response(proc.stdout, proc.stdin, 2)
        # After shutdown a request gets an error instead of silence.
        proc.stdin.write(frame({"id": 3, "method": "dspark/stats", "params": {}}))
        reply = await response(proc.stdout, proc.stdin, 3)
        assert reply["error"]["code"] == -32600
        proc.stdin.write(frame({"method": "exit", "params": None}))
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    logged = log_file.read_text()
    assert "initialize from" in logged and "shutdown requested" in logged


async def test_bad_log_level_is_a_one_line_error() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dspark_lsp.lsp",
        "--stdio",
        "--log-level",
        "loud",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert (
        err.decode().strip()
        == "dspark-lsp: error: unknown log level 'loud'; use one of error, warning, info, debug"
    )
    assert out == b""

"""Bad input over the wire: the server answers with an error or an empty result and stays up.

A raw JSON-RPC client (not pytest-lsp) so we can send bytes no well-behaved client would.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

FIXTURES = Path(__file__).parents[1] / "helpers" / "lsp_fixtures"
pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.timeout(60)]
URI = "file:///tmp/dspark/bad.py"


class RawClient:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.notifications: list[dict[str, Any]] = []
        self.next_id = 0

    @classmethod
    async def start(cls) -> RawClient:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(FIXTURES / "fake_server.py"),
            "info",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        return cls(proc)

    def send_bytes(self, body: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def send(self, message: dict[str, Any]) -> None:
        self.send_bytes(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def request(self, method: str, params: Any) -> int:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    def notify(self, method: str, params: Any) -> None:
        self.send({"method": method, "params": params})

    async def read(self, timeout: float = 10.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        length = 0
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
            if not line:
                raise EOFError("server closed its stdout")
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            elif line in (b"\r\n", b"\n") and length:
                return json.loads(await asyncio.wait_for(self.proc.stdout.readexactly(length), timeout))

    async def response(self, msg_id: int | None, timeout: float = 10.0) -> dict[str, Any]:
        """Wait for the response with `msg_id`, answering server->client requests on the way."""
        while True:
            message = await self.read(timeout)
            if "method" in message and "id" in message:  # e.g. window/workDoneProgress/create
                self.send({"id": message["id"], "result": None})
            elif "method" in message:
                self.notifications.append(message)
            elif message.get("id") == msg_id:
                return message

    async def wait_ready(self) -> None:
        while not any(
            n["method"] == "dspark/status" and n["params"]["state"] == "ready" for n in self.notifications
        ):
            message = await self.read()
            if "method" in message and "id" in message:
                self.send({"id": message["id"], "result": None})
            elif "method" in message:
                self.notifications.append(message)

    async def initialize(self) -> None:
        msg_id = self.request(
            "initialize",
            {
                "processId": None,
                "rootUri": None,
                "capabilities": {},
                "initializationOptions": {"debounceMs": 0},
            },
        )
        assert "result" in await self.response(msg_id)
        self.notify("initialized", {})
        await self.wait_ready()

    async def inline(self, line: int, character: int, uri: str = URI) -> dict[str, Any]:
        msg_id = self.request(
            "textDocument/inlineCompletion",
            {
                "textDocument": {"uri": uri},
                "position": {"line": line, "character": character},
                "context": {"triggerKind": 2},
            },
        )
        return await self.response(msg_id)

    async def alive(self) -> None:
        """The server still answers a normal request correctly."""
        reply = await self.inline(0, 1)
        assert reply["result"]["items"][0]["insertText"] == "<1|x>"

    async def close(self) -> int:
        msg_id = self.request("shutdown", None)
        await self.response(msg_id)
        self.notify("exit", None)
        return await asyncio.wait_for(self.proc.wait(), 5)


@pytest_asyncio.fixture
async def raw():
    client = await RawClient.start()
    await client.initialize()
    client.notify(
        "textDocument/didOpen",
        {"textDocument": {"uri": URI, "languageId": "python", "version": 1, "text": "x = 1\nprint(x)\n"}},
    )
    yield client
    if client.proc.returncode is None:
        client.proc.kill()
        await client.proc.wait()


async def test_malformed_json_gets_a_parse_error(raw: RawClient) -> None:
    raw.send_bytes(b'{"jsonrpc": "2.0", "id": 99, "method": ')
    reply = await raw.response(None)
    assert reply["error"]["code"] == -32700
    await raw.alive()


async def test_json_that_is_not_a_message_gets_invalid_request(raw: RawClient) -> None:
    raw.send_bytes(b"[1, 2, 3]")
    assert (await raw.response(None))["error"]["code"] == -32600
    raw.send_bytes(b'{"id": 7, "method": "textDocument/inlineCompletion"}')  # no "jsonrpc"
    assert (await raw.response(7))["error"]["code"] == -32600
    await raw.alive()


async def test_unknown_method_is_method_not_found_and_unknown_notification_ignored(raw: RawClient) -> None:
    msg_id = raw.request("dspark/noSuchThing", {})
    assert (await raw.response(msg_id))["error"]["code"] == -32601
    raw.notify("dspark/noSuchNotification", {"x": 1})
    await raw.alive()


async def test_invalid_params_get_an_error_on_the_request_id(raw: RawClient) -> None:
    msg_id = raw.request("textDocument/inlineCompletion", {"textDocument": {"uri": URI}, "position": "here"})
    reply = await raw.response(msg_id)
    assert reply["error"]["code"] == -32602
    await raw.alive()


async def test_positions_outside_the_document_are_empty(raw: RawClient) -> None:
    assert (await raw.inline(50, 0))["result"]["items"] == []
    # Past the end of a line clamps to the line end (the LSP rule): line 0 is "x = 1" (5 chars).
    assert (await raw.inline(0, 500))["result"]["items"][0]["insertText"] == "<5| 1>"
    # Negative numbers are not LSP uintegers: an error on the request, the server stays up.
    assert "error" in await raw.inline(-1, 0)
    await raw.alive()


async def test_unopened_document_is_empty(raw: RawClient) -> None:
    assert (await raw.inline(0, 0, uri="file:///never/opened.py"))["result"]["items"] == []
    raw.notify(
        "textDocument/didChange",
        {"textDocument": {"uri": "file:///never/opened.py", "version": 2}, "contentChanges": [{"text": "y"}]},
    )
    await raw.alive()


async def test_huge_line_is_served(raw: RawClient) -> None:
    line = "x" * 300_000
    raw.notify(
        "textDocument/didOpen",
        {
            "textDocument": {
                "uri": "file:///tmp/huge.js",
                "languageId": "javascript",
                "version": 1,
                "text": line,
            }
        },
    )
    reply = await raw.inline(0, 300_000, uri="file:///tmp/huge.js")
    text = reply["result"]["items"][0]["insertText"]
    # The service got a window around the cursor, not 300k characters.
    offset = int(text[1:].split("|")[0])
    assert 60_000 <= offset <= 72_000 and text.endswith("|xx>")
    await raw.alive()


async def test_edit_with_an_out_of_range_range_clamps(raw: RawClient) -> None:
    raw.notify(
        "textDocument/didChange",
        {
            "textDocument": {"uri": URI, "version": 2},
            "contentChanges": [
                {
                    "range": {"start": {"line": 99, "character": 0}, "end": {"line": 99, "character": 5}},
                    "text": "#",
                }
            ],
        },
    )
    # Appended at the end: the document is now "x = 1\nprint(x)\n#" and line 2 exists.
    assert (await raw.inline(2, 1))["result"]["items"][0]["insertText"] == "<16|\n#>"


async def test_exit_without_shutdown_exits_nonzero(raw: RawClient) -> None:
    raw.notify("exit", None)
    assert await asyncio.wait_for(raw.proc.wait(), 5) == 1


async def test_shutdown_then_exit_is_zero(raw: RawClient) -> None:
    assert await raw.close() == 0

"""Two editors on one `--tcp` server (issue 19): answers never cross, documents stay per editor.

What the server defines (dspark_lsp/lsp/tcp.py, `TcpListener`): every connection is its own session — its own
initialize, settings, document mirror and models — so a file open in both editors has one mirror per
editor, each equal to that editor's buffer. `exit` from one editor ends only its connection; the process
ends when the last connected editor exits. `--tcp` listens on 127.0.0.1 unless a host is named, and says
where it listens on stderr.

The server here is the real one with the fake service (tests/helpers/lsp_fixtures), whose answers encode the
offset and the two characters before the cursor that the service received: an answer that went to the
wrong editor, or was computed on the other editor's text, shows.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.cli import main as cli_main
from dspark_lsp.lsp import server as server_module
from dspark_lsp.lsp.transport_args import parse_tcp

FIXTURES = Path(__file__).parents[1] / "helpers" / "lsp_fixtures"
pytestmark = [pytest.mark.timeout(120)]
async_test = pytest.mark.asyncio(loop_scope="function")
SHARED = "file:///tmp/dspark/shared.py"


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Editor:
    """One TCP client: a reader task files answers by id; everything else is kept for inspection."""

    def __init__(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.name = name
        self.reader, self.writer = reader, writer
        self.answers: dict[int, list[dict[str, Any]]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.next_id = 0
        self.changed = asyncio.Event()
        self.task = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, name: str, port: int) -> Editor:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(name, reader, writer)

    async def _read(self) -> None:
        while True:
            length = 0
            while True:
                line = await self.reader.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                elif line.strip() == b"" and length:
                    break
            message = json.loads(await self.reader.readexactly(length))
            if "method" in message and "id" in message:
                self.writer.write(frame({"id": message["id"], "result": None}))
            elif "method" in message:
                self.notifications.append(message)
            else:
                self.answers.setdefault(message["id"], []).append(message)
            self.changed.set()

    def request(self, method: str, params: Any) -> int:
        # Both editors count ids from 1, as real editors do: the same id is in flight on both.
        self.next_id += 1
        self.writer.write(frame({"id": self.next_id, "method": method, "params": params}))
        return self.next_id

    def notify(self, method: str, params: Any) -> None:
        self.writer.write(frame({"method": method, "params": params}))

    async def answer(self, msg_id: int, timeout: float = 20) -> dict[str, Any]:
        async def wait() -> dict[str, Any]:
            while msg_id not in self.answers:
                self.changed.clear()
                if self.task.done():
                    raise AssertionError(f"{self.name}: connection closed before answer {msg_id}")
                await self.changed.wait()
            return self.answers[msg_id][0]

        return await asyncio.wait_for(wait(), timeout)

    async def initialize(self, model: str = "default") -> None:
        msg_id = self.request(
            "initialize",
            {
                "processId": None,
                "rootUri": None,
                "capabilities": {},
                "clientInfo": {"name": self.name},
                "initializationOptions": {"debounceMs": 0, "model": model},
            },
        )
        assert "result" in await self.answer(msg_id)
        self.notify("initialized", {})

        async def ready() -> None:
            while not any(
                n["method"] == "dspark/status" and n["params"]["state"] == "ready" for n in self.notifications
            ):
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(ready(), 30)

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}},
        )

    def change(self, uri: str, version: int, text: str) -> None:
        self.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]},
        )

    def inline(self, uri: str, line: int, character: int) -> int:
        return self.request(
            "textDocument/inlineCompletion",
            {
                "textDocument": {"uri": uri},
                "position": {"line": line, "character": character},
                "context": {"triggerKind": 1},
            },
        )

    async def mirror(self, uri: str) -> Any:
        return (await self.answer(self.request("dspark/documentText", {"textDocument": {"uri": uri}})))[
            "result"
        ]

    async def close(self) -> None:
        await self.answer(self.request("shutdown", None))
        self.notify("exit", None)
        await self.writer.drain()
        await asyncio.wait_for(self.task, 10)  # the server closes this connection after exit

    def check_once(self) -> None:
        twice = {i: a for i, a in self.answers.items() if len(a) > 1}
        assert not twice, f"{self.name}: answered more than once: {twice}"
        assert set(self.answers) <= set(range(1, self.next_id + 1)), f"{self.name}: answers to ids never sent"


async def start_server(*extra: str) -> tuple[asyncio.subprocess.Process, int, list[bytes]]:
    """The fake-service server on a system-chosen port; returns it, the port and its stderr lines."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(FIXTURES / "fake_server.py"),
        "info",
        "--tcp",
        "127.0.0.1:0",
        *extra,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    lines: list[bytes] = []
    while True:
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert line, f"the server ended before listening: {b''.join(lines)!r}"
        lines.append(line)
        if match := re.search(rb"listening on 127\.0\.0\.1:(\d+)", line):
            port = int(match.group(1))
            break

    async def drain() -> None:  # keep reading stderr so the server never blocks on a full pipe
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            lines.append(line)

    asyncio.ensure_future(drain())
    return proc, port, lines


@async_test
async def test_two_editors_interleaved_on_different_and_the_same_document() -> None:
    proc, port, lines = await start_server()
    try:
        assert b"loopback only" in b"".join(lines)
        a = await Editor.connect("editor-a", port)
        b = await Editor.connect("editor-b", port)
        await asyncio.gather(a.initialize(), b.initialize())

        # Different documents, and the same URI with different unsaved text in each editor.
        a.open("file:///tmp/dspark/a.py", "alpha = 1\n")
        b.open("file:///tmp/dspark/b.py", "beta_beta = 2\n")
        a.open(SHARED, "AAAA\n")
        b.open(SHARED, "bbbbbbbb\n")
        for round_ in range(20):
            # Interleaved, without waiting: the same ids are in flight on both connections, and both
            # editors ask about the shared URI at once (one editor's request must not cancel the
            # other's as "superseded": cancel-previous is per editor).
            a.change(SHARED, round_ + 2, "A" * (round_ + 4) + "\n")
            ids_a = [a.inline(SHARED, 0, round_ + 4), a.inline("file:///tmp/dspark/a.py", 0, 5)]
            ids_b = [b.inline(SHARED, 0, round_ + 8), b.inline("file:///tmp/dspark/b.py", 0, 9)]
            b.change(SHARED, round_ + 2, "b" * (round_ + 9) + "\n")
            got_a = [await a.answer(i) for i in ids_a]
            got_b = [await b.answer(i) for i in ids_b]
            texts_a = [r["result"]["items"][0]["insertText"] for r in got_a]
            texts_b = [r["result"]["items"][0]["insertText"] for r in got_b]
            # "<OFFSET|TAIL>": each answer was computed on its own editor's text.
            assert texts_a == [f"<{round_ + 4}|AA>", "<5|ha>"], texts_a
            assert texts_b == [f"<{round_ + 8}|bb>", "<9|ta>"], texts_b
        assert await a.mirror(SHARED) == {"uri": SHARED, "version": 21, "text": "A" * 23 + "\n"}
        assert await b.mirror(SHARED) == {"uri": SHARED, "version": 21, "text": "b" * 28 + "\n"}
        # Each session holds only its own documents.
        assert await a.mirror("file:///tmp/dspark/b.py") is None
        assert await b.mirror("file:///tmp/dspark/a.py") is None
        stats_a = (await a.answer(a.request("dspark/stats", {})))["result"]
        stats_b = (await b.answer(b.request("dspark/stats", {})))["result"]
        assert stats_a["documents"] == 2 and stats_b["documents"] == 2
        assert stats_a["counters"]["requests"] == 40 and stats_b["counters"]["requests"] == 40
        a.check_once()
        b.check_once()

        # One editor leaves (shutdown + exit): the other keeps working, and the process stays up.
        await a.close()
        assert proc.returncode is None
        again = await b.answer(b.inline(SHARED, 0, 3))
        assert again["result"]["items"][0]["insertText"] == "<3|bb>"
        await b.close()
        # The last editor said exit after shutdown: the process ends with 0.
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@async_test
async def test_an_editor_that_vanishes_leaves_the_server_to_the_next_one() -> None:
    proc, port, _ = await start_server()
    try:
        a = await Editor.connect("crashing", port)
        await a.initialize()
        a.open(SHARED, "crash\n")
        a.inline(SHARED, 0, 5)
        a.writer.close()  # no shutdown, no exit: the editor died
        await asyncio.sleep(0.3)
        assert proc.returncode is None
        b = await Editor.connect("restarted", port)
        await b.initialize()
        assert await b.mirror(SHARED) is None  # a new session: nothing of the dead one's state
        b.open(SHARED, "fresh\n")
        reply = await b.answer(b.inline(SHARED, 0, 5))
        assert reply["result"]["items"][0]["insertText"] == "<5|sh>"
        await b.close()
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@async_test
async def test_a_slow_completion_in_one_editor_does_not_hold_up_the_other() -> None:
    """Sessions have their own worker thread: a long decode for one editor never queues the other's."""
    proc, port, _ = await start_server()
    try:
        slow = await Editor.connect("slow", port)
        fast = await Editor.connect("fast", port)
        await asyncio.gather(slow.initialize(model="slow"), fast.initialize())
        slow.open(SHARED, "x = 1\n")
        fast.open(SHARED, "y = 2\n")
        slow_id = slow.inline(SHARED, 0, 5)  # 64 rounds of 50 ms: ~3 s
        await asyncio.sleep(0.2)
        started = asyncio.get_running_loop().time()
        reply = await fast.answer(fast.inline(SHARED, 0, 5))
        took = asyncio.get_running_loop().time() - started
        assert reply["result"]["items"][0]["insertText"] == "<5| 2>"
        assert slow_id not in slow.answers, "the slow decode ended first: the test shows nothing"
        assert took < 2.0, f"the fast editor waited {took:.1f} s behind the slow one"
        assert (await slow.answer(slow_id, 30))["result"]["items"][0]["insertText"] == "<5| 1>"
        await slow.close()
        await fast.close()
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# ----------------------------------------------------------------------------- --tcp / --host
@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def fake_run_server(**kwargs: Any) -> int:
        seen.append(kwargs)
        return 0

    monkeypatch.setattr(server_module, "run_server", fake_run_server)
    return seen


@pytest.mark.parametrize(
    ("argv", "tcp"),
    [
        (["--tcp", "9000"], ("127.0.0.1", 9000)),
        (["--tcp", ":9000"], ("127.0.0.1", 9000)),
        (["--tcp", "0"], ("127.0.0.1", 0)),
        (["--tcp", "0.0.0.0:9000"], ("0.0.0.0", 9000)),
        (["--tcp", "[::1]:9000"], ("::1", 9000)),
        (["--tcp", "9000", "--host", "0.0.0.0"], ("0.0.0.0", 9000)),
        (["--tcp", "10.0.0.1:9000", "--host", "10.0.0.1"], ("10.0.0.1", 9000)),
    ],
)
def test_tcp_binds_loopback_unless_a_host_is_named(
    recorded: list[dict[str, Any]], argv: list[str], tcp: tuple[str, int]
) -> None:
    assert cli_main(argv) == 0
    assert [c["tcp"] for c in recorded] == [tcp]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--stdio", "--host", "0.0.0.0"], "--host goes with --tcp"),
        (["--tcp", "10.0.0.1:9000", "--host", "10.0.0.2"], "two hosts"),
    ],
)
def test_host_flag_misuse_is_one_line(
    recorded: list[dict[str, Any]], capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert recorded == [] and len(err) == 1 and needle in err[0]


def test_help_says_loopback() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dspark_lsp.cli", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "loopback only" in " ".join(out.split())


def test_parse_tcp_defaults_to_loopback() -> None:
    assert parse_tcp("7000") == ("127.0.0.1", 7000)
    assert parse_tcp("localhost:7000") == ("localhost", 7000)


@async_test
async def test_a_non_loopback_host_is_announced_as_reachable() -> None:
    """0.0.0.0 really binds every interface; the stderr line says other machines can connect."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dspark_lsp.cli",
        "--tcp",
        "0",
        "--host",
        "0.0.0.0",
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        line = b""
        while b"listening on" not in line:
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            assert line, "the server ended before listening"
        assert re.search(rb"listening on 0\.0\.0\.0:\d+ \(reachable from other machines", line), line
    finally:
        proc.kill()
        await proc.wait()

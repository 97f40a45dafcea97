"""The real server process (`python -m dspark_lsp.lsp --stdio`) with the `backend` setting pointing at a
fake OpenAI-compatible server in this test process: inline completions come from it, a newer request
aborts the HTTP request of the one it supersedes, the typed-through cache answers without it, and an
HTTP error or an answer that is not JSON gives an empty answer and a message while the server stays up.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from openai_fake import FakeOpenAI
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]
URI = "file:///tmp/dspark/remote.py"
DOC = "def add(a, b):\n    "


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory the loader accepts (config.json) holding the tiny FIM tokenizer: no weights needed."""
    from dspark_lsp.testing.tiny import build_tiny_tokenizer

    where = build_tiny_tokenizer(tmp_path_factory.mktemp("tok"))
    (where / "config.json").write_text('{"model_type": "qwen2"}')
    return where


@pytest_lsp.fixture(
    scope="module",
    config=ClientServerConfig(server_command=[sys.executable, "-m", "dspark_lsp.lsp", "--stdio", "--log-level", "info"]),
)
async def client(lsp_client: LanguageClient):
    lsp_client._status = []  # type: ignore[attr-defined]

    @lsp_client.feature("dspark/status")
    def on_status(params: Any) -> None:
        lsp_client._status.append(params)  # type: ignore[attr-defined]

    yield
    await lsp_client.shutdown_session()


async def wait_for(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def inline(client: LanguageClient, line: int, character: int) -> Any:
    return client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=URI),
            position=types.Position(line, character),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )


def change(client: LanguageClient, version: int, text: str) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


async def test_completions_from_a_remote_backend(client: LanguageClient, fake: FakeOpenAI, tokenizer_dir: Path) -> None:
    await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            initialization_options={"dspark": {
                "model": str(tokenizer_dir),
                "backend": {"url": fake.url, "timeoutMs": 5000},
                "debounceMs": 0,
                "maxNewTokens": 16,
            }},
        )
    )
    status = client._status  # type: ignore[attr-defined]
    await wait_for(lambda: any(getattr(p, "state", None) in ("ready", "error") for p in status), "ready")
    assert [p.state for p in status if p.state in ("ready", "error")][-1] == "ready", status
    assert not [m for m in client.messages if m.type == types.MessageType.Error]

    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=URI, language_id="python", version=1, text=DOC))
    )
    result = await inline(client, 1, 4)
    assert [i.insert_text for i in result.items] == ["return a + b"]
    assert fake.requests[-1]["prompt"].startswith("<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>")
    stats = await client.protocol.send_request_async("dspark/stats", {})
    record = stats.service[-1]
    assert record.backend == fake.url and record.draft == "remote" and record.chars == len("return a + b")
    await wait_for(lambda: any(hasattr(p, "lastLatencyMs") for p in status), "status with the latency")

    # Typed through: answered from the completion cache, the server is not asked.
    sent = len(fake.requests)
    change(client, 2, DOC + "ret")
    result = await inline(client, 1, 7)
    assert [i.insert_text for i in result.items] == ["urn a + b"] and len(fake.requests) == sent

    # A newer request supersedes a running one: its HTTP request is aborted (the server sees it close).
    fake.reset()
    fake.pieces = [f"x{i} " for i in range(400)]
    fake.piece_delay_s = 0.02  # an 8 s stream
    change(client, 3, DOC + "x = ")
    first = asyncio.ensure_future(inline(client, 1, 8))
    await wait_for(lambda: fake.events_sent > 0, "the first stream to start", timeout=30)
    fake.pieces, fake.piece_delay_s = ["1\n"], 0.0
    started = time.monotonic()
    change(client, 4, DOC + "y = ")
    second = await inline(client, 1, 8)
    assert list((await first).items) == []
    assert [i.insert_text for i in second.items] == ["1"]
    await wait_for(fake.disconnected.is_set, "the server to see the superseded request's connection close", timeout=3)
    assert time.monotonic() - started < 4.0
    await wait_for(lambda: fake.finished_streams >= 1, "the second stream to end", timeout=3)
    assert fake.finished_streams == 1  # only the second one ran to its end

    # Errors: an empty answer and a one-line message, and the server goes on answering.
    for version, (behaviour, words) in enumerate([("error500", "HTTP 500"), ("garbage", "not JSON")], start=5):
        fake.behaviour = behaviour
        change(client, version, DOC + f"z{version} = ")
        logs_before = len(client.log_messages)
        result = await inline(client, 1, 9)
        assert list(result.items) == []
        await wait_for(
            lambda w=words, n=logs_before: any(w in m.message for m in client.log_messages[n:]), f"a log with {words!r}"
        )
        message = next(m for m in client.log_messages[logs_before:] if words in m.message)
        assert message.type == types.MessageType.Warning and "\n" not in message.message
    fake.behaviour, fake.pieces = "stream", ["2\n"]
    result = await inline(client, 1, 9)
    assert [i.insert_text for i in result.items] == ["2"]
    stats = await client.protocol.send_request_async("dspark/stats", {})
    assert stats.counters.error == 2 and stats.state == "ready"

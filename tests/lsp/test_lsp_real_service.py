"""The real server process with the real CompletionService on tiny random models (no fakes).

The models are random, so the completion text is nonsense; what is checked is the wiring: settings
reach ServiceConfig, the models load in the background, completions come back as LSP items, the
service's own stats reach dspark/stats, and a bad model path is reported and survived.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]
URI = "file:///tmp/dspark/real.py"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from dspark_lsp.testing.tiny import build_tiny_models

    return build_tiny_models(tmp_path_factory.mktemp("tiny"))


@pytest_lsp.fixture(
    scope="module",
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "dspark_lsp.lsp", "--stdio", "--log-level", "info"]
    ),
)
async def client(lsp_client: LanguageClient):
    lsp_client._status = []  # type: ignore[attr-defined]

    @lsp_client.feature("dspark/status")
    def on_status(params: Any) -> None:
        lsp_client._status.append(params)  # type: ignore[attr-defined]

    yield
    await lsp_client.shutdown_session()


async def wait_state(client: LanguageClient, state: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for params in reversed(client._status):  # type: ignore[attr-defined]
            if getattr(params, "state", None) == state:
                return params
        await asyncio.sleep(0.05)
    raise AssertionError(f"no status {state}: {client._status}")  # type: ignore[attr-defined]


async def test_real_service_end_to_end(client: LanguageClient, tiny_models: tuple[Path, Path]) -> None:
    target, draft = tiny_models
    await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(
                window=types.WindowClientCapabilities(work_done_progress=True)
            ),
            initialization_options={
                "dspark": {
                    "model": str(target),
                    "draftModel": str(draft),
                    "device": "cpu",
                    "dtype": "float32",
                    "maxNewTokens": 8,
                    "debounceMs": 0,
                    "multiline": "always",
                }
            },
        )
    )
    await wait_state(client, "ready")
    assert not [m for m in client.messages if m.type == types.MessageType.Error]
    text = "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    "
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text)
        )
    )
    result = await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=URI),
            position=types.Position(4, 4),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )
    assert isinstance(result, types.InlineCompletionList)
    stats = await client.protocol.send_request_async("dspark/stats", {})
    assert stats.state == "ready"
    assert stats.counters.requests == 1
    # The request reached the real service and was decoded there (or cleanly found empty).
    assert len(stats.service) == 1
    record = stats.service[0]
    assert record.doc == URI and record.stop_reason
    print(
        "real-service completion:",
        result.items[0].insert_text if result.items else None,
        dict(record._asdict()),
    )
    if result.items:
        assert record.chars == len(result.items[0].insert_text)
        assert record.target_forwards >= 1
        # The status bar's figures come from the real service's stats (issue 15: the speed-up used to
        # be written only by the test fake): tokens per target forward, and the last latency.
        deadline = time.monotonic() + 10
        while not any(hasattr(p, "lastLatencyMs") for p in client._status):  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, f"no status with figures: {client._status}"  # type: ignore[attr-defined]
            await asyncio.sleep(0.05)
        shown = [p for p in client._status if hasattr(p, "lastLatencyMs")][-1]  # type: ignore[attr-defined]
        assert shown.state == "ready" and shown.lastLatencyMs > 0
        assert shown.speedup == record.speedup >= 1.0

    # A model that does not exist: error shown, status error, server still answers (empty).
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"dspark": {"model": "/nonexistent/model/dir"}})
    )
    await wait_state(client, "error")
    assert any(m.type == types.MessageType.Error for m in client.messages)
    empty = await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=URI),
            position=types.Position(4, 4),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )
    assert isinstance(empty, types.InlineCompletionList) and list(empty.items) == []

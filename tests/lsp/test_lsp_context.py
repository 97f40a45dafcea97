"""The language server feeds the project to the service: other open documents' chunks, the workspace's
names, and background warm-ups (the real server process with the fake service, over stdio)."""

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

FIXTURES = Path(__file__).parents[1] / "helpers" / "lsp_fixtures"
pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.timeout(60)]

HELPER = "".join(f"def compute_total_{i}(order_items, discount_rate):\n    return order_items * {i}\n" for i in range(20))
MAIN = "".join(f"subtotal_{i} = compute_total_{i}(order_items, discount_rate)\n" for i in range(40)) + "x = "


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, str(FIXTURES / "fake_server.py")]))
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def start(client: LanguageClient, root: Path | None, **options: Any) -> None:
    folders = [types.WorkspaceFolder(uri=root.as_uri(), name=root.name)] if root else None
    await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            workspace_folders=folders,
            initialization_options={"dspark": {"debounceMs": 0, **options}},
        )
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # ready once a completion is answered by the service
        if await record_of(client, None) is not None:
            return
        await asyncio.sleep(0.05)


def open_doc(client: LanguageClient, uri: str, text: str) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    )


async def record_of(client: LanguageClient, uri: str | None, line: int = 0, character: int = 0) -> dict[str, Any] | None:
    if uri is not None:
        await client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line, character),
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
            )
        )
    data = await client.protocol.send_request_async("dspark/stats", {})
    service = data["service"] if isinstance(data, dict) else data.service
    if not service:
        return None
    last = service[-1]
    return last if isinstance(last, dict) else last._asdict()


async def test_open_documents_feed_the_prompt_and_closing_drops_them(client: LanguageClient, tmp_path: Path) -> None:
    await start(client, tmp_path, contextBudget=1024, contextDefinitions=False)
    helper, main = (tmp_path / "pkg" / "helper.py").as_uri(), (tmp_path / "pkg" / "main.py").as_uri()
    open_doc(client, helper, HELPER)
    open_doc(client, main, MAIN)
    record = await record_of(client, main, 40, 4)
    assert record is not None
    assert record["context"].startswith("open:pkg/helper.py")  # workspace-relative, the chunks of helper.py
    assert "pkg/main.py" not in record["context"]  # never its own context
    assert record["prompt_path"] == "pkg/main.py" and record["repo_name"] == tmp_path.name
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=helper)))
    assert (await record_of(client, main, 40, 4) or {})["context"] == ""


async def test_context_off_sends_none(client: LanguageClient, tmp_path: Path) -> None:
    await start(client, tmp_path)  # contextBudget 0
    helper, main = (tmp_path / "helper.py").as_uri(), (tmp_path / "main.py").as_uri()
    open_doc(client, helper, HELPER)
    open_doc(client, main, MAIN)
    record = await record_of(client, main, 40, 4)
    assert record is not None and record["context"] == "" and record["prompt_path"] == "main.py"
    await start_again_with(client, contextBudget=1024, contextOpenFiles=False, contextDefinitions=False)
    record = await record_of(client, main, 40, 4)
    assert record is not None and record["context"] == ""


async def start_again_with(client: LanguageClient, **settings: Any) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"dspark": settings}))
    await asyncio.sleep(0.3)


async def test_warm_ups_on_open_pause_and_cursor(client: LanguageClient, tmp_path: Path) -> None:
    await start(client, None, warmUp=True)
    uri = (tmp_path / "a.py").as_uri()
    open_doc(client, uri, MAIN)
    await asyncio.sleep(0.6)  # OPEN_DELAY_S: the document's end
    client.protocol.notify("dspark/cursor", {"textDocument": {"uri": uri}, "position": {"line": 3, "character": 5}})
    await asyncio.sleep(0.6)  # CURSOR_DELAY_S
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(1, 0), types.Position(1, 0)), text="ab")],
        )
    )
    await asyncio.sleep(1.0)  # PAUSE_S after the last edit
    client.protocol.notify("dspark/cursor", {"textDocument": {"uri": uri}, "position": {"line": "x"}})  # ignored
    record = await record_of(client, uri, 0, 1)
    assert record is not None
    line_len = len(MAIN.split("\n", 1)[0]) + 1
    offsets = [int(w.rsplit("@", 1)[1]) for w in record["warms"].split(";")]
    # The open (document end), the cursor (line 3, char 5), the edit's end (line 1 + "ab").
    assert offsets == [len(MAIN), 3 * line_len + 5, line_len + 2]


async def test_no_warm_up_when_off_or_when_a_request_came(client: LanguageClient, tmp_path: Path) -> None:
    await start(client, None, warmUp=False)
    uri = (tmp_path / "a.py").as_uri()
    open_doc(client, uri, MAIN)
    await asyncio.sleep(0.6)
    record = await record_of(client, uri, 0, 1)
    assert record is not None and record["warms"] == ""
    await start_again_with(client, warmUp=True)
    other = (tmp_path / "b.py").as_uri()
    open_doc(client, other, MAIN)
    record = await record_of(client, other, 0, 1)  # asked at once: the pending warm-up is dropped
    await asyncio.sleep(0.6)
    record = await record_of(client, other, 0, 1)
    # Only the warm-up after the first answer, at its spot (offset 1), never the open's (the end).
    assert record is not None and record["warms"] == f"{other}@1"


async def test_a_warm_up_follows_an_answer_unless_the_user_moved_on(client: LanguageClient, tmp_path: Path) -> None:
    await start(client, None, warmUp=True)
    uri = (tmp_path / "a.py").as_uri()
    open_doc(client, uri, MAIN)
    await record_of(client, uri, 2, 3)  # drops the open's warm-up; its answer schedules one at (2, 3)
    await asyncio.sleep(0.4)  # AFTER_COMPLETION_S
    line_len = len(MAIN.split("\n", 1)[0]) + 1
    record = await record_of(client, uri, 3, 2)
    assert record is not None and record["warms"] == f"{uri}@{2 * line_len + 3}"
    # An edit right after this answer: the spot it left (3, 2) is stale; the edit's pause warms instead.
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(0, 0), types.Position(0, 0)), text="z")],
        )
    )
    await asyncio.sleep(1.0)  # PAUSE_S
    record = await record_of(client, uri, 5, 0)
    assert record is not None and record["warms"] == f"{uri}@{2 * line_len + 3};{uri}@1"


async def ask(client: LanguageClient, uri: str, line: int, character: int, kind: types.InlineCompletionTriggerKind) -> None:
    await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line, character),
            context=types.InlineCompletionContext(trigger_kind=kind),
        )
    )


async def test_an_early_answer_is_finished_in_the_background_even_with_warm_ups_off(
    client: LanguageClient, tmp_path: Path
) -> None:
    # quickAnswerMs: only an automatic request may be answered early; such an answer gets the
    # background job that decodes it on (the service's finish_early_answer), warm-ups off or not.
    await start(client, None, model="early", warmUp=False)
    uri = (tmp_path / "a.py").as_uri()
    open_doc(client, uri, MAIN)
    await ask(client, uri, 0, 1, types.InlineCompletionTriggerKind.Automatic)
    await asyncio.sleep(0.4)  # AFTER_COMPLETION_S
    record = await record_of(client, uri, 0, 2)  # Invoked: answered in full, nothing to finish
    assert record is not None and record["automatic"] is False and record["stop_reason"] == "eos"
    assert record["warms"] == f"finish:{uri}@1"
    await asyncio.sleep(0.4)
    record = await record_of(client, uri, 0, 3)
    assert record is not None and record["warms"] == f"finish:{uri}@1", "an invoked answer schedules no finish"
    await ask(client, uri, 0, 4, types.InlineCompletionTriggerKind.Automatic)
    data = await client.protocol.send_request_async("dspark/stats", {})
    service = data["service"] if isinstance(data, dict) else data.service
    last = service[-1] if isinstance(service[-1], dict) else service[-1]._asdict()
    assert last["automatic"] is True and last["stop_reason"] == "deadline"

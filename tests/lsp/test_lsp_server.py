"""End to end: the real server process over stdio (with the fake service), driven by pytest-lsp."""

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

URI = "file:///tmp/dspark/example.py"


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=[sys.executable, str(FIXTURES / "fake_server.py")])
)
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def start(
    client: LanguageClient, options: dict[str, Any] | None = None, **caps: Any
) -> types.InitializeResult:
    capabilities = types.ClientCapabilities(
        window=types.WindowClientCapabilities(work_done_progress=True),
        workspace=types.WorkspaceClientCapabilities(configuration=caps.get("configuration", False)),
        general=types.GeneralClientCapabilities(position_encodings=caps.get("encodings")),
    )
    result = await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities,
            initialization_options={"dspark": {"debounceMs": 0, **(options or {})}},
        )
    )
    return result


async def wait_status(client: LanguageClient, state: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for params in reversed(statuses(client)):
            if params["state"] == state:
                return params
        await asyncio.sleep(0.02)
    raise AssertionError(f"no dspark/status {state!r}; got {statuses(client)}")


def statuses(client: LanguageClient) -> list[dict[str, Any]]:
    return [_as_dict(p) for p in client._status]  # type: ignore[attr-defined]


def _as_dict(params: Any) -> dict[str, Any]:
    return plain(params)


@pytest.fixture(autouse=True)
def _record_status(client: LanguageClient) -> None:
    client._status = []  # type: ignore[attr-defined]

    @client.feature("dspark/status")
    def on_status(params: Any) -> None:
        client._status.append(params)  # type: ignore[attr-defined]


def open_doc(client: LanguageClient, text: str, uri: str = URI, language: str = "python") -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
        )
    )


async def inline(client: LanguageClient, line: int, character: int, uri: str = URI) -> list[str]:
    result = await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line, character),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
        )
    )
    if result is None:
        return []
    items = result.items if isinstance(result, types.InlineCompletionList) else result
    return [
        item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value for item in items
    ]


async def stats(client: LanguageClient) -> dict[str, Any]:
    return plain(await client.protocol.send_request_async("dspark/stats", {}))


def plain(value: Any) -> Any:
    """pygls' client hands custom results back as namedtuples; make them dicts/lists again."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


# ----------------------------------------------------------------------------------------------------


async def test_initialize_advertises_capabilities_and_loads(client: LanguageClient) -> None:
    result = await start(client)
    caps = result.capabilities
    assert caps.inline_completion_provider
    assert caps.completion_provider is not None
    sync = caps.text_document_sync
    assert (
        isinstance(sync, types.TextDocumentSyncOptions)
        and sync.change == types.TextDocumentSyncKind.Incremental
    )
    assert caps.position_encoding in (None, types.PositionEncodingKind.Utf16)
    await wait_status(client, "ready")
    # Loading was shown as work-done progress: begin ... end on one token.
    kinds = [type(v).__name__ for reports in client.progress_reports.values() for v in reports]
    assert kinds[0] == "WorkDoneProgressBegin" and kinds[-1] == "WorkDoneProgressEnd"


async def test_open_change_and_inline_completion_with_utf16(client: LanguageClient) -> None:
    await start(client)
    await wait_status(client, "ready")
    open_doc(client, "s = '😀'\r\nx = ")
    # Line 1 col 4: code-point offset = len("s = '😀'\r\n") + 4 = 9 + 4.
    assert await inline(client, 1, 4) == ["<13|= >"]
    # Incremental change: type "ab" after the emoji (UTF-16 col 7 = after the surrogate pair).
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(0, 7), types.Position(0, 7)), text="ab"
                )
            ],
        )
    )
    assert await inline(client, 0, 9) == ["<8|ab>"]
    record = (await stats(client))["service"][-1]
    assert record["doc_key"] == URI and record["language_id"] == "python"


async def test_utf8_position_encoding_when_client_prefers_it(client: LanguageClient) -> None:
    result = await start(client, encodings=[types.PositionEncodingKind.Utf8])
    assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf8
    await wait_status(client, "ready")
    open_doc(client, "漢字x")
    assert await inline(client, 0, 6) == ["<2|漢字>"]  # 6 UTF-8 bytes = 2 code points


async def test_completion_item_replaces_the_word(client: LanguageClient) -> None:
    await start(client)
    await wait_status(client, "ready")
    open_doc(client, "    pri")
    result = await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(0, 7)
        )
    )
    assert isinstance(result, types.CompletionList) and result.is_incomplete
    assert len(result.items) == 1
    item = result.items[0]
    edit = item.text_edit
    assert isinstance(edit, types.TextEdit)
    assert edit.new_text == "pri<7|ri>"
    assert (edit.range.start.character, edit.range.end.character) == (4, 7)


async def test_multiline_completion_uses_the_documents_line_ending(client: LanguageClient) -> None:
    await start(client, {"model": "multiline"})
    await wait_status(client, "ready")
    open_doc(client, "a = 1\r\nb = 2\r\n")
    assert await inline(client, 2, 0) == ["a\r\nb"]


async def test_request_before_ready_is_empty_not_an_error(client: LanguageClient) -> None:
    await start(client, {"model": "slowload"})
    # The server has taken `initialized` (and started loading) once it reports "loading"; a request
    # before that is also answered empty, but only the worker's requests show in its counters.
    await wait_status(client, "loading")
    open_doc(client, "x = ")
    assert await inline(client, 0, 4) == []
    await wait_status(client, "ready")
    assert await inline(client, 0, 4) == ["<4|= >"]
    counters = (await stats(client))["counters"]
    assert counters["not_ready"] == 1 and counters["ok"] == 1
    reports = [r for rs in client.progress_reports.values() for r in rs]
    assert any(isinstance(r, types.WorkDoneProgressReport) and r.percentage == 100 for r in reports)


async def test_load_failure_is_shown_and_server_keeps_serving(client: LanguageClient) -> None:
    await start(client, {"model": "broken"})
    status = await wait_status(client, "error")
    assert "broken" in status["message"]
    assert any(m.type == types.MessageType.Error and "broken" in m.message for m in client.messages)
    open_doc(client, "x = ")
    assert await inline(client, 0, 4) == []
    assert (await stats(client))["state"] == "error"
    # Fixing the setting recovers without a restart.
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"dspark": {"model": "fake"}})
    )
    await wait_status(client, "ready")
    assert await inline(client, 0, 4) == ["<4|= >"]


async def test_cancel_request_stops_a_running_decode(client: LanguageClient) -> None:
    await start(client, {"model": "slow", "maxNewTokens": 100})  # 100 rounds x 50 ms = 5 s if not stopped
    await wait_status(client, "ready")
    open_doc(client, "x = ")
    task = asyncio.ensure_future(inline(client, 0, 4))
    await asyncio.sleep(0.4)
    msg_id = max(k for k in client.protocol._request_futures if isinstance(k, (int, str)))  # latest request
    started = time.monotonic()
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
    with pytest.raises(Exception) as info:
        await task
    assert "cancel" in str(info.value).lower()
    assert time.monotonic() - started < 2.0
    await asyncio.sleep(0.3)
    record = (await stats(client))["service"][-1]
    assert record["cancelled"] is True and record["rounds"] < 40


async def test_new_request_cancels_the_previous_one_on_the_same_document(client: LanguageClient) -> None:
    await start(client, {"model": "slow", "maxNewTokens": 100})
    await wait_status(client, "ready")
    open_doc(client, "x = ")
    started = time.monotonic()
    first = asyncio.ensure_future(inline(client, 0, 4))
    await asyncio.sleep(0.4)
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"dspark": {"model": "slow", "maxNewTokens": 4}})
    )
    second = asyncio.ensure_future(inline(client, 0, 3))
    assert await first == []  # superseded: empty, not an error
    assert await second == ["<3| =>"]
    assert time.monotonic() - started < 3.0
    data = await stats(client)
    assert data["counters"]["superseded"] == 1
    assert [r["cancelled"] for r in data["service"]] == [True, False]


async def test_debounce_drops_requests_superseded_while_waiting(client: LanguageClient) -> None:
    await start(client, {"debounceMs": 300})
    await wait_status(client, "ready")
    open_doc(client, "abc")
    first = asyncio.ensure_future(inline(client, 0, 1))
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(inline(client, 0, 3))
    assert await first == []
    assert await second == ["<3|bc>"]
    data = await stats(client)
    assert len(data["service"]) == 1  # the superseded request never reached the service


async def test_configuration_change_updates_knobs_without_reload(client: LanguageClient) -> None:
    await start(client)
    await wait_status(client, "ready")
    open_doc(client, "x")
    await inline(client, 0, 1)
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"dspark": {"threshold": 0.5}})
    )
    await asyncio.sleep(0.2)
    await inline(client, 0, 1)
    first, second = (await stats(client))["service"][-2:]
    assert first["threshold"] == 0.9 and second["threshold"] == 0.5
    assert first["load_index"] == second["load_index"]


async def test_model_change_reloads_in_background(client: LanguageClient) -> None:
    await start(client)
    await wait_status(client, "ready")
    client._status.clear()  # type: ignore[attr-defined]
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"dspark": {"model": "fake2"}})
    )
    await wait_status(client, "loading")
    await wait_status(client, "ready")
    open_doc(client, "x")
    await inline(client, 0, 1)
    record = (await stats(client))["service"][-1]
    assert record["model"] == "fake2" and record["load_index"] == 2


async def test_invalid_settings_warn_and_fall_back(client: LanguageClient) -> None:
    await start(client, {"threshold": 7, "debounceMs": "soon"})
    await wait_status(client, "ready")
    warnings = [m.message for m in client.messages if m.type == types.MessageType.Warning]
    assert warnings and "threshold" in warnings[0] and "debounceMs" in warnings[0]
    assert (await stats(client))["debounceMs"] == 150
    open_doc(client, "x")
    await inline(client, 0, 1)
    assert (await stats(client))["service"][-1]["threshold"] == 0.9


async def test_settings_pulled_when_change_notification_has_none(client: LanguageClient) -> None:
    client.set_configuration({"threshold": 0.25}, section="dspark")
    await start(client, configuration=True)
    await wait_status(client, "ready")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(0.3)
    open_doc(client, "x")
    await inline(client, 0, 1)
    assert (await stats(client))["service"][-1]["threshold"] == 0.25


async def test_disable_setting_answers_empty(client: LanguageClient) -> None:
    await start(client, {"enable": False})
    await wait_status(client, "disabled")
    open_doc(client, "x")
    assert await inline(client, 0, 1) == []


async def test_shutdown_and_exit_are_clean(client: LanguageClient) -> None:
    await start(client, {"model": "slow", "maxNewTokens": 200})
    await wait_status(client, "ready")
    open_doc(client, "x")
    pending = asyncio.ensure_future(inline(client, 0, 1))  # a 10 s decode in flight
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await client.shutdown_async(None)
    client.exit(None)
    server = client._server
    assert server is not None
    code = await asyncio.wait_for(server.wait(), timeout=5)
    assert code == 0
    assert time.monotonic() - started < 4.0
    pending.cancel()
    client.capabilities = None  # already shut down: the fixture must not do it again

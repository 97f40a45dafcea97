"""Shown / accepted / partially accepted completions reach dspark/stats (issue 15, what a typist expects).

The real server process over stdio (with the fake service), driven by pytest-lsp: the client sends the
notifications an editor sends, dspark/stats counts them and gives the acceptance rate.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

FIXTURES = Path(__file__).parents[1] / "helpers" / "lsp_fixtures"
pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.timeout(60)]
URI = "file:///tmp/dspark/feedback.py"


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, str(FIXTURES / "fake_server.py")]))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=types.ClientCapabilities(), initialization_options={"debounceMs": 0})
    )
    yield
    await lsp_client.shutdown_session()


def plain(value: Any) -> Any:
    """pygls' client hands custom results back as namedtuples; make them dicts/lists again."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


async def feedback(client: LanguageClient) -> dict[str, Any]:
    # Notifications have no answer; a request after them is handled after them (one stream, in order).
    await asyncio.sleep(0.05)
    stats = plain(await client.protocol.send_request_async("dspark/stats", {}))
    return dict(stats["feedback"])


@pytest.mark.asyncio
async def test_nothing_reported_means_no_rate(client: LanguageClient) -> None:
    fb = await feedback(client)
    assert fb["shown"] == fb["accepted"] == fb["partiallyAccepted"] == 0
    assert fb["acceptanceRate"] is None and fb["anyAcceptanceRate"] is None


@pytest.mark.asyncio
async def test_shown_accepted_and_partial_give_the_acceptance_rate(client: LanguageClient) -> None:
    show = "textDocument/didShowCompletion"
    notify = client.protocol.notify
    notify(show, {"uri": URI, "item": {"insertText": "return a + b"}})
    # VS Code asks again as the user types through the same suggestion: the same item is one show.
    notify(show, {"uri": URI, "item": {"insertText": "return a + b"}})
    notify("dspark/didAcceptCompletion", {"uri": URI, "item": {"insertText": "return a + b"}})
    notify(show, {"uri": URI, "item": {"insertText": {"kind": "snippet", "value": "print(x)"}}})
    notify("textDocument/didPartiallyAcceptCompletion", {"uri": URI, "item": {"insertText": "print(x)"}, "acceptedLength": 5})
    notify(show, {"uri": "file:///other.py", "item": {"insertText": "pass"}})
    # Malformed ones are dropped, not counted and not fatal.
    notify(show, {"uri": URI})
    notify("textDocument/didPartiallyAcceptCompletion", {"uri": URI, "acceptedLength": -3})
    notify("dspark/didAcceptCompletion", "nonsense")
    fb = await feedback(client)
    assert fb["shown"] == 3
    assert fb["accepted"] == 1 and fb["partiallyAccepted"] == 1
    assert fb["acceptanceRate"] == pytest.approx(1 / 3, abs=1e-4)
    assert fb["anyAcceptanceRate"] == pytest.approx(2 / 3, abs=1e-4)
    assert fb["shownChars"] == len("return a + b") + len("print(x)") + len("pass")
    assert fb["acceptedChars"] == len("return a + b") + 5
    # A partial accept leaves the rest of the same suggestion on screen: shown again, it is not a new
    # one; a different text is.
    notify(show, {"uri": URI, "item": {"insertText": "print(x)"}})
    assert (await feedback(client))["shown"] == 3
    notify(show, {"uri": URI, "item": {"insertText": "return a + b"}})
    assert (await feedback(client))["shown"] == 4
    # After a whole accept, the same text shown again there is a new suggestion.
    notify("dspark/didAcceptCompletion", {"uri": URI, "item": {"insertText": "return a + b"}})
    notify(show, {"uri": URI, "item": {"insertText": "return a + b"}})
    assert (await feedback(client))["shown"] == 5

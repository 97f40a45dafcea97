"""A note the service comes to while serving (the default model answering slowly, latency_note.py) reaches
the editor once as a window/showMessage warning after the completion that made it due."""

from __future__ import annotations

import pytest
from test_lsp_bad_input import URI, RawClient

pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.timeout(60)]


async def test_a_note_due_while_serving_is_shown_once_as_a_warning() -> None:
    client = await RawClient.start()
    try:
        msg_id = client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                               "initializationOptions": {"debounceMs": 0, "model": "slownote"}})
        assert "result" in await client.response(msg_id)
        client.notify("initialized", {})
        await client.wait_ready()
        client.notify("textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1,
                                                                "text": "x = 1\nprint(x)\n"}})
        for _ in range(4):
            reply = await client.inline(0, 1)
            assert reply["result"]["items"]
        warnings = [n["params"] for n in client.notifications if n["method"] == "window/showMessage"]
        assert warnings == [{"type": 2, "message": "DSpark: completions took 999 ms (fake)"}]
        assert await client.close() == 0
    finally:
        if client.proc.returncode is None:
            client.proc.kill()
            await client.proc.wait()

"""A completion asked before the server handled `initialized` (no worker yet) is answered "not ready"
and still counted by dspark/stats."""

from __future__ import annotations

import asyncio

from dspark_lsp.lsp.handlers.completion import Cursor, complete_at
from dspark_lsp.lsp.handlers.stats import collect
from dspark_lsp.lsp.server import DSparkServer


def test_request_before_initialized_is_counted() -> None:
    def no_backend() -> object:
        raise AssertionError("the backend must not be imported for an early request")

    server = DSparkServer(backend_factory=no_backend).session
    assert server.worker is None
    assert "not_ready" not in collect(server).get("counters", {})
    cursor = Cursor("file:///x.py", "x = ", 4, 0, 4, "\n", "python")
    outcome = asyncio.run(complete_at(server, cursor, explicit=True))
    assert outcome.status == "not_ready" and not outcome.text
    asyncio.run(complete_at(server, cursor, explicit=False))
    assert collect(server)["counters"]["not_ready"] == 2

"""The router table (dspark_lsp/lsp/router.py).

The table is what pygls serves: every route's handler is registered, bound to the server's session, and
nothing else is; every custom method the editors send is routed.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.lsp import router
from dspark_lsp.lsp.backend import Backend
from dspark_lsp.lsp.channel import STATUS_METHOD
from dspark_lsp.lsp.server import DSparkServer, create_server
from dspark_lsp.lsp.session import Session

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.timeout(60)]

# A backend that is never asked for a model: no test here sends `initialized`.
BACKEND = Backend(
    config_from_settings=lambda settings, base: ({}, []),  # type: ignore[arg-type,return-value]
    make_request=dict,  # type: ignore[arg-type]
    load=lambda config, progress: None,  # type: ignore[arg-type,return-value]
)


def test_every_route_is_served_by_its_handler_bound_to_the_session() -> None:
    server = create_server(backend=BACKEND)
    features = server.protocol.fm.features
    assert set(features) == {route.method for route in router.ROUTES}
    assert len(router.ROUTES) == len(features)  # no method routed twice
    for route in router.ROUTES:
        bound = features[route.method]
        assert bound.func is route.handler and bound.args == (server.session,), route.method
        # pygls runs a coroutine function as a task, anything else in place: the kind decides that.
        assert inspect.iscoroutinefunction(bound) == (route.kind == router.ASYNC), route.method
        if route.options is not None:
            assert server.protocol.fm.feature_options[route.method] is route.options


def test_a_route_whose_kind_is_wrong_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def handler(session: Session, params: Any) -> None:
        pass

    monkeypatch.setattr(router, "ROUTES", (router.Route("dspark/example", handler, router.SYNC),))
    server = DSparkServer(lambda: BACKEND)
    with pytest.raises(TypeError, match="dspark/example"):
        router.register(server, server.session)


def _editor_methods() -> set[str]:
    """The custom methods the VS Code and Neovim clients name in their sources."""
    sources = [*(REPO / "editors/vscode/src").rglob("*.ts"), *(REPO / "editors/nvim").rglob("*.lua")]
    pattern = re.compile(r"""["'](dspark/\w+|textDocument/did\w*Completion)["']""")
    return {m.group(1) for path in sources for m in pattern.finditer(path.read_text(encoding="utf-8"))}


def test_every_custom_method_the_editors_send_is_routed() -> None:
    named = _editor_methods()
    # The scan must see the editors' methods at all (a moved source folder would pass vacuously).
    assert {"dspark/stats", "dspark/cursor", "dspark/didAcceptCompletion", STATUS_METHOD} <= named
    sent = named - {STATUS_METHOD}  # dspark/status goes the other way: the server sends it
    missing = sent - {route.method for route in router.ROUTES}
    assert not missing, f"the editors send methods no route serves: {sorted(missing)}"

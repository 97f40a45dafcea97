"""LSP method handlers, one module per concern; `register_all` attaches them to a server."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dspark_lsp.lsp.server import DSparkServer


def register_all(server: DSparkServer) -> None:
    from dspark_lsp.lsp.handlers import (
        completion,
        configuration,
        documents,
        feedback,
        lifecycle,
        stats,
        workspace,
    )

    for module in (lifecycle, documents, workspace, configuration, completion, feedback, stats):
        module.register(server)

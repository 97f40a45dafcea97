"""textDocument/didOpen, didChange, didClose: keep the document store in sync."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from dspark_lsp.lsp.server import DSparkServer

log = logging.getLogger(__name__)


def register(server: DSparkServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        server.docs.open(doc.uri, doc.text, doc.version, doc.language_id)
        log.debug("opened %s (%s, %d chars)", doc.uri, doc.language_id, len(doc.text))

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        # An edit does NOT cancel a running completion: the next request does (cancel-previous). A
        # decode that finishes while the user types still fills the service's typed-through cache and
        # prefix cache, so the request at the next pause is cheaper.
        changes: list[tuple[tuple[int, int, int, int] | None, str]] = []
        for change in params.content_changes:
            if isinstance(change, types.TextDocumentContentChangePartial):
                r = change.range
                changes.append(((r.start.line, r.start.character, r.end.line, r.end.character), change.text))
            else:
                changes.append((None, change.text))
        server.docs.change(uri, params.text_document.version, changes, server.encoding)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        if server.worker is not None:
            server.worker.cancel_document(uri)
        if not server.docs.close(uri):
            log.debug("didClose for a document that was not open: %s", uri)

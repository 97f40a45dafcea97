"""textDocument/didOpen, didChange, didClose: keep the document store in sync.

Also `dspark/documentText` (a request; params `{"textDocument": {"uri": ...}}`): the server's copy of an
open document as `{"uri", "version", "text"}`, or null when it is not open. It exists so tests and
bug reports can compare the server's mirror with the editor's buffer after a stream of edits (the
protocol fuzz test checks it after every edit). It is read-only and answers only what the client sent.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types

if TYPE_CHECKING:
    from dspark_lsp.lsp.server import DSparkServer

log = logging.getLogger(__name__)

DOCUMENT_TEXT_METHOD = "dspark/documentText"


def document_text(server: DSparkServer, params: Any) -> dict[str, Any] | None:
    """The mirror of one document; params arrive unstructured (a custom method has no lsprotocol type),
    so anything that is not `{"textDocument": {"uri": str}}` answers null rather than raising."""
    text_document = _field(params, "textDocument")
    uri = _field(text_document, "uri")
    if not isinstance(uri, str):
        return None
    doc = server.docs.get(uri)
    if doc is None:
        return None
    return {"uri": doc.uri, "version": doc.version, "text": doc.text}


def _forget(forget: Any, uri: str) -> None:
    try:
        forget(uri)
    except Exception:  # a cache bug must not cost the worker thread
        log.exception("dropping the service state of %s failed", uri)


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


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
        # The service's per-document caches go with the document (a fake service may not have them),
        # on the service's one worker thread like every other service call (a decode may be writing them).
        service = server.models.service if server.models is not None else None
        forget = getattr(service, "forget", None)
        if callable(forget):
            server.executor.submit(_forget, forget, uri)

    @server.feature(DOCUMENT_TEXT_METHOD)
    def document_text_request(params: Any) -> dict[str, Any] | None:
        return document_text(server, params)

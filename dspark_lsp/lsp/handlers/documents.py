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

from dspark_lsp.lsp.positions import PositionError
from dspark_lsp.lsp.warm import CURSOR_DELAY_S, CURSOR_METHOD, OPEN_DELAY_S, PAUSE_S, cursor_params, end_of

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


def cursor_rested(server: DSparkServer, params: Any) -> None:
    """`dspark/cursor`: our clients' hint that the cursor rests at a position; warm the prompt there."""
    parsed = cursor_params(params)
    doc = server.docs.get(parsed[0]) if parsed is not None else None
    if parsed is None or doc is None:
        log.debug("dspark/cursor ignored: %r", params)
        return
    uri, line, character = parsed
    try:
        at = doc.offset_at(line, character, server.encoding, strict=False)
    except PositionError:
        return
    server.warmer.schedule(uri, at, CURSOR_DELAY_S)


def register(server: DSparkServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        server.docs.open(doc.uri, doc.text, doc.version, doc.language_id)
        server.project.opened(doc.uri, doc.text, doc.language_id)
        server.warmer.schedule(doc.uri, end_of, OPEN_DELAY_S)
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
        changed = server.docs.change(uri, params.text_document.version, changes, server.encoding)
        if changed is not None:
            last = next(((rng, new) for rng, new in reversed(changes) if rng is not None), None)
            server.project.changed(uri, changed.text, changed.language_id, last[0][0] if last else None)
            # Where the last edit ended: positions before its start are the same after it.
            at = end_of(changed.text)
            if last is not None:
                (l0, c0, _, _), new = last
                at = changed.offset_at(l0, c0, server.encoding, strict=False) + len(new)
            server.warmer.schedule(uri, at, PAUSE_S)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        if server.worker is not None:
            server.worker.cancel_document(uri)
        server.project.closed(uri)
        server.warmer.drop(uri)
        if not server.docs.close(uri):
            log.debug("didClose for a document that was not open: %s", uri)
        # The service's per-document caches go with the document (a fake service may not have them),
        # on the service's one worker thread like every other service call (a decode may be writing them).
        service = server.models.service if server.models is not None else None
        forget = getattr(service, "forget", None)
        if callable(forget):
            server.executor.submit(_forget, forget, uri)

    @server.feature(CURSOR_METHOD)
    def cursor(params: Any) -> None:
        cursor_rested(server, params)

    @server.feature(DOCUMENT_TEXT_METHOD)
    def document_text_request(params: Any) -> dict[str, Any] | None:
        return document_text(server, params)

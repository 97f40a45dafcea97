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
from dspark_lsp.lsp.warm import CURSOR_DELAY_S, OPEN_DELAY_S, PAUSE_S, cursor_params, end_of

if TYPE_CHECKING:
    from dspark_lsp.lsp.session import Session

log = logging.getLogger(__name__)

DOCUMENT_TEXT_METHOD = "dspark/documentText"


def document_text(session: Session, params: Any) -> dict[str, Any] | None:
    """The mirror of one document; params arrive unstructured (a custom method has no lsprotocol type),
    so anything that is not `{"textDocument": {"uri": str}}` answers null rather than raising."""
    text_document = _field(params, "textDocument")
    uri = _field(text_document, "uri")
    if not isinstance(uri, str):
        return None
    doc = session.docs.get(uri)
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


def cursor_rested(session: Session, params: Any) -> None:
    """`dspark/cursor`: our clients' hint that the cursor rests at a position; warm the prompt there."""
    parsed = cursor_params(params)
    doc = session.docs.get(parsed[0]) if parsed is not None else None
    if parsed is None or doc is None:
        log.debug("dspark/cursor ignored: %r", params)
        return
    uri, line, character = parsed
    try:
        at = doc.offset_at(line, character, session.encoding, strict=False)
    except PositionError:
        return
    session.warmer.schedule(uri, at, CURSOR_DELAY_S)


def did_open(session: Session, params: types.DidOpenTextDocumentParams) -> None:
    doc = params.text_document
    stored = session.docs.open(doc.uri, doc.text, doc.version, doc.language_id)
    session.project.opened(doc.uri, stored.text, doc.language_id)  # the stored text: no lone surrogates
    session.warmer.schedule(doc.uri, end_of, OPEN_DELAY_S)
    log.debug("opened %s (%s, %d chars)", doc.uri, doc.language_id, len(doc.text))


def did_change(session: Session, params: types.DidChangeTextDocumentParams) -> None:
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
    changed = session.docs.change(uri, params.text_document.version, changes, session.encoding)
    if changed is not None:
        last = next(((rng, new) for rng, new in reversed(changes) if rng is not None), None)
        session.project.changed(uri, changed.text, changed.language_id, last[0][0] if last else None)
        # Where the last edit ended: positions before its start are the same after it.
        at = end_of(changed.text)
        if last is not None:
            (l0, c0, _, _), new = last
            at = changed.offset_at(l0, c0, session.encoding, strict=False) + len(new)
        session.warmer.schedule(uri, at, PAUSE_S)


def did_close(session: Session, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    if session.worker is not None:
        session.worker.cancel_document(uri)
    session.project.closed(uri)
    session.warmer.drop(uri)
    if not session.docs.close(uri):
        log.debug("didClose for a document that was not open: %s", uri)
    # The service's per-document caches go with the document (a fake service may not have them),
    # on the service's one worker thread like every other service call (a decode may be writing them).
    service = session.models.service if session.models is not None else None
    forget = getattr(service, "forget", None)
    if callable(forget):
        session.executor.submit(_forget, forget, uri)

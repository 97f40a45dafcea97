"""textDocument/inlineCompletion (ghost text, the main path) and textDocument/completion (one item).

Both resolve the cursor on a snapshot taken when the request arrives (positions refer to that version),
then hand the blocking decode to the worker (debounce, cancel-previous, $/cancelRequest there).
Anything wrong with the request itself (unopened document, position outside it) answers empty and logs:
an editor treats an error response to a completion as a failure worth a popup, an empty list as "nothing
to suggest".
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.uris import to_fs_path

from dspark_lsp.contract import CompletionRequest
from dspark_lsp.lsp.positions import PositionError, dominant_line_ending, offset_to_position
from dspark_lsp.lsp.worker import Outcome

if TYPE_CHECKING:
    from dspark_lsp.lsp.backend import Backend
    from dspark_lsp.lsp.session import Session

log = logging.getLogger(__name__)

# Documents larger than this are cut to a window around the cursor before they reach the service: the
# prompt uses a few hundred tokens anyway, and tokenizing / parsing megabytes per keystroke would not.
# The window's start moves in WINDOW_STEP jumps so consecutive requests share their prefix (KV reuse).
MAX_PREFIX_CHARS = 64_000
MAX_SUFFIX_CHARS = 16_000
WINDOW_STEP = 8_000

TRIGGER_CHARACTERS = [".", "(", "[", "{", ",", ":", "="]
_WORD_TAIL = re.compile(r"[A-Za-z0-9_$]+$")


@dataclass(frozen=True)
class Cursor:
    uri: str
    text: str  # what the service sees (maybe windowed)
    offset: int  # code points into `text`
    line: int
    character: int
    eol: str
    language_id: str | None
    doc_text: str = ""  # the whole document's text when the request came (a follow-up warm-up's spot)
    doc_offset: int = -1  # the cursor in ``doc_text``


def resolve_cursor(session: Session, uri: str, position: types.Position) -> Cursor | None:
    """The cursor on a snapshot of the document, or None (logged) when the request cannot be served."""
    doc = session.docs.get(uri)
    if doc is None:
        log.warning("completion requested for a document that is not open: %s", uri)
        return None
    try:
        full_offset = doc.offset_at(position.line, position.character, session.encoding, strict=True)
    except PositionError as exc:
        log.warning("completion position outside %s: %s", uri, exc)
        return None
    # A character past the line end was clamped: answer at the real spot, not the one sent.
    line, character = offset_to_position(doc.text, full_offset, encoding=session.encoding, starts=doc.starts)
    text, offset = windowed(doc.text, full_offset)
    return Cursor(
        uri, text, offset, line, character, dominant_line_ending(doc.text[:200_000]), doc.language_id,
        doc.text, full_offset,
    )


def windowed(text: str, offset: int) -> tuple[str, int]:
    """The text the service sees of a huge document: a window around the cursor, moving in steps."""
    if len(text) > MAX_PREFIX_CHARS + MAX_SUFFIX_CHARS:
        start = max(0, (offset - MAX_PREFIX_CHARS) // WINDOW_STEP * WINDOW_STEP)
        end = min(len(text), offset + MAX_SUFFIX_CHARS)
        text, offset = text[start:end], offset - start
    return text, offset


def request_at(
    session: Session, backend: Backend, uri: str, text: str, offset: int, language_id: str | None,
    automatic: bool = False,
) -> CompletionRequest:
    """The service request for a completion at ``offset`` of the (windowed) ``text`` of ``uri``, with the
    project's context for it. Completions and background warm-ups build it the same way, so a warm-up
    prefills exactly the prompt the request will use. ``automatic``: asked as the user types (it may be
    answered early, quickAnswerMs)."""
    project = session.project.for_request(uri, text, offset, language_id, session.config)
    return backend.make_request(
        text=text,
        offset=offset,
        language_id=language_id,
        path=_path_of(uri),
        doc_key=uri,
        context=project.context,
        repo_name=project.repo_name,
        prompt_path=project.prompt_path,
        automatic=automatic,
    )


async def complete_at(session: Session, cursor: Cursor, *, explicit: bool) -> Outcome:
    worker = session.worker
    backend = session.backend
    if worker is None or backend is None:
        session.not_ready_early += 1
        return Outcome("not_ready", detail="not initialized")

    def make_request() -> CompletionRequest:
        # After the debounce: the context is gathered only for requests that will run.
        return request_at(session, backend, cursor.uri, cursor.text, cursor.offset, cursor.language_id,
                          automatic=not explicit)

    session.warmer.drop(cursor.uri)  # this request pays for its own prompt

    # An explicit invocation (a keybinding) skips the debounce: the user asked and is waiting.
    debounce = 0 if explicit else session.lsp_settings.debounce_ms
    outcome = await worker.run(cursor.uri, make_request, debounce)
    if outcome.status in ("ok", "empty") and cursor.doc_offset >= 0:
        # An answer given early (quickAnswerMs) is decoded on from there by the same background job,
        # whether or not warm-ups are on.
        early = outcome.result is not None and outcome.result.stop_reason == "deadline"
        session.warmer.after_completion(cursor.uri, cursor.doc_text, cursor.doc_offset, force=early)
    if outcome.text:
        outcome.text = _match_line_endings(outcome.text, cursor.eol)
    _show_notice(session)
    return outcome


def _show_notice(session: Session) -> None:
    """A note the service has come to (latency_note.py: slow answers from the default model), shown once."""
    service = session.models.service if session.models is not None else None
    note = service.take_notice() if service is not None else None
    if note:
        session.channel.show_message(f"DSpark: {note}", types.MessageType.Warning)


def _path_of(uri: str) -> str | None:
    try:
        return to_fs_path(uri)
    except Exception:
        return None


def _match_line_endings(text: str, eol: str) -> str:
    if eol == "\n":
        return text
    return text.replace("\r\n", "\n").replace("\n", eol)


def _range_at(cursor: Cursor, start_character: int | None = None) -> types.Range:
    start = types.Position(cursor.line, cursor.character if start_character is None else start_character)
    return types.Range(start=start, end=types.Position(cursor.line, cursor.character))


async def inline_completion(session: Session, params: types.InlineCompletionParams) -> types.InlineCompletionList:
    empty = types.InlineCompletionList(items=[])
    if not session.lsp_settings.enable:
        return empty
    cursor = resolve_cursor(session, params.text_document.uri, params.position)
    if cursor is None:
        return empty
    explicit = (
        params.context is not None
        and params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
    )
    outcome = await complete_at(session, cursor, explicit=explicit)
    if not outcome.text:
        return empty
    item = types.InlineCompletionItem(insert_text=outcome.text, range=_range_at(cursor))
    return types.InlineCompletionList(items=[item])


async def completion(session: Session, params: types.CompletionParams) -> types.CompletionList:
    # is_incomplete: the client must ask again as the user types (our answer depends on every char).
    empty = types.CompletionList(is_incomplete=True, items=[])
    if not session.lsp_settings.enable:
        return empty
    cursor = resolve_cursor(session, params.text_document.uri, params.position)
    if cursor is None:
        return empty
    explicit = (
        params.context is not None and params.context.trigger_kind == types.CompletionTriggerKind.Invoked
    )
    outcome = await complete_at(session, cursor, explicit=explicit)
    if not outcome.text:
        return empty
    return types.CompletionList(is_incomplete=True, items=[_completion_item(cursor, outcome.text)])


def _completion_item(cursor: Cursor, completion: str) -> types.CompletionItem:
    """One item whose edit replaces the word typed so far with word + completion, so clients that
    filter items by the word before the cursor keep ours (they would drop a bare continuation)."""
    before = cursor.text[max(0, cursor.offset - 256) : cursor.offset]
    before = re.split(r"\r\n|\r|\n", before)[-1]
    word = m.group(0) if (m := _WORD_TAIL.search(before)) else ""
    word_start_character = cursor.character - len(word)  # ASCII word: one UTF-16 unit per char
    new_text = word + completion
    first_line = new_text.splitlines()[0] if new_text.strip() else new_text
    label = first_line.strip() or new_text.strip() or new_text
    if len(label) > 80:
        label = label[:77] + "…"
    return types.CompletionItem(
        label=label,
        kind=types.CompletionItemKind.Text,
        detail="DSpark",
        filter_text=new_text,
        sort_text="0",
        preselect=True,
        insert_text_format=types.InsertTextFormat.PlainText,
        text_edit=types.TextEdit(range=_range_at(cursor, word_start_character), new_text=new_text),
    )

"""Which LSP method goes to which handler, and how the handler runs: the one table, `ROUTES`.

Handlers are module-level functions of (session, params) in handlers/*.py; `register` binds them to one
session and hands them to pygls. Two kinds:

* SYNC: a plain function, run to completion on the event loop before the next frame is read, so
  document edits apply in the order they were sent;
* ASYNC: a coroutine pygls runs as a task on the loop; it waits without blocking the loop, on the
  background worker (a completion's decode, the service import at `initialized`) or on the client
  (a workspace/configuration pull), and `$/cancelRequest` cancels it.

Nothing here runs a handler on another thread: a blocking service call goes to the session's one
worker thread (executor.py) from inside the handler, as every service call does.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from lsprotocol import types

from dspark_lsp.lsp.handlers import (
    completion,
    configuration,
    documents,
    feedback,
    lifecycle,
    stats,
    workspace,
)
from dspark_lsp.lsp.warm import CURSOR_METHOD

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from dspark_lsp.lsp.session import Session

Kind = Literal["sync", "async"]
SYNC: Kind = "sync"
ASYNC: Kind = "async"


@dataclass(frozen=True)
class Route:
    method: str
    handler: Callable[..., Any]  # (session, params) -> result; a coroutine function when kind is ASYNC
    kind: Kind
    options: Any = None  # the capability options pygls advertises for the method, if any


ROUTES: tuple[Route, ...] = (
    # lifecycle (pygls' own initialize / shutdown / exit run first and call these)
    Route(types.INITIALIZE, lifecycle.initialize, SYNC),
    Route(types.INITIALIZED, lifecycle.initialized, ASYNC),
    Route(types.SHUTDOWN, lifecycle.shutdown, SYNC),
    Route(types.EXIT, lifecycle.exit_, SYNC),
    # the document mirror (our own store replaces pygls' sync, see documents.py)
    Route(types.TEXT_DOCUMENT_DID_OPEN, documents.did_open, SYNC),
    Route(types.TEXT_DOCUMENT_DID_CHANGE, documents.did_change, SYNC),
    Route(types.TEXT_DOCUMENT_DID_CLOSE, documents.did_close, SYNC),
    Route(CURSOR_METHOD, documents.cursor_rested, SYNC),
    Route(documents.DOCUMENT_TEXT_METHOD, documents.document_text, SYNC),
    # workspace folders and files (the prompt's context)
    Route(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, workspace.did_change_folders, SYNC),
    Route(types.WORKSPACE_DID_CHANGE_WATCHED_FILES, workspace.did_change_watched, SYNC),
    # settings
    Route(types.WORKSPACE_DID_CHANGE_CONFIGURATION, configuration.did_change_configuration, ASYNC),
    # completions
    Route(
        types.TEXT_DOCUMENT_INLINE_COMPLETION,
        completion.inline_completion,
        ASYNC,
        types.InlineCompletionOptions(),
    ),
    Route(
        types.TEXT_DOCUMENT_COMPLETION,
        completion.completion,
        ASYNC,
        types.CompletionOptions(trigger_characters=completion.TRIGGER_CHARACTERS, resolve_provider=False),
    ),
    # what the editor showed and the user took, and the figures
    Route(feedback.DID_SHOW, feedback.did_show, SYNC),
    Route(feedback.DID_ACCEPT, feedback.did_accept, SYNC),
    Route(feedback.DID_PARTIALLY_ACCEPT, feedback.did_partially_accept, SYNC),
    Route(stats.STATS_METHOD, stats.stats, SYNC),
)


def register(server: LanguageServer, session: Session) -> None:
    """Hand every route's handler, bound to `session`, to pygls."""
    for route in ROUTES:
        # pygls runs a coroutine function as a task and calls anything else in place; it sees through
        # functools.partial, so the kind the table says must be the kind the function is.
        if inspect.iscoroutinefunction(route.handler) != (route.kind == ASYNC):
            raise TypeError(f"{route.method}: {route.handler.__qualname__} is not a {route.kind} handler")
        server.feature(route.method, route.options)(functools.partial(route.handler, session))

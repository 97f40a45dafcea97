"""The client's workspace folders and watched files: what the prompt's context may read (lsp/project.py).

Folders come from `initialize` (workspaceFolders, else rootUri / rootPath) and
`workspace/didChangeWorkspaceFolders`; file events from `workspace/didChangeWatchedFiles` keep the
workspace index current. Nothing is read when the client names no folder.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.uris import from_fs_path

if TYPE_CHECKING:
    from dspark_lsp.lsp.session import Session

log = logging.getLogger(__name__)

_KINDS = {types.FileChangeType.Created: "created", types.FileChangeType.Changed: "changed",
          types.FileChangeType.Deleted: "deleted"}


def folders_of(params: types.InitializeParams) -> list[str]:
    """The workspace folders' URIs the client named in initialize (the deprecated fields as fallback)."""
    if params.workspace_folders:
        return [f.uri for f in params.workspace_folders]
    if params.root_uri:
        return [params.root_uri]
    if params.root_path:
        uri = from_fs_path(params.root_path)
        return [uri] if uri else []
    return []


def set_folders(session: Session, uris: list[str]) -> None:
    try:
        session.project.set_roots(uris)
    except Exception:  # a folder we cannot index costs the context, never the session
        log.exception("context: cannot use the workspace folders %s", uris)


def did_change_folders(session: Session, params: types.DidChangeWorkspaceFoldersParams) -> None:
    current = [str(r.as_uri()) for r in session.project.roots]
    removed = {f.uri for f in params.event.removed}
    kept = [u for u in current if u not in removed]
    set_folders(session, kept + [f.uri for f in params.event.added if f.uri not in kept])


def did_change_watched(session: Session, params: types.DidChangeWatchedFilesParams) -> None:
    for change in params.changes:
        kind: Any = _KINDS.get(change.type, "changed")
        session.project.watched(change.uri, kind)

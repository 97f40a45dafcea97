"""The session's view of the user's project, for the prompt: open documents' chunks and the workspace.

Fed by the document handlers (open / change / close), the workspace-folder notifications and the
watched-files notifications; read by the completion handler (`for_request`), which hands the pieces to
the service inside the request. Everything here runs on the event loop, so it must stay cheap: an edit
only marks its document as changed, and the document is cut into chunks again only when a completion in
*another* document could pick from it (the document being typed in is never its own context).

Nothing is read from disk unless the client names workspace folders, and then only under them
(`dspark_lsp.context.workspace`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pygls.uris import to_fs_path

from dspark_lsp.context.gather import ContextSettings, gather_context, parse_languages
from dspark_lsp.context.ring import ChunkRing
from dspark_lsp.context.types import ContextFile

log = logging.getLogger(__name__)

# Lines per block within which a document's context stays put (lsp/project.ProjectContext._sticky).
STICKY_LINES = 16


@dataclass
class _Pending:
    text: str
    language: str | None
    edited_line: int | None


@dataclass
class RequestContext:
    """What a completion request carries about the project (CompletionRequest's fields of these names)."""

    context: tuple[ContextFile, ...] = ()
    repo_name: str | None = None
    prompt_path: str | None = None


def _newer(kept: ContextFile, fresh: ContextFile | None) -> ContextFile:
    """The piece to keep in ``kept``'s place: the fresh one only if it says something ``kept`` does not."""
    if fresh is None or fresh.text in kept.text:
        return kept
    return fresh


def _fs_path(uri: str) -> Path | None:
    try:
        path = to_fs_path(uri)
    except Exception:
        return None
    return Path(path) if path else None


@dataclass
class ProjectContext:
    ring: ChunkRing = field(default_factory=ChunkRing)
    roots: list[Path] = field(default_factory=list)
    workspace: Any = None  # a context.workspace.Workspace once the client named folders
    _pending: dict[str, _Pending] = field(default_factory=dict)  # by prompt path
    _open: dict[Path, str] = field(default_factory=dict)  # fs path -> open document's text
    # uri -> (the cursor's block, the pieces the last request there carried): see _sticky
    _last: dict[str, tuple[int, tuple[ContextFile, ...]]] = field(default_factory=dict)

    # -- the client's workspace ------------------------------------------------------------------
    def set_roots(self, uris: list[str]) -> None:
        """The client's workspace folders (initialize, didChangeWorkspaceFolders). The index is built in
        the background; none is built when the client names no folder."""
        roots = [p for p in (_fs_path(u) for u in uris) if p is not None and p.is_dir()]
        if roots == self.roots:
            return
        self.close()
        self.roots = roots
        if roots:
            from dspark_lsp.context.workspace import Workspace

            self.workspace = Workspace(roots)
            self.workspace.start()
            log.info("context: indexing %s in the background", ", ".join(str(r) for r in roots))

    def watched(self, uri: str, kind: str) -> None:
        """workspace/didChangeWatchedFiles: keep the index current (kind: created / changed / deleted)."""
        path = _fs_path(uri)
        if self.workspace is not None and path is not None:
            self.workspace.update(path, kind)

    def close(self) -> None:
        if self.workspace is not None:
            self.workspace.close()
        self.workspace = None

    # -- documents -------------------------------------------------------------------------------
    def prompt_path(self, uri: str) -> str:
        """The file's name in the prompt: relative to its workspace folder, else its file name."""
        path = _fs_path(uri)
        if path is None:
            return uri.rsplit("/", 1)[-1]
        for root in self.roots:
            try:
                return path.relative_to(root).as_posix()
            except ValueError:
                continue
        return path.name

    def repo_name(self, uri: str) -> str | None:
        path = _fs_path(uri)
        for root in self.roots:
            if path is not None and path.is_relative_to(root):
                return root.name
        return self.roots[0].name if self.roots else None

    def opened(self, uri: str, text: str, language: str | None) -> None:
        self._track(uri, text)
        self._pending[self.prompt_path(uri)] = _Pending(text, language, None)

    def changed(self, uri: str, text: str, language: str | None, edited_line: int | None) -> None:
        self._track(uri, text)
        self._pending[self.prompt_path(uri)] = _Pending(text, language, edited_line)

    def closed(self, uri: str) -> None:
        name = self.prompt_path(uri)
        self._pending.pop(name, None)
        self._last.pop(uri, None)
        self.ring.forget(name)
        path = _fs_path(uri)
        if path is not None:
            self._open.pop(path, None)

    def _track(self, uri: str, text: str) -> None:
        path = _fs_path(uri)
        if path is not None:
            self._open[path] = text

    def _flush(self, exclude: str) -> None:
        """Chunk the documents changed since the last completion, but the one being typed in."""
        for name in [n for n in self._pending if n != exclude]:
            p = self._pending.pop(name)
            self.ring.observe(name, p.text, p.language, edited_line=p.edited_line)

    # -- completions -----------------------------------------------------------------------------
    def for_request(self, uri: str, text: str, offset: int, language: str | None, config: Any) -> RequestContext:
        """The context pieces for a completion at ``offset`` of the document ``uri`` under ``config``
        (a ServiceConfig; a config without the context fields means no context)."""
        budget = int(getattr(config, "context_budget", 0) or 0)
        name = self.prompt_path(uri)
        base = RequestContext(repo_name=self.repo_name(uri), prompt_path=name)
        if budget <= 0:
            return base
        settings = ContextSettings(
            open_files=bool(getattr(config, "context_open_files", False)),
            definitions=bool(getattr(config, "context_definitions", True)),
            definition_languages=parse_languages(str(getattr(config, "context_definition_languages", "*"))),
        )
        self._flush(exclude=name)
        from dspark_lsp.syntax import detect_language

        lang = detect_language(str(_fs_path(uri) or name), language)
        try:
            lookup = self.lookup() if settings.defines(lang) else None
            pieces = gather_context(text, offset, name, lang, ring=self.ring, lookup=lookup,
                                    settings=settings, budget_tokens=budget)
        except Exception:  # context is a bonus: a bug in it must cost the context, not the completion
            log.exception("context: gathering failed for %s", uri)
            pieces = ()
        base.context = self._sticky(uri, text.count("\n", 0, offset) // STICKY_LINES, pieces,
                                    allowed=lambda p: self._still_allowed(p, settings, lang))
        return base

    def _still_allowed(self, piece: ContextFile, settings: ContextSettings, language: str | None) -> bool:
        """Whether a piece kept from the last request may stay: its source is still on (the settings can
        change between requests) and, for an open document's chunk, the document is still open."""
        if piece.source == "open":
            return settings.open_files and piece.path in self.ring
        return settings.defines(language)

    def _sticky(self, uri: str, block: int, pieces: tuple[ContextFile, ...],
                allowed: Callable[[ContextFile], bool] = lambda p: True) -> tuple[ContextFile, ...]:
        """Keep the context stable while the cursor stays in one block of lines: the last request's
        pieces first, then only what is new (a definition for a name just typed). A changed context
        invalidates the KV of everything after it (the whole window), so a piece is never reordered or
        dropped while the cursor stays in the block, even when the gathering no longer finds it (typing
        one character can take the name it defines out of the lines looked at). A piece whose file changed
        is replaced in place when it brings text the old one lacks (a file edited, a second name of it
        used); the prompt's budget still drops from the front."""
        last = self._last.get(uri)
        if last is not None and last[0] == block:
            fresh = {(p.path, p.source): p for p in pieces}
            kept = [_newer(p, fresh.get((p.path, p.source))) for p in last[1] if allowed(p)]
            have = {(k.path, k.source) for k in kept}
            pieces = (*kept, *(p for p in pieces if (p.path, p.source) not in have))
        self._last[uri] = (block, pieces)
        return pieces

    def lookup(self) -> Any:
        from dspark_lsp.context.lookup import OpenDocumentsLookup

        return OpenDocumentsLookup(dict(self._open), self.workspace, self.roots)

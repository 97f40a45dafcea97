"""initialize, initialized, shutdown, exit."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.capabilities import ServerCapabilitiesBuilder

from dspark_lsp.lsp.handlers.configuration import apply_settings
from dspark_lsp.lsp.handlers.workspace import folders_of, set_folders
from dspark_lsp.lsp.positions import normalize_encoding
from dspark_lsp.lsp.settings import section_of

if TYPE_CHECKING:
    from dspark_lsp.lsp.session import Session

log = logging.getLogger(__name__)


def initialize(session: Session, params: types.InitializeParams) -> None:
    session.channel.bind(asyncio.get_running_loop())
    # pygls picks the encoding from the client's offer with the same rule; we must agree with it.
    chosen = ServerCapabilitiesBuilder.choose_position_encoding(params.capabilities)
    session.encoding = normalize_encoding(str(getattr(chosen, "value", chosen)))
    options: Any = params.initialization_options
    section = section_of(options, flat_ok=True)
    if options is not None and section is None:
        log.warning("initializationOptions is not an object; ignoring it")
    session.init_options = section or {}
    set_folders(session, folders_of(params))
    client = params.client_info.name if params.client_info else "unknown client"
    log.info("initialize from %s; position encoding %s", client, session.encoding)


async def initialized(session: Session, params: types.InitializedParams) -> None:
    # Settings problems are reported now (the client is ready for window/showMessage) and the
    # models start loading in the background; requests meanwhile answer empty. The service module
    # imports torch (seconds): do that on the worker thread so the loop keeps answering.
    loop = asyncio.get_running_loop()
    session.channel.status("loading", "starting")
    try:
        await loop.run_in_executor(session.executor, session.ensure_backend)
    except Exception:
        pass  # apply_settings reports an unavailable service
    apply_settings(session, reason="initialize")


def shutdown(session: Session, params: Any) -> None:
    log.info("shutdown requested")
    if session.worker is not None:
        session.worker.cancel_all()
    if session.models is not None:
        session.models.shutdown()
    session.exit_code = 0


def exit_(session: Session, params: Any) -> None:
    """Called by the protocol's `exit` (protocol.py), which then stops reading; the session itself ends
    in Session.close when the read loop returns, as it does when the stream ends without `exit`."""
    session.channel.closed = True  # nothing goes to the client from here on, this line included
    log.info("exit (code %d)", session.exit_code)

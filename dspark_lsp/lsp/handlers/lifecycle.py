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
    from dspark_lsp.lsp.server import DSparkServer

log = logging.getLogger(__name__)


def register(server: DSparkServer) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(params: types.InitializeParams) -> None:
        server.channel.bind(asyncio.get_running_loop())
        # pygls picks the encoding from the client's offer with the same rule; we must agree with it.
        chosen = ServerCapabilitiesBuilder.choose_position_encoding(params.capabilities)
        server.encoding = normalize_encoding(str(getattr(chosen, "value", chosen)))
        options: Any = params.initialization_options
        section = section_of(options, flat_ok=True)
        if options is not None and section is None:
            log.warning("initializationOptions is not an object; ignoring it")
        server.init_options = section or {}
        set_folders(server, folders_of(params))
        client = params.client_info.name if params.client_info else "unknown client"
        log.info("initialize from %s; position encoding %s", client, server.encoding)

    @server.feature(types.INITIALIZED)
    async def initialized(params: types.InitializedParams) -> None:
        # Settings problems are reported now (the client is ready for window/showMessage) and the
        # models start loading in the background; requests meanwhile answer empty. The service module
        # imports torch (seconds): do that on the worker thread so the loop keeps answering.
        loop = asyncio.get_running_loop()
        server.channel.status("loading", "starting")
        try:
            await loop.run_in_executor(server.executor, server.ensure_backend)
        except Exception:
            pass  # apply_settings reports an unavailable service
        apply_settings(server, reason="initialize")

    @server.feature(types.SHUTDOWN)
    def shutdown(params: Any) -> None:
        log.info("shutdown requested")
        if server.worker is not None:
            server.worker.cancel_all()
        if server.models is not None:
            server.models.shutdown()
        server.exit_code = 0

    @server.feature(types.EXIT)
    def exit_(params: Any) -> None:
        log.info("exit (code %d)", server.exit_code)
        server.channel.closed = True

"""`--tcp`: the listener. Every connection is one editor with its own session (initialize, documents,
settings, models), so answers and document states never cross between editors: a file open in both has
one mirror per editor, each in step with that editor's buffer. (pygls' start_tcp shares one protocol, so
a second connection took over the first one's replies.)

The process ends when a session ends with `exit` and no other editor is connected (exit code of that
session: 0 after `shutdown`). An editor that disconnects without `exit` (it crashed) leaves the server
listening, so it can reconnect.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dspark_lsp.lsp.channel import SESSION_CHANNEL

if TYPE_CHECKING:
    from dspark_lsp.lsp.server import DSparkServer

log = logging.getLogger(__name__)


class TcpListener:
    def __init__(self, new_connection: Callable[[], DSparkServer], host: str, port: int) -> None:
        # A fresh server (its own protocol and session) per connection: server.py builds it.
        self.new_connection = new_connection
        self.host, self.port = host, port
        self.connections: set[DSparkServer] = set()
        self.addresses: list[Any] = []  # where it listens (a port the system chose, --tcp 0, too)
        self.exit_code = 1
        self._done: asyncio.Event | None = None

    async def run(self) -> None:
        self._done = asyncio.Event()
        server = await asyncio.start_server(self._connection, self.host, self.port)
        self.addresses = [sock.getsockname() for sock in server.sockets]
        bound = ", ".join(_address(name) for name in self.addresses)
        loopback_only = all(_is_loopback(name[0]) for name in self.addresses)
        scope = (
            "loopback only; pass --host or --tcp HOST:PORT to listen elsewhere"
            if loopback_only
            else "reachable from other machines: anyone who can connect can read the documents sent"
        )
        # stderr, not only the log: the person who started the server reads where it listens (and a
        # port chosen by the system, --tcp 0) there.
        print(f"dspark-lsp: listening on {bound} ({scope})", file=sys.stderr, flush=True)
        log.info("listening on %s (%s)", bound, scope)
        try:
            await self._done.wait()
        finally:
            server.close()
            for connection in list(self.connections):
                connection.session.close()
                writer = getattr(connection.protocol, "writer", None)
                if writer is not None:
                    writer.close()
            await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = self.new_connection()
        session, protocol = connection.session, connection.dspark_protocol
        protocol.set_writer(writer)  # type: ignore[arg-type]  # StreamWriter.write is what pygls calls
        # Log records from this connection's handlers and worker go to this editor only (channel.py).
        SESSION_CHANNEL.set(session.channel)
        session.executor.submit(SESSION_CHANNEL.set, session.channel)
        peer = writer.get_extra_info("peername")
        self.connections.add(connection)
        log.info("editor connected from %s (%d connected)", peer, len(self.connections))
        try:
            # Returns at `exit` (protocol.py stops the read loop and closes the writer) or at the end
            # of the stream; either way the session ends below, in Session.close.
            await connection.serve_frames(reader.read)
        except (ConnectionError, OSError) as exc:
            log.info("connection from %s lost: %s", peer, exc)
        finally:
            self.connections.discard(connection)
            session.close()
            if not writer.is_closing():
                writer.close()
            log.info(
                "editor from %s gone (%s; %d connected)",
                peer,
                "exit" if protocol.exited else "disconnected",
                len(self.connections),
            )
            if protocol.exited and not self.connections and self._done is not None:
                self.exit_code = session.exit_code
                self._done.set()


def _address(sockname: Any) -> str:
    host, port = sockname[0], sockname[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"

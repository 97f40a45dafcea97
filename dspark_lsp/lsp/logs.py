"""Logging for the server: window/logMessage, stderr (warnings and up) and an optional file."""

from __future__ import annotations

import logging

from dspark_lsp.errors import UserError
from dspark_lsp.lsp.channel import Channel, ClientLogHandler

LEVELS = {
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
}
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def parse_level(name: str) -> int:
    try:
        return LEVELS[name.strip().lower()]
    except (KeyError, AttributeError):
        raise UserError(f"unknown log level {name!r}; use one of error, warning, info, debug") from None


def configure_logging(channel: Channel, level_name: str, log_file: str | None) -> None:
    """Our loggers go to the client at `level`; everything (pygls included at debug) to the file."""
    level = parse_level(level_name)
    ours = logging.getLogger("dspark_lsp")
    ours.setLevel(level)
    ours.propagate = True

    client = ClientLogHandler(channel, level)
    client.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    ours.addHandler(client)

    root = logging.getLogger()
    root.setLevel(level)
    stderr = logging.StreamHandler()
    stderr.setLevel(max(level, logging.WARNING))  # the client already shows info through logMessage
    stderr.setFormatter(logging.Formatter(_FORMAT))
    root.addHandler(stderr)
    if log_file:
        try:
            handler = logging.FileHandler(log_file, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot open the log file {log_file}: {exc.strerror or exc}") from exc
        handler.setLevel(level)
        handler.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(handler)
    # pygls logs every message body at INFO; keep that for --log-level debug only.
    logging.getLogger("pygls").setLevel(logging.DEBUG if level <= logging.DEBUG else logging.WARNING)

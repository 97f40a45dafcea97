"""`--stdio` / `--tcp HOST:PORT`: the server's transport options, shared by `dspark-lsp` (cli.py) and
`python -m dspark_lsp.lsp`, so both read a command line the same way.

Clients build this command line in two places and may each add `--stdio` (vscode-languageclient appends
one for TransportKind.stdio; issue 15 found `dspark-lsp --stdio --stdio`). A repeated `--stdio` means
the same thing once or twice, so it is accepted with a warning on stderr (an older extension keeps
working and the user learns why). A repeated `--tcp`, or `--stdio` with `--tcp`, names two transports:
refused with one error line, never resolved by argparse's "last one wins".

Light on purpose: no pygls import, so `dspark-lsp --help` stays fast.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from dspark_lsp.errors import UserError


@dataclass(frozen=True)
class Transport:
    stdio: bool
    tcp: tuple[str, int] | None
    # Lines for stderr (a tolerated repeat); never stdout, which is the protocol stream under --stdio.
    warnings: tuple[str, ...] = field(default=())

    @property
    def chosen(self) -> bool:
        return self.stdio or self.tcp is not None


def parse_tcp(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host or "127.0.0.1", int(port)


def add_transport_arguments(parser: argparse.ArgumentParser, *, stdio_help: str, tcp_help: str) -> None:
    # count / append instead of store_true / store: transport_of must see repeats to judge them.
    parser.add_argument("--stdio", action="count", default=0, help=stdio_help)
    parser.add_argument("--tcp", type=parse_tcp, action="append", default=None, metavar="HOST:PORT", help=tcp_help)


def transport_of(args: argparse.Namespace) -> Transport:
    """The transport the parsed options ask for (neither: `chosen` is False). Raises UserError for
    contradictory options."""
    stdio_count = int(args.stdio or 0)
    tcps: list[tuple[str, int]] = list(args.tcp or [])
    if len(tcps) > 1:
        listed = ", ".join(f"{host}:{port}" for host, port in tcps)
        raise UserError(f"--tcp given {len(tcps)} times ({listed}): the server listens on one address")
    if stdio_count and tcps:
        raise UserError("choose one transport: --stdio or --tcp HOST:PORT, not both")
    warnings: tuple[str, ...] = ()
    if stdio_count > 1:
        warnings = (
            f"--stdio given {stdio_count} times; once is enough (a client that appends its own --stdio, "
            "like vscode-languageclient's TransportKind.stdio, should not be given one too)",
        )
    return Transport(stdio=stdio_count > 0, tcp=tcps[0] if tcps else None, warnings=warnings)

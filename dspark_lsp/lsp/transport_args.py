"""`--stdio` / `--tcp HOST:PORT`: the server's transport options, shared by `dspark-lsp` (cli.py) and
`python -m dspark_lsp.lsp`, so both read a command line the same way.

Clients build this command line in two places and may each add `--stdio` (vscode-languageclient appends
one for TransportKind.stdio; issue 15 found `dspark-lsp --stdio --stdio`). A repeated `--stdio` means
the same thing once or twice, so it is accepted with a warning on stderr (an older extension keeps
working and the user learns why). A repeated `--tcp`, or `--stdio` with `--tcp`, names two transports:
refused with one error line, never resolved by argparse's "last one wins".

`--tcp [HOST:]PORT` listens on 127.0.0.1 (loopback only: the protocol has no authentication and carries
the documents' text) unless a host is named, in `--tcp HOST:PORT` or with `--host HOST`; the server says
where it listens on stderr, and that a non-loopback address is reachable from other machines. Port 0
lets the system choose (the line on stderr names the port).

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


DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class TcpAddress:
    host: str | None  # None: not named on the command line (DEFAULT_HOST, or --host)
    port: int


def _tcp_address(value: str) -> TcpAddress:
    """argparse type of --tcp: PORT, :PORT, HOST:PORT or [IPv6]:PORT."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected [HOST:]PORT, got {value!r}")
    return TcpAddress(host or None, int(port))


def parse_tcp(value: str) -> tuple[str, int]:
    """(host, port) of a --tcp value; the host defaults to loopback."""
    address = _tcp_address(value)
    return address.host or DEFAULT_HOST, address.port


def add_transport_arguments(parser: argparse.ArgumentParser, *, stdio_help: str, tcp_help: str) -> None:
    # count / append instead of store_true / store: transport_of must see repeats to judge them.
    parser.add_argument("--stdio", action="count", default=0, help=stdio_help)
    parser.add_argument(
        "--tcp",
        type=_tcp_address,
        action="append",
        default=None,
        metavar="[HOST:]PORT",
        help=f"{tcp_help} (on {DEFAULT_HOST}, loopback only, unless a host is given; port 0: any free one)",
    )
    parser.add_argument(
        "--host",
        default=None,
        help=f"the address --tcp listens on (default {DEFAULT_HOST}; 0.0.0.0 or :: reach other machines)",
    )


def transport_of(args: argparse.Namespace) -> Transport:
    """The transport the parsed options ask for (neither: `chosen` is False). Raises UserError for
    contradictory options."""
    stdio_count = int(args.stdio or 0)
    addresses: list[TcpAddress] = list(args.tcp or [])
    host_flag: str | None = getattr(args, "host", None)
    if len(addresses) > 1:
        listed = ", ".join(f"{a.host or host_flag or DEFAULT_HOST}:{a.port}" for a in addresses)
        raise UserError(f"--tcp given {len(addresses)} times ({listed}): the server listens on one address")
    if stdio_count and addresses:
        raise UserError("choose one transport: --stdio or --tcp HOST:PORT, not both")
    if host_flag is not None and not addresses:
        raise UserError("--host goes with --tcp (stdio has no address)")
    tcp: tuple[str, int] | None = None
    if addresses:
        named = addresses[0].host
        if named is not None and host_flag is not None and named != host_flag:
            raise UserError(
                f"two hosts to listen on: --tcp {named}:{addresses[0].port} and --host {host_flag}"
            )
        tcp = (named or host_flag or DEFAULT_HOST, addresses[0].port)
    warnings: tuple[str, ...] = ()
    if stdio_count > 1:
        warnings = (
            f"--stdio given {stdio_count} times; once is enough (a client that appends its own --stdio, "
            "like vscode-languageclient's TransportKind.stdio, should not be given one too)",
        )
    return Transport(stdio=stdio_count > 0, tcp=tcp, warnings=warnings)

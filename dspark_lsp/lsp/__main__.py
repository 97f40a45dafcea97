"""`python -m dspark_lsp.lsp --stdio | --tcp HOST:PORT [--log-level L] [--log-file F]`.

The product entry point is `dspark-lsp` (cli.py); this one exists so the server can run on its own.
"""

from __future__ import annotations

import argparse
import sys

from dspark_lsp.errors import UserError
from dspark_lsp.lsp.transport_args import add_transport_arguments, parse_tcp, transport_of

__all__ = ["main", "parse_tcp"]  # parse_tcp: kept importable from here for older callers (test fixtures)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dspark_lsp.lsp", description="DSpark language server")
    add_transport_arguments(parser, stdio_help="talk LSP over stdin/stdout", tcp_help="listen on a TCP port")
    parser.add_argument("--log-level", default="info", help="error, warning, info or debug (default info)")
    parser.add_argument("--log-file", default=None, help="also write logs to this file")
    args = parser.parse_args(argv)
    try:
        transport = transport_of(args)
        if not transport.chosen:
            raise UserError("choose a transport: --stdio or --tcp HOST:PORT")
        for warning in transport.warnings:
            print(f"dspark-lsp: warning: {warning}", file=sys.stderr)
        from dspark_lsp.lsp.server import run_server

        return run_server(
            stdio=transport.stdio, tcp=transport.tcp, log_level=args.log_level, log_file=args.log_file
        )
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())

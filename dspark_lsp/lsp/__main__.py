"""`python -m dspark_lsp.lsp --stdio | --tcp HOST:PORT [--log-level L] [--log-file F]`.

The product entry point is `dspark-lsp` (cli.py); this one exists so the server can run on its own.
"""

from __future__ import annotations

import argparse
import sys

from dspark_lsp.errors import UserError


def parse_tcp(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dspark_lsp.lsp", description="DSpark language server")
    transport = parser.add_mutually_exclusive_group(required=True)
    transport.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout")
    transport.add_argument("--tcp", type=parse_tcp, metavar="HOST:PORT", help="listen on a TCP port")
    parser.add_argument("--log-level", default="info", help="error, warning, info or debug (default info)")
    parser.add_argument("--log-file", default=None, help="also write logs to this file")
    args = parser.parse_args(argv)
    from dspark_lsp.lsp.server import run_server

    try:
        return run_server(stdio=args.stdio, tcp=args.tcp, log_level=args.log_level, log_file=args.log_file)
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())

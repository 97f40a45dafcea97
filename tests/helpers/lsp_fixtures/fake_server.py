"""Runs the real DSpark language server with the fake service (tests only).

usage: fake_server.py [LOG_LEVEL] [--tcp HOST:PORT] [--log-file PATH]
"""

from __future__ import annotations

import argparse
import sys

from fake_service import BACKEND

from dspark_lsp.lsp.__main__ import parse_tcp
from dspark_lsp.lsp.server import create_server, run_server

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("level", nargs="?", default="debug")
    parser.add_argument("--tcp", type=parse_tcp, default=None)
    parser.add_argument("--log-file", default=None)
    args = parser.parse_args()
    server = create_server(backend=BACKEND)
    sys.exit(
        run_server(
            stdio=args.tcp is None, tcp=args.tcp, log_level=args.level, log_file=args.log_file, server=server
        )
    )

"""Runs the real DSpark language server over stdio with the fake service (tests only)."""

from __future__ import annotations

import sys

from fake_service import BACKEND

from dspark_lsp.lsp.server import create_server, run_server

if __name__ == "__main__":
    level = sys.argv[1] if len(sys.argv) > 1 else "debug"
    sys.exit(
        run_server(
            stdio=True, tcp=None, log_level=level, log_file=None, server=create_server(backend=BACKEND)
        )
    )

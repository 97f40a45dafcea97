"""The slow-answers warning as an editor sees it (dspark_lsp/latency_note.py): start the real server over
stdio with every default, open worker.py, ask 24 times at a new end of the file each time (explicit
requests, each waited for), then print the window/showMessage warnings the server sent.

    python bench/results/2026-12-07-zen3/note-user.py     # repository root, venv active
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from dspark_lsp.bench.lsp_replay import ReplayConfig, StdioClient, _ask, _initialize, _open, _Typed

FILE = Path("dspark_lsp/lsp/worker.py")


def main() -> None:
    lines = FILE.read_text().split("\n")
    client = StdioClient([sys.executable, "-m", "dspark_lsp.lsp", "--stdio"])
    t0 = time.monotonic()
    _initialize(client, ReplayConfig(file=FILE))
    uri = FILE.resolve().as_uri()
    _open(client, uri, "\n".join(lines), "python")
    latencies = []
    for i in range(24):
        text = "\n".join(lines[: 200 + 3 * i]) + "\n"  # the file cut after that line: its end is there
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": i + 2},
                                                  "contentChanges": [{"text": text}]})
        t = time.monotonic()
        _ask(client, _Typed(uri, text), trigger=1).result(timeout=300)
        latencies.append(round((time.monotonic() - t) * 1000))
    print("latencies ms:", latencies)
    for note in list(client.notifications):
        if note.get("method") == "window/showMessage":
            print("showMessage:", note["params"])
    client.close()
    print("total s:", round(time.monotonic() - t0, 1))


if __name__ == "__main__":
    main()

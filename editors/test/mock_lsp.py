#!/usr/bin/env python3
"""A tiny stand-in for `dspark-lsp --stdio`, for testing the editor clients without models.

Standard library only, so the editor checks run without the project's virtualenv. It answers
`textDocument/inlineCompletion` with fixed text (two items, so "next" can be tested), sends the
`dspark/status` notifications the real server sends, answers `dspark/stats`, and, when
DSPARK_MOCK_LOG names a file, appends every message it receives to it as one JSON line, so tests can
check what the client sent (initializationOptions, didChangeConfiguration, cancellations...).

Environment:
  DSPARK_MOCK_TEXT   first item's text (default below); "\\n" in it makes a multi-line item
  DSPARK_MOCK_TEXT2  second item's text
  DSPARK_MOCK_LOG    path of the JSON-lines log of received messages
  DSPARK_MOCK_RANGE_BACK  items' ranges start this many characters before the cursor
  DSPARK_MOCK_SHOW_MESSAGE  JSON {"type": 1-4, "message": ...}: sent as window/showMessage after
                     `initialized`, as the real server reports settings it refuses or a load that failed
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, BinaryIO

DEFAULT_TEXT = "return 42  # from dspark"
DEFAULT_TEXT2 = "return None  # second choice"


def read_message(stream: BinaryIO) -> dict[str, Any] | None:
    """One JSON-RPC message with its Content-Length header; None at end of input."""
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            break
        name, _, value = line.decode("ascii").partition(":")
        if name.lower() == "content-length":
            length = int(value.strip())
    if length is None:
        return None
    body = stream.read(length)
    result: dict[str, Any] = json.loads(body.decode("utf-8"))
    return result


def write_message(stream: BinaryIO, message: dict[str, Any]) -> None:
    body = json.dumps(message).encode("utf-8")
    stream.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    stream.flush()


class MockServer:
    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.text = os.environ.get("DSPARK_MOCK_TEXT", DEFAULT_TEXT).replace("\\n", "\n")
        self.text2 = os.environ.get("DSPARK_MOCK_TEXT2", DEFAULT_TEXT2).replace("\\n", "\n")
        self.log_path = os.environ.get("DSPARK_MOCK_LOG")
        self.settings: dict[str, Any] = {}
        self.served = 0

    def log(self, message: dict[str, Any]) -> None:
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(message) + "\n")

    def notify(self, method: str, params: Any) -> None:
        write_message(self.out, {"jsonrpc": "2.0", "method": method, "params": params})

    def reply(self, msg_id: Any, result: Any = None, error: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id}
        if error is not None:
            message["error"] = error
        else:
            message["result"] = result
        write_message(self.out, message)

    def handle(self, msg: dict[str, Any]) -> bool:
        """Answers one message; False when the client asked us to exit."""
        self.log(msg)
        method = msg.get("method")
        msg_id = msg.get("id")
        params = msg.get("params") or {}
        if method is None:
            return True  # a response to something we sent: nothing to do
        if method == "initialize":
            self.settings = dict(params.get("initializationOptions") or {})
            self.reply(
                msg_id,
                {
                    "capabilities": {
                        "textDocumentSync": {"openClose": True, "change": 2},
                        "inlineCompletionProvider": True,
                        "completionProvider": {"triggerCharacters": []},
                    },
                    "serverInfo": {"name": "dspark-mock", "version": "0"},
                },
            )
        elif method == "initialized":
            if show := os.environ.get("DSPARK_MOCK_SHOW_MESSAGE"):
                self.notify("window/showMessage", json.loads(show))
            self.notify("dspark/status", {"state": "loading", "message": "loading mock models"})
            self.notify("dspark/status", {"state": "ready", "message": "mock ready"})
        elif method == "textDocument/inlineCompletion":
            pos = params["position"]
            # DSPARK_MOCK_RANGE_BACK=n: the range starts n characters before the cursor, as servers do
            # when their text repeats what was typed since the start of the word.
            back = int(os.environ.get("DSPARK_MOCK_RANGE_BACK", "0"))
            start = {"line": pos["line"], "character": max(0, pos["character"] - back)}
            at = {"start": start, "end": pos}
            self.served += 1
            self.reply(
                msg_id,
                {"items": [{"insertText": self.text, "range": at}, {"insertText": self.text2, "range": at}]},
            )
            self.notify(
                "dspark/status",
                {
                    "state": "ready",
                    "message": "",
                    "lastLatencyMs": 12.5,
                    "speedup": 2.25,
                    "acceptedPerForward": 3.1,
                },
            )
        elif method == "textDocument/completion":
            self.reply(
                msg_id, {"isIncomplete": False, "items": [{"label": self.text, "insertText": self.text}]}
            )
        elif method == "dspark/stats":
            self.reply(
                msg_id, {"requests": [{"latencyMs": 12.5, "acceptedPerForward": 3.1}], "served": self.served}
            )
        elif method == "workspace/didChangeConfiguration":
            self.settings = dict((params.get("settings") or {}).get("dspark") or {})
            state = "ready" if self.settings.get("enable", True) else "disabled"
            self.notify(
                "dspark/status",
                {"state": state, "message": "settings: " + json.dumps(self.settings, sort_keys=True)},
            )
        elif method == "shutdown":
            self.reply(msg_id, None)
        elif method == "exit":
            return False
        elif msg_id is not None:
            self.reply(msg_id, error={"code": -32601, "message": f"mock: method not found: {method}"})
        return True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args.count("--stdio") > 1:
        # Stricter than the real server (which tolerates a repeat with a warning), so the editor tests
        # that start this mock catch a client that passes --stdio twice (issue 15: the extension's own
        # flag plus the one vscode-languageclient appends for TransportKind.stdio).
        print(f"dspark-mock: --stdio given {args.count('--stdio')} times: {args}", file=sys.stderr)
        return 2
    server = MockServer(sys.stdout.buffer)
    while True:
        msg = read_message(sys.stdin.buffer)
        if msg is None or not server.handle(msg):
            return 0


if __name__ == "__main__":
    sys.exit(main())

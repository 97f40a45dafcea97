"""DSparkProtocol.handle_body (dspark_lsp/lsp/protocol.py), one frame at a time, in process: what a body
that is no request gets back. The protocol fuzz test covers these at random; here each case is pinned
(a JSON `null` body went unanswered while the decoding was being split out of handle_body)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dspark_lsp.lsp.framing import Frame
from dspark_lsp.lsp.protocol import INVALID_REQUEST, PARSE_ERROR
from dspark_lsp.lsp.server import DSparkServer


class Written:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(data)

    def close(self) -> None:
        pass

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(chunk.split(b"\r\n\r\n", 1)[1]) for chunk in self.chunks]


def answers(body: bytes, *, complete: bool = True) -> list[dict[str, Any]]:
    server = DSparkServer(lambda: None)  # type: ignore[arg-type,return-value]  # never asked for a backend
    written = Written()
    server.protocol.set_writer(written)
    server.dspark_protocol.handle_body(Frame(body, complete))
    return written.messages()


@pytest.mark.parametrize(
    "body",
    [b"null", b"[]", b"3", b'"text"', b'{"id": 4, "method": "x"}'],  # valid JSON, no JSON-RPC message
    ids=["null", "array", "number", "string", "no jsonrpc"],
)
def test_json_that_is_no_message_gets_one_invalid_request(body: bytes) -> None:
    (reply,) = answers(body)
    assert reply["error"]["code"] == INVALID_REQUEST
    assert reply["id"] == (4 if b'"id": 4' in body else None)


def test_a_body_that_is_not_json_gets_one_parse_error_with_id_null() -> None:
    (reply,) = answers(b"{not json")
    assert reply["error"]["code"] == PARSE_ERROR and reply["id"] is None


def test_a_body_that_is_not_utf8_is_answered_on_its_id_when_readable() -> None:
    (reply,) = answers(b'{"jsonrpc": "2.0", "id": 7, "method": "dspark/stats", "params": "\xff"}')
    assert reply["error"]["code"] == PARSE_ERROR and reply["id"] == 7


def test_a_cut_short_body_is_answered_on_its_id() -> None:
    (reply,) = answers(b'{"jsonrpc": "2.0", "id": 9, "method": "dspark/stats", "par', complete=False)
    assert reply["error"]["code"] == PARSE_ERROR and reply["id"] == 9


def test_a_malformed_response_gets_no_answer() -> None:
    assert answers(b'{"jsonrpc": "1.0", "id": 3, "result": null}') == []


def test_a_notification_sent_as_a_request_is_refused_on_its_id() -> None:
    (reply,) = answers(b'{"jsonrpc": "2.0", "id": 5, "method": "textDocument/didOpen", "params": {}}')
    assert reply["error"]["code"] == INVALID_REQUEST and reply["id"] == 5

"""Cancellation under editor-rate typing: superseded work releases the worker, the request at a pause
is answered.

The soak (bench/soak.py, real model, loaded 2-core machine) had every request come back cancelled. A
cancel landed mostly while the worker ran a prefill: the default 256-token prompt is one prefill slice,
and the decoder ran its last slice even when cancelled, so a request cancelled after it had passed the
worker's own check (while its prompt was built) still cost a whole prefill (8-17 s there). The engine
tests pin the decoder's side; the server tests, over stdio with the fake service, pin that a cancel of
request N never reaches N+1 and that each cancelled decode frees the worker within a round.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.bench.lsp_replay import REQUEST_CANCELLED, RpcError, StdioClient
from dspark_lsp.engine import decode as decode_module
from dspark_lsp.engine.config import DecodeConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.prefix_cache import PrefixCache

FIXTURES = Path(__file__).parents[1] / "helpers" / "lsp_fixtures"
PROMPT = [5, 9, 2, 33, 17, 5, 9]


@pytest.fixture(scope="module")
def target(random_lm: Any) -> Any:
    return random_lm(31, vocab_size=48, hidden=32, layers=2, head_scale=16.0)


def _count_forwards(monkeypatch: pytest.MonkeyPatch, cancel: threading.Event, cancel_after: int) -> list[int]:
    """Count the decoder's target forwards (their token counts); set `cancel` once `cancel_after` ran."""
    calls: list[int] = []
    real = decode_module.forward

    def counted(model: Any, tokens: list[int], *args: Any, **kwargs: Any) -> Any:
        calls.append(len(tokens))
        if len(calls) >= cancel_after:
            cancel.set()
        return real(model, tokens, *args, **kwargs)

    monkeypatch.setattr(decode_module, "forward", counted)
    return calls


# ------------------------------------------------------------------------------------- the decoder
def test_a_cancelled_prompt_within_one_slice_is_not_prefilled(
    target: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The LSP case: the worker checked the flag, the cancel came while the prompt was being built.
    cancel = threading.Event()
    cancel.set()
    calls = _count_forwards(monkeypatch, threading.Event(), 10**9)
    assert len(PROMPT) < decode_module.PREFILL_CHUNK
    res = SpeculativeDecoder(target).generate(PROMPT, config=DecodeConfig(max_new_tokens=20), cancel=cancel)
    assert res.stop_reason == "cancelled" and res.tokens == []
    assert calls == []  # was one forward over the whole prompt
    assert res.stats.target_forwards == 0


def test_a_cancel_during_the_next_to_last_slice_skips_the_last(
    target: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decode_module, "PREFILL_CHUNK", 3)  # 7 tokens: slices of 3, 3, 1
    cancel = threading.Event()
    calls = _count_forwards(monkeypatch, cancel, 2)
    res = SpeculativeDecoder(target).generate(PROMPT, config=DecodeConfig(max_new_tokens=20), cancel=cancel)
    assert res.stop_reason == "cancelled" and res.tokens == []
    assert calls == [3, 3]  # was [3, 3, 1]: the last slice ran although the request was cancelled


def test_a_request_cancelled_before_any_slice_keeps_the_prefix_cache(target: Any) -> None:
    """Nothing prefilled, nothing stored: an empty entry used to take a slot and evict a useful one."""
    pc = PrefixCache(max_entries=1, min_reuse=1)
    decoder = SpeculativeDecoder(target, prefix_cache=pc)
    reference = decoder.generate(PROMPT, config=DecodeConfig(max_new_tokens=4)).tokens  # fills the one slot
    cancel = threading.Event()
    cancel.set()
    other = [40, 41, 42, 43]  # shares no prefix: starts from an empty cache
    assert decoder.generate(other, config=DecodeConfig(max_new_tokens=4), cancel=cancel).tokens == []
    res = decoder.generate(PROMPT, config=DecodeConfig(max_new_tokens=4))
    assert res.stats.reused_tokens == len(PROMPT) - 1  # the first call's entry is still there
    assert res.tokens == reference


# ---------------------------------------------------------------------------- the server, over stdio
URI = "file:///tmp/dspark/typing.py"


def _ready_client(tmp_path: Path, settings: dict[str, Any]) -> StdioClient:
    client = StdioClient(
        [sys.executable, str(FIXTURES / "fake_server.py"), "info"], str(tmp_path / "stderr.log")
    )
    client.request(
        "initialize",
        {
            "processId": None,
            "rootUri": None,
            "capabilities": {},
            "initializationOptions": {"dspark": settings},
        },
    ).result(timeout=60)
    client.notify("initialized", {})
    client.wait_status({"ready"}, 60)
    return client


def _type(client: StdioClient, text: str, version: int, ch: str) -> tuple[str, int]:
    line, col = text.count("\n"), len(text) - (text.rfind("\n") + 1)
    client.notify(
        "textDocument/didChange",
        {
            "textDocument": {"uri": URI, "version": version + 1},
            "contentChanges": [
                {
                    "range": {
                        "start": {"line": line, "character": col},
                        "end": {"line": line, "character": col},
                    },
                    "text": ch,
                }
            ],
        },
    )
    return text + ch, version + 1


def _ask(client: StdioClient, text: str) -> tuple[int, Any]:
    line, col = text.count("\n"), len(text) - (text.rfind("\n") + 1)
    return client.send_request(
        "textDocument/inlineCompletion",
        {
            "textDocument": {"uri": URI},
            "position": {"line": line, "character": col},
            "context": {"triggerKind": 2},
        },
    )


@pytest.mark.parametrize("cancel_after_next", [False, True], ids=["cancel-then-ask", "ask-then-cancel"])
def test_typing_with_cancels_answers_the_request_at_the_pause(
    tmp_path: Path, cancel_after_next: bool
) -> None:
    """As the soak types: a request after each key, the previous one cancelled ($/cancelRequest before
    the next request, as the soak's editor does, or right after it, as some editors do), then a pause."""
    # slow: one 50 ms round per token, cancel polled each round: 100 tokens = 5 s when never cancelled.
    client = _ready_client(tmp_path, {"model": "slow", "maxNewTokens": 100, "debounceMs": 0})
    try:
        text, version = "def total(xs):\n    return ", 1
        client.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": URI, "languageId": "python", "version": version, "text": text}},
        )
        superseded: list[tuple[int, Any]] = []
        previous: tuple[int, Any] | None = None
        keys = "sum(xs"
        asked = 0.0
        for i, ch in enumerate(keys):
            at_pause = i == len(keys) - 1
            text, version = _type(client, text, version, ch)
            if previous is not None and not cancel_after_next:
                client.cancel(previous[0])
            if at_pause:
                # The request at the pause decodes 4 rounds (0.2 s): its latency shows what it waited for.
                client.notify(
                    "workspace/didChangeConfiguration",
                    {"settings": {"dspark": {"model": "slow", "maxNewTokens": 4, "debounceMs": 0}}},
                )
                asked = time.monotonic()
            current = _ask(client, text)
            if previous is not None and cancel_after_next:
                client.cancel(previous[0])
            if previous is not None:
                superseded.append(previous)
            previous = current
            if not at_pause:
                time.sleep(0.15)  # the next key: three rounds into this request's decode
        assert previous is not None
        answer = previous[1].result(timeout=30)  # the pause: nobody cancels this one
        latency = time.monotonic() - asked
        for msg_id, future in superseded:
            try:
                result = future.result(timeout=10)
            except RpcError as exc:
                assert exc.code == REQUEST_CANCELLED, f"request {msg_id}: {exc}"
            else:
                # Only when the cancel came after the next request: that request superseded this one
                # first (an empty answer), and the worker may have finished it before the cancel landed.
                assert cancel_after_next, f"request {msg_id} was cancelled first, yet answered {result}"
                assert result == {"items": []}, f"request {msg_id}"
        # Answered, and at the position typed last (the fake service echoes offset and the two chars).
        assert [item["insertText"] for item in answer["items"]] == [f"<{len(text)}|xs>"]
        # Its own 4 rounds plus what the last superseded decode needed to see its flag (a 50 ms round),
        # not the ~5 s that decode would have held the worker had it ignored the cancel.
        assert latency < 2.0, f"the request at the pause took {latency:.2f} s"
        stats = client.request("dspark/stats", {}).result(timeout=10)
        service = stats["service"]
        assert service[-1]["cancelled"] is False and service[-1]["rounds"] == 4
        # Every superseded decode that started stopped within a few rounds of its cancel.
        assert all(r["cancelled"] and r["rounds"] <= 8 for r in service[:-1]), service
        assert stats["counters"].get("ok") == 1
    finally:
        client.close()

"""The soak's simulated editor: tabs opened, closed and reopened, a block retyped key by key at a typist's
pace, debounced requests and the `$/cancelRequest` a newer key sends, the server's open-document count polled.

It talks raw JSON-RPC (only dspark_lsp.lsp may import pygls/lsprotocol)."""

from __future__ import annotations

import functools
import random
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_lsp.bench.lsp_replay import REQUEST_CANCELLED, RpcError, StdioClient, _utf16_len
from dspark_lsp.bench.soak_records import SoakConfig, _Request

TRIGGER_CHARACTERS = ".([{,:="  # as the server advertises (lsp/handlers/completion.py)


@dataclass
class _Tab:
    uri: str
    text: str  # the editor's buffer, mirrored on the server
    version: int
    language: str


class _Editor:
    """One simulated editor session: tabs, keystrokes, debounced requests, cancels."""

    def __init__(self, client: StdioClient, cfg: SoakConfig, sources: dict[Path, tuple[str, str]]) -> None:
        self.client, self.cfg = client, cfg
        self.sources = sources  # path -> (text, language)
        self.rng = random.Random(cfg.seed)
        self.tabs: dict[str, _Tab] = {}  # insertion order = least recently used first
        self.ever_opened: set[str] = set()
        self.requests: list[_Request] = []
        self.inflight: _Request | None = None
        self.t0 = time.monotonic()
        self.typed = self.opens = self.closes = self.reopens = self.cancels_sent = 0
        self.mismatches: list[dict[str, Any]] = []
        self.next_poll = cfg.window_s
        self.ended = 0.0  # when typing stopped (seconds since the start)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds * self.cfg.time_scale)

    # -- documents -------------------------------------------------------------------------------
    def open(self, path: Path) -> _Tab:
        uri = path.resolve().as_uri()
        tab = self.tabs.pop(uri, None)
        if tab is None:
            text, language = self.sources[path]
            tab = _Tab(uri, text, 1, language)
            self.client.notify(
                "textDocument/didOpen",
                {"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": text}},
            )
            self.opens += 1
            self.reopens += uri in self.ever_opened
            self.ever_opened.add(uri)
        self.tabs[uri] = tab  # most recently used last
        return tab

    def close(self, tab: _Tab) -> None:
        self.tabs.pop(tab.uri, None)
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": tab.uri}})
        self.closes += 1

    def leave(self, tab: _Tab) -> None:
        if self.rng.random() < self.cfg.close_prob:
            self.close(tab)
        while len(self.tabs) > self.cfg.max_open:
            self.close(next(iter(self.tabs.values())))

    def edit(self, tab: _Tab, start: int, end: int, new_text: str) -> None:
        """Replace text[start:end] and send it as one incremental change (UTF-16 positions)."""
        self.cancel_inflight()
        s_line, s_col = _position(tab.text, start)
        e_line, e_col = _position(tab.text, end)
        tab.text = tab.text[:start] + new_text + tab.text[end:]
        tab.version += 1
        self.client.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": tab.uri, "version": tab.version},
                "contentChanges": [
                    {
                        "range": {
                            "start": {"line": s_line, "character": s_col},
                            "end": {"line": e_line, "character": e_col},
                        },
                        "text": new_text,
                    }
                ],
            },
        )

    # -- requests --------------------------------------------------------------------------------
    def cancel_inflight(self) -> None:
        r = self.inflight
        self.inflight = None
        if r is not None and not r.future.done():
            r.cancelled_by_client = True
            self.client.cancel(r.msg_id)
            self.cancels_sent += 1

    def ask(self, tab: _Tab, offset: int, typed: str) -> _Request:
        line, col = _position(tab.text, offset)
        position = {"line": line, "character": col}
        if typed in TRIGGER_CHARACTERS and self.rng.random() < self.cfg.plain_completion_prob:
            method = "textDocument/completion"
            params: dict[str, Any] = {
                "textDocument": {"uri": tab.uri},
                "position": position,
                "context": {"triggerKind": 2, "triggerCharacter": typed},
            }
        else:
            method = "textDocument/inlineCompletion"
            params = {"textDocument": {"uri": tab.uri}, "position": position, "context": {"triggerKind": 2}}
        msg_id, future = self.client.send_request(method, params)
        req = _Request(msg_id, method, self.now(), future)
        future.add_done_callback(functools.partial(self._answered, req))
        self.requests.append(req)
        self.inflight = req
        return req

    def _answered(self, req: _Request, future: Future[Any]) -> None:
        req.answered = self.now()  # the reader thread resolves the future the moment the answer lands
        exc = future.exception()
        if isinstance(exc, RpcError) and exc.code == REQUEST_CANCELLED:
            req.outcome = "cancelled"
        elif exc is not None:
            req.outcome = "error"
        else:
            result = future.result()
            items = result.get("items") if isinstance(result, dict) else result
            req.outcome = "suggestion" if items else "empty"

    # -- typing ------------------------------------------------------------------------------------
    def retype_block(self, tab: _Tab) -> None:
        """Delete a few whole lines and type them back, key by key, asking as an editor does."""
        starts = [0] + [i + 1 for i, ch in enumerate(tab.text) if ch == "\n"]
        first = self.rng.randrange(len(starts))
        last = min(len(starts), first + self.rng.randint(*self.cfg.block_lines))
        start = starts[first]
        end = starts[last] if last < len(starts) else len(tab.text)
        if end - start > self.cfg.block_chars_max:
            cut = tab.text.rfind("\n", start, start + self.cfg.block_chars_max)
            # Whole lines that fit, else the tail of one long line (retyping a line's end).
            start, end = (start, cut + 1) if cut >= 0 else (end - self.cfg.block_chars_max, end)
        block = tab.text[start:end]
        if not block.strip():
            return
        self.edit(tab, start, end, "")
        cursor = start
        base = 1.0 / self.cfg.chars_per_second
        debounce = self.cfg.editor_debounce_ms / 1000
        delay = base * self.rng.uniform(0.5, 1.5)  # before the next key
        for i, ch in enumerate(block):
            if self.now() >= self.cfg.duration_s:
                return
            self.sleep(delay)
            if ch.isalpha() and self.rng.random() < self.cfg.typo_prob:
                self.edit(tab, cursor, cursor, "x")
                self.sleep(base * self.rng.uniform(1.0, 3.0))  # noticing it
                self.edit(tab, cursor, cursor + 1, "")
                self.sleep(base * self.rng.uniform(0.5, 1.5))
            self.edit(tab, cursor, cursor, ch)
            cursor += 1
            self.typed += 1
            nxt = block[i + 1] if i + 1 < len(block) else ""
            pause = 0.0
            if nxt == "\n":
                pause = self.rng.uniform(*self.cfg.line_pause_s)
            elif ch.isalnum() and not (nxt.isalnum() or nxt == "_") and self.rng.random() < self.cfg.word_pause_prob:
                pause = self.rng.uniform(*self.cfg.word_pause_s)
            next_delay = base * self.rng.uniform(0.5, 1.5)
            if pause + next_delay < debounce:
                delay = pause + next_delay  # the next key comes before the editor would ask
            else:
                self.sleep(debounce)
                if self.now() >= self.cfg.duration_s:
                    return
                req = self.ask(tab, cursor, ch)
                if pause > debounce:
                    self._wait_reading(req, pause - debounce)
                    delay = next_delay
                else:
                    delay = pause + next_delay - debounce
            self.poll_stats()

    def _wait_reading(self, req: _Request, pause: float) -> None:
        """A pause: the typist waits out the pause, longer (up to patience) if no suggestion showed."""
        t_end = time.monotonic() + pause * self.cfg.time_scale
        patience_end = t_end + self.cfg.patience_s * self.cfg.time_scale
        try:
            req.future.result(timeout=max(0.0, patience_end - time.monotonic()))
        except Exception:
            pass  # not answered in time, cancelled or an error: the typist goes on
        left = t_end - time.monotonic()
        if left > 0:
            time.sleep(left)

    def poll_stats(self) -> None:
        """Once per window: the server's open-document count must equal the editor's tabs."""
        if self.now() < self.next_poll:
            return
        self.next_poll += self.cfg.window_s
        try:
            stats = self.client.request("dspark/stats", {}).result(timeout=60)
        except Exception:
            return
        if int(stats.get("documents", -1)) != len(self.tabs):
            self.mismatches.append(
                {"at_s": round(self.now(), 1), "server": stats.get("documents"), "editor": len(self.tabs)}
            )

    def run(self) -> None:
        paths = list(self.sources)
        try:
            self._run(paths)
        finally:
            self.ended = self.now()

    def _run(self, paths: list[Path]) -> None:
        while self.now() < self.cfg.duration_s:
            tab = self.open(self.rng.choice(paths))
            for _ in range(self.rng.randint(*self.cfg.visits_per_document)):
                if self.now() >= self.cfg.duration_s:
                    break
                self.retype_block(tab)
            self.cancel_inflight()
            self.leave(tab)


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset)
    line_start = text.rfind("\n", 0, offset) + 1
    return line, _utf16_len(text[line_start:offset])

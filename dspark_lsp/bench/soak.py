"""A long typing soak against the real server over stdio: does memory stay flat and latency steady?

`dspark-lsp bench --lsp --lsp-soak-minutes N` types for N minutes across many documents the way a user
in an editor does, and samples the server process from outside:

* documents from several languages (bench/corpus, else this package's own sources) are opened whole,
  a block of a few lines is deleted and typed back key by key (a typo and its backspace now and then),
  then the document is left open as a tab or closed; closed ones are reopened later, and the number of
  open tabs is bounded (the least recently used closes). The retyped block restores the original text,
  so the documents do not grow: a rising RSS line is the server's, not the workload's;
* keys come at a typist's pace (intervals jitter around --cps) with pauses at line ends and some word
  ends. After each key the editor asks once its own debounce passes without a newer key (inline
  completion; the plain completion on some trigger characters), and a newer key first sends
  `$/cancelRequest` for a request still unanswered (a superseded request). At a pause the typist waits
  a little for the suggestion to show;
* the server's RSS is read from /proc/<pid>/status (VmRSS) every `sample_every_s`; `dspark/stats` is
  polled once per window (its document count must equal the editor's open tabs).

The report: RSS after the warm-up vs at the end and the least-squares slope after the warm-up in
MB per 10 minutes (the flat-line check), p50/p95 client-side latency per window (requests answered
before the typist moved on), counts of requests / answers / errors / cancels / unanswered, and whether
the server stayed up and exited cleanly. `write_outputs` puts soak.json, soak.txt and (with matplotlib,
the `soak` extra) soak.png into a directory.

This module talks raw JSON-RPC (only dspark_lsp.lsp may import pygls/lsprotocol).
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dspark_lsp.bench.lsp_replay import (
    REQUEST_CANCELLED,
    RpcError,
    StdioClient,
    _percentile,
    _utf16_len,
    server_settings,
)
from dspark_lsp.errors import UserError

# Extensions typed by default: one or more per language the corpus ships.
SOURCE_SUFFIXES = (".py", ".js", ".ts", ".go", ".rs", ".java", ".c", ".cpp", ".h")
TRIGGER_CHARACTERS = ".([{,:="  # as the server advertises (lsp/handlers/completion.py)


@dataclass
class SoakConfig:
    files: list[Path]
    duration_s: float = 600.0  # wall time spent typing (the server's load time not included)
    settings: dict[str, Any] = field(default_factory=dict)  # the `dspark` settings section
    server_command: list[str] = field(
        default_factory=lambda: [sys.executable, "-m", "dspark_lsp.lsp", "--stdio"]
    )
    chars_per_second: float = 8.0  # a steady typist; intervals jitter +-50 %
    line_pause_s: tuple[float, float] = (1.0, 3.0)
    word_pause_s: tuple[float, float] = (0.4, 1.2)
    word_pause_prob: float = 0.15
    typo_prob: float = 0.02  # a wrong key, then backspace
    patience_s: float = 2.0  # at a pause, wait up to this long (beyond the pause) for the suggestion
    editor_debounce_ms: float = 75.0  # the editor asks once no key came for this long
    plain_completion_prob: float = 0.3  # on a trigger character, the plain completion instead
    block_lines: tuple[int, int] = (1, 6)  # lines deleted and retyped per visit
    block_chars_max: int = 400  # a longer block is cut at a line end (or to a line's tail)
    visits_per_document: tuple[int, int] = (1, 3)  # blocks retyped before switching document
    max_open: int = 6  # editor tabs; the least recently used closes beyond this
    close_prob: float = 0.4  # leaving a document closes it (else it stays open as a tab)
    sample_every_s: float = 5.0  # RSS sampling period
    window_s: float = 60.0  # latency percentiles and counts per window
    warmup_s: float = 300.0  # RSS before this is warm-up (capped at a quarter of the duration)
    flat_mb_per_10min: float = 10.0  # a slope above this after warm-up is reported as growth
    time_scale: float = 1.0  # < 1 speeds typing up (tests); the duration and sampling stay wall time
    answer_timeout_s: float = 120.0  # a request still unanswered this long after the end is lost
    load_timeout_s: float = 600.0
    seed: int = 0
    log_file: str | None = None


@dataclass
class _Request:
    msg_id: int
    method: str
    sent: float  # seconds since the soak started
    future: Future[Any]
    answered: float | None = None
    cancelled_by_client: bool = False
    outcome: str = "pending"  # suggestion | empty | cancelled | error | pending


@dataclass
class SoakReport:
    duration_s: float
    files: int
    languages: list[str]
    typed_chars: int
    opens: int
    closes: int
    reopens: int
    requests: int
    answers: int
    suggestions: int  # answered before the typist moved on, with an item
    empty: int
    cancels_sent: int  # $/cancelRequest for a request still unanswered when the next key came
    cancelled_answers: int  # answers that were RequestCancelled errors (or to a request we cancelled)
    errors: int  # error answers other than RequestCancelled
    unanswered: int  # no answer at all by the end: a lost request
    p50_ms: float | None
    p95_ms: float | None
    rss_start_mb: float | None  # first sample (models loaded)
    rss_after_warmup_mb: float | None
    rss_end_mb: float | None
    rss_peak_mb: float | None
    rss_slope_mb_per_10min: float | None  # least squares over the samples after the warm-up
    warmup_s: float
    flat: bool | None
    server_alive_at_end: bool
    exit_code: int | None
    document_mismatches: list[dict[str, Any]]  # polls where the server's open count != the editor's
    server_counters: dict[str, Any]
    windows: list[dict[str, Any]]
    rss_samples: list[tuple[float, float]]  # (seconds since the soak started, MB)
    window_s: float
    settings: dict[str, Any]
    plot: str = ""  # where soak.png went, or why it was skipped


# ------------------------------------------------------------------------------------- analysis
def read_rss_mb(pid: int) -> float | None:
    """VmRSS of a live process in MB (Linux /proc); None when unreadable (exited, not Linux)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def slope_per_10min(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB) in MB per 10 minutes; None with fewer than 3 samples."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var <= 0:
        return None
    cov = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return cov / var * 600.0


def rss_summary(
    samples: list[tuple[float, float]], warmup_s: float, flat_limit: float
) -> dict[str, float | bool | None]:
    """RSS at the start / after the warm-up / at the end, the peak, the post-warm-up slope and whether
    that slope stays under ``flat_limit`` MB per 10 minutes."""
    after = [s for s in samples if s[0] >= warmup_s]
    slope = slope_per_10min(after)
    return {
        "rss_start_mb": _mb(samples[0][1]) if samples else None,
        "rss_after_warmup_mb": _mb(after[0][1]) if after else None,
        "rss_end_mb": _mb(samples[-1][1]) if samples else None,
        "rss_peak_mb": _mb(max(v for _, v in samples)) if samples else None,
        "rss_slope_mb_per_10min": None if slope is None else round(slope, 2),
        "flat": None if slope is None else slope <= flat_limit,
    }


def _mb(value: float) -> float:
    return round(value, 1)


def windows_of(
    requests: list[_Request], rss: list[tuple[float, float]], window_s: float, duration_s: float
) -> list[dict[str, Any]]:
    """Per window (by send time): counts, p50/p95 of the answered-in-time latencies, last RSS. A
    partial last window counts; anything after ``duration_s`` (the last answers landing) joins it."""
    out = []
    count = max(1, int(-(-duration_s // window_s)))
    for w in range(count):
        lo, hi = w * window_s, (w + 1) * window_s if w < count - 1 else float("inf")
        in_w = [r for r in requests if lo <= r.sent < hi]
        lat = [(r.answered - r.sent) * 1000 for r in in_w if _timely(r) and r.answered is not None]
        rss_w = [v for t, v in rss if lo <= t < hi]
        out.append({
            "start_s": round(lo, 1),
            "requests": len(in_w),
            "answered_in_time": len(lat),
            "suggestions": sum(1 for r in in_w if r.outcome == "suggestion" and not r.cancelled_by_client),
            "cancels": sum(1 for r in in_w if r.cancelled_by_client),
            "errors": sum(1 for r in in_w if r.outcome == "error"),
            "p50_ms": _percentile(lat, 0.5),
            "p95_ms": _percentile(lat, 0.95),
            "rss_mb": _mb(rss_w[-1]) if rss_w else None,
        })
    return out


def _timely(r: _Request) -> bool:
    """Answered before the typist moved on (a request the editor cancelled says nothing of latency)."""
    return r.answered is not None and not r.cancelled_by_client and r.outcome in ("suggestion", "empty")


# ----------------------------------------------------------------------------------- the editor
@dataclass
class _Tab:
    uri: str
    text: str  # the editor's buffer, mirrored on the server
    version: int
    language: str


class _RssSampler(threading.Thread):
    def __init__(self, pid: int, period_s: float, t0: float) -> None:
        super().__init__(name="soak-rss", daemon=True)
        self.pid, self.period_s, self.t0 = pid, period_s, t0
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            rss = read_rss_mb(self.pid)
            if rss is not None:
                self.samples.append((round(time.monotonic() - self.t0, 2), rss))
            self.stop.wait(self.period_s)


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


# ------------------------------------------------------------------------------------------ run
def default_files(root: Path | None = None) -> list[Path]:
    """bench/corpus of a checkout (every language), else this package's own Python sources."""
    root = root or Path(__file__).resolve().parents[2]
    corpus = root / "bench" / "corpus"
    files = sorted(p for p in corpus.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES)
    if not files:
        files = sorted(Path(__file__).resolve().parents[1].rglob("*.py"))
    return files


def _load_sources(files: list[Path]) -> dict[Path, tuple[str, str]]:
    from dspark_lsp.syntax import detect_language

    sources: dict[Path, tuple[str, str]] = {}
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # a soak over a corpus skips what it cannot read
        if text.strip():
            sources[path] = (text, detect_language(str(path), None) or "plaintext")
    if not sources:
        raise UserError("no readable, non-empty source files to type in the soak")
    return sources


def run_soak(cfg: SoakConfig) -> SoakReport:
    """Type for ``cfg.duration_s`` seconds through the server and report memory and latency."""
    sources = _load_sources(cfg.files)
    client = StdioClient(cfg.server_command, cfg.log_file)
    sampler: _RssSampler | None = None
    editor: _Editor | None = None
    exit_code: int | None = None
    alive = False
    counters: dict[str, Any] = {}
    try:
        init = client.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": None,
                "capabilities": {"window": {"workDoneProgress": True}},
                "initializationOptions": {"dspark": dict(cfg.settings)},
            },
        )
        init.result(timeout=cfg.load_timeout_s)  # a starved host can take minutes to import torch
        client.notify("initialized", {})
        status = client.wait_status({"ready", "error", "disabled"}, cfg.load_timeout_s)
        if status["state"] != "ready":
            raise UserError(f"the server is not ready: {status.get('state')}: {status.get('message', '')}")
        editor = _Editor(client, cfg, sources)
        sampler = _RssSampler(client.proc.pid, cfg.sample_every_s, editor.t0)
        sampler.start()
        try:
            editor.run()
        except (BrokenPipeError, OSError):
            pass  # the server died under us: reported below as not alive
        for req in editor.requests:  # let the last answers land
            try:
                req.future.result(timeout=cfg.answer_timeout_s)
            except Exception:
                pass
        alive = client.proc.poll() is None
        if alive:
            try:
                stats = client.request("dspark/stats", {}).result(timeout=60)
                counters = dict(stats.get("counters", {}))
                counters["documents_open_at_end"] = stats.get("documents")
                if "mallocTrim" in stats:  # lsp/memory.py: on or off, how often, its total time
                    counters["malloc_trim"] = stats["mallocTrim"]
            except Exception:
                alive = client.proc.poll() is None
    finally:
        if sampler is not None:
            sampler.stop.set()
            sampler.join(timeout=5)
        client.close()
        exit_code = client.proc.returncode
    assert editor is not None and sampler is not None
    return _report(cfg, editor, sampler.samples, alive, exit_code, counters, sources)


def _report(
    cfg: SoakConfig,
    editor: _Editor,
    samples: list[tuple[float, float]],
    alive: bool,
    exit_code: int | None,
    counters: dict[str, Any],
    sources: dict[Path, tuple[str, str]],
) -> SoakReport:
    reqs = editor.requests
    duration = editor.ended
    warmup = min(cfg.warmup_s, cfg.duration_s / 4)
    lat = [(r.answered - r.sent) * 1000 for r in reqs if _timely(r) and r.answered is not None]
    rss = rss_summary(samples, warmup, cfg.flat_mb_per_10min)
    return SoakReport(
        duration_s=round(duration, 1),
        files=len(sources),
        languages=sorted({lang for _, lang in sources.values()}),
        typed_chars=editor.typed,
        opens=editor.opens,
        closes=editor.closes,
        reopens=editor.reopens,
        requests=len(reqs),
        answers=sum(1 for r in reqs if r.answered is not None),
        suggestions=sum(1 for r in reqs if r.outcome == "suggestion" and not r.cancelled_by_client),
        empty=sum(1 for r in reqs if r.outcome == "empty" and not r.cancelled_by_client),
        cancels_sent=editor.cancels_sent,
        cancelled_answers=sum(1 for r in reqs if r.outcome == "cancelled" or (r.cancelled_by_client and r.answered)),
        errors=sum(1 for r in reqs if r.outcome == "error"),
        unanswered=sum(1 for r in reqs if r.answered is None),
        p50_ms=_percentile(lat, 0.5),
        p95_ms=_percentile(lat, 0.95),
        warmup_s=round(warmup, 1),
        server_alive_at_end=alive,
        exit_code=exit_code,
        document_mismatches=editor.mismatches,
        server_counters=counters,
        windows=windows_of(reqs, samples, cfg.window_s, cfg.duration_s),
        rss_samples=[(t, _mb(v)) for t, v in samples],
        window_s=cfg.window_s,
        settings=dict(cfg.settings),
        **rss,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------------------- output
def text_table(report: SoakReport) -> str:
    r = report
    lines = [
        f"soak: {r.duration_s / 60:.1f} min, {r.files} files ({', '.join(r.languages)}), "
        f"{r.typed_chars} chars typed; opens {r.opens} (reopens {r.reopens}), closes {r.closes}",
        f"requests {r.requests}, answers {r.answers}, suggestions {r.suggestions}, empty {r.empty}, "
        f"cancels sent {r.cancels_sent}, cancelled answers {r.cancelled_answers}, errors {r.errors}, "
        f"unanswered {r.unanswered}",
        f"latency (answered before the next key): p50 {_fmt(r.p50_ms)} ms, p95 {_fmt(r.p95_ms)} ms",
        f"RSS: start {_fmt(r.rss_start_mb)} MB, after warm-up ({r.warmup_s:.0f} s) {_fmt(r.rss_after_warmup_mb)} MB, "
        f"end {_fmt(r.rss_end_mb)} MB, peak {_fmt(r.rss_peak_mb)} MB; slope after warm-up "
        f"{_fmt(r.rss_slope_mb_per_10min)} MB/10 min -> "
        + ("flat" if r.flat else "GROWING" if r.flat is False else "too few samples"),
        f"server stayed up: {'yes' if r.server_alive_at_end else 'NO'}, exit code {r.exit_code}; "
        f"open-document mismatches: {len(r.document_mismatches)}",
        "",
        f"{'window':>8} {'reqs':>6} {'timely':>6} {'sugg':>6} {'cancel':>6} {'err':>4} {'p50 ms':>8} "
        f"{'p95 ms':>8} {'RSS MB':>8}",
    ]
    for w in r.windows:
        lines.append(
            f"{w['start_s']:>7.0f}s {w['requests']:>6} {w['answered_in_time']:>6} {w['suggestions']:>6} "
            f"{w['cancels']:>6} {w['errors']:>4} {_fmt(w['p50_ms']):>8} {_fmt(w['p95_ms']):>8} "
            f"{_fmt(w['rss_mb']):>8}"
        )
    if r.plot:
        lines += ["", f"plot: {r.plot}"]
    return "\n".join(lines) + "\n"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def write_plot(report: SoakReport, path: Path) -> str:
    """soak.png: RSS over time, and p50/p95 per window; skipped (and said so) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a bench machine
        import matplotlib.pyplot as plt
    except ImportError:
        return "skipped: matplotlib is not installed (pip install 'dspark-lsp[soak]')"
    fig, (ax_rss, ax_lat) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    if report.rss_samples:
        ax_rss.plot([t / 60 for t, _ in report.rss_samples], [v for _, v in report.rss_samples], lw=1.2)
    ax_rss.axvline(report.warmup_s / 60, color="grey", ls="--", lw=0.8, label="end of warm-up")
    slope = report.rss_slope_mb_per_10min
    ax_rss.set_title(f"server RSS (slope after warm-up {_fmt(slope)} MB / 10 min)")
    ax_rss.set_ylabel("VmRSS (MB)")
    ax_rss.legend(loc="lower right")
    mids = [(w["start_s"] + report.window_s / 2) / 60 for w in report.windows]
    drawn = 0
    for key, label in (("p50_ms", "p50"), ("p95_ms", "p95")):
        pts = [(m, w[key]) for m, w in zip(mids, report.windows, strict=True) if w[key] is not None]
        if pts:
            ax_lat.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=label)
            drawn += 1
    ax_lat.set_title("completion latency per window (answered before the next key)")
    ax_lat.set_ylabel("ms")
    ax_lat.set_xlabel("minutes")
    if drawn:
        ax_lat.legend(loc="upper right")
    else:  # every request was cancelled or failed: say so on the plot rather than draw an empty axis
        ax_lat.text(0.5, 0.5, "no request answered before the next key", ha="center", transform=ax_lat.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def write_outputs(report: SoakReport, out_dir: Path) -> dict[str, Path]:
    """soak.json, soak.txt and soak.png (when matplotlib is importable) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report.plot = write_plot(report, out_dir / "soak.png")
    paths = {"json": out_dir / "soak.json", "text": out_dir / "soak.txt"}
    paths["json"].write_text(json.dumps(asdict(report), indent=2) + "\n")
    paths["text"].write_text(text_table(report))
    if not report.plot.startswith("skipped"):
        paths["png"] = Path(report.plot)
    return paths


def run_soak_cli(args: Any) -> int:
    """`dspark-lsp bench --lsp --lsp-soak-minutes N`: the bench's model options, the soak's own."""
    settings = server_settings(args)
    if args.corpus:
        corpus = Path(args.corpus)
        files = sorted(p for p in corpus.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES)
        if not files:
            raise UserError(f"{corpus}: no source files ({', '.join(SOURCE_SUFFIXES)}) to type")
    else:
        files = default_files()
    cfg = SoakConfig(
        files=files,
        duration_s=args.lsp_soak_minutes * 60,
        settings=settings,
        sample_every_s=args.lsp_soak_sample_s,
        warmup_s=args.lsp_soak_warmup_minutes * 60,
        seed=args.seed,
    )
    report = run_soak(cfg)
    if args.lsp_soak_out:
        paths = write_outputs(report, Path(args.lsp_soak_out))
        print(text_table(report), end="")
        print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    else:
        report.plot = "skipped: no --lsp-soak-out directory"
        print(text_table(report), end="")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(asdict(report), indent=2) + "\n")
    # A soak that lost the server or an answer failed, whatever the figures say.
    return 0 if report.server_alive_at_end and report.unanswered == 0 and report.exit_code == 0 else 1

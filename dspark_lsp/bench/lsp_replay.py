"""Replay real typing against the language server over stdio and measure what the user feels.

A file is opened with its first part already written, and the rest is typed character by character
(incremental didChange per key, human-like intervals), with pauses at line ends and some word ends.
After each pause the replay asks for an inline completion, the way an editor does once its own
debounce fires; if typing resumes before the answer, the request goes stale and the server cancels it.
Latency p50/p95, the share of requests cancelled, and the server's peak RSS come from the server's
own `dspark/stats`; `compare_reuse` runs the same replay with KV prefix reuse on and off.

This module talks raw JSON-RPC (only dspark_lsp.lsp may import pygls/lsprotocol).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from dspark_lsp.contract import RESULT_FLAGS, CompletionStats
from dspark_lsp.errors import UserError


@dataclass
class ReplayConfig:
    file: Path
    settings: dict[str, Any] = field(default_factory=dict)  # the `dspark` settings section
    server_command: list[str] = field(
        default_factory=lambda: [sys.executable, "-m", "dspark_lsp.lsp", "--stdio"]
    )
    start_fraction: float = 0.5  # share of the file already written when the replay starts
    # True: the rest of the file (past the typed passage) stays after the cursor, as when editing mid-file;
    # False: the document ends at the cursor. What follows the cursor decides how much of a prefix-first
    # FIM prompt changes per keystroke.
    keep_after: bool = False
    max_chars: int = 300  # characters typed (the replay's length)
    chars_per_second: float = 8.0  # a steady typist; intervals jitter +-50 %
    line_pause_s: tuple[float, float] = (1.0, 3.0)  # pause at a line end (reading, thinking)
    word_pause_s: tuple[float, float] = (0.5, 1.5)  # pause after some words
    word_pause_prob: float = 0.15  # chance of a pause after a word; always at a line end
    patience_s: float = 0.0  # > 0: at a pause, also wait up to this long for the suggestion to show
    extra_documents: int = 0  # other documents opened, completed in once and closed first (memory)
    # Other files opened before the replay's document and left open (the prompt's context may use them),
    # and the workspace folder the client names (None: no folder, nothing read from disk).
    open_files: tuple[Path, ...] = ()
    workspace: Path | None = None
    # >= 0: after opening the replay's document, wait this long (its background warm-up runs), then ask
    # once at the cursor: the first completion after a file is opened (report.first_ms).
    first_after_s: float | None = None
    time_scale: float = 1.0  # < 1 speeds the whole replay up (tests)
    seed: int = 0
    load_timeout_s: float = 600.0
    log_file: str | None = None


@dataclass
class ReplayReport:
    label: str
    requests: int
    completed: int  # answered by the model (ok or empty)
    cancelled: int  # superseded or $/cancelRequest'ed before they finished
    not_ready: int
    errors: int
    cancelled_share: float
    p50_ms: float | None
    p95_ms: float | None
    mean_ms: float | None
    peak_rss_mb: float | None
    typed_chars: int
    wall_s: float
    service: dict[str, Any] = field(default_factory=dict)  # mean of the service's own per-request figures
    open_documents: int = 0  # documents the server still holds at the end (1 = no leak)
    first_ms: float | None = None  # the first completion after the file opened (first_after_s)
    warm: dict[str, Any] = field(default_factory=dict)  # the server's background warm-ups (dspark/stats)
    # One row per answered request, in order: where a slow one spent its time (a tail request is one
    # row out of a handful, so the mean alone hides it).
    per_request: list[dict[str, Any]] = field(default_factory=list)


class RpcError(RuntimeError):
    """An error answer; ``code`` tells a cancelled request (-32800, RequestCancelled) from a failure."""

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.code = code


REQUEST_CANCELLED = -32800
NOTIFICATIONS_KEPT = 1000  # an hour's soak gets a status notification per completion: keep the latest


class StdioClient:
    """A minimal JSON-RPC client for a language server subprocess (threads, no asyncio)."""

    def __init__(self, command: list[str], log_file: str | None = None) -> None:
        stderr: IO[bytes] | int = subprocess.DEVNULL
        self._stderr_file = open(log_file, "ab") if log_file else None  # noqa: SIM115 - closed in close()
        if self._stderr_file is not None:
            stderr = self._stderr_file
        try:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
            )
        except OSError as exc:
            raise UserError(
                f"cannot start the language server {command[0]!r}: {exc.strerror or exc}"
            ) from exc
        self._lock = threading.Lock()
        self._next_id = 0
        self._pending: dict[int, Future[Any]] = {}
        self.notifications: deque[dict[str, Any]] = deque(maxlen=NOTIFICATIONS_KEPT)
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read_loop, name="replay-reader", daemon=True)
        self._reader.start()

    def _write(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8")
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.proc.stdin.flush()

    def request(self, method: str, params: Any) -> Future[Any]:
        return self.send_request(method, params)[1]

    def send_request(self, method: str, params: Any) -> tuple[int, Future[Any]]:
        """The request's id (for $/cancelRequest) and the future its answer resolves."""
        with self._lock:
            self._next_id += 1
            msg_id = self._next_id
            future: Future[Any] = Future()
            self._pending[msg_id] = future
        self._write({"id": msg_id, "method": method, "params": params})
        return msg_id, future

    def cancel(self, msg_id: int) -> None:
        self.notify("$/cancelRequest", {"id": msg_id})

    def notify(self, method: str, params: Any) -> None:
        self._write({"method": method, "params": params})

    def _read_loop(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = 0
            while True:
                line = out.readline()
                if not line:
                    self._fail_all("the language server exited")
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
                elif line.strip() == b"" and length:
                    break
            message = json.loads(out.read(length))
            if "method" in message and "id" in message:
                # Server -> client requests (progress tokens, configuration pulls): accept them.
                self._write({"id": message["id"], "result": None})
            elif "method" in message:
                with self._cond:
                    self.notifications.append(message)
                    self._cond.notify_all()
            else:
                future = self._pending.pop(message.get("id"), None)
                if future is not None:
                    if "error" in message:
                        error = message["error"]
                        future.set_exception(RpcError(error.get("message", "error"), error.get("code")))
                    else:
                        future.set_result(message.get("result"))

    def _fail_all(self, reason: str) -> None:
        for future in list(self._pending.values()):
            if not future.done():
                future.set_exception(RuntimeError(reason))
        with self._cond:
            self._cond.notify_all()

    def wait_status(self, states: set[str], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for note in reversed(self.notifications):
                    if note["method"] == "dspark/status" and note["params"].get("state") in states:
                        return note["params"]
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise UserError(f"the language server did not reach {sorted(states)} in {timeout:.0f} s")
                self._cond.wait(min(left, 0.5))

    def close(self) -> None:
        try:
            self.request("shutdown", None).result(timeout=10)
            self.notify("exit", None)
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        finally:
            if self._stderr_file is not None:
                self._stderr_file.close()


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def typing_plan(text: str, cfg: ReplayConfig) -> list[tuple[str, float, float]]:
    """(char, delay before it, pause after it in seconds, 0 = none) per typed character; seeded."""
    rng = random.Random(cfg.seed)
    start = int(len(text) * cfg.start_fraction)
    typed = text[start : start + cfg.max_chars]
    plan = []
    base = 1.0 / cfg.chars_per_second
    for i, ch in enumerate(typed):
        delay = base * rng.uniform(0.5, 1.5)
        nxt = typed[i + 1] if i + 1 < len(typed) else ""
        line_end = nxt == "\n"
        word_end = ch.isalnum() and not nxt.isalnum() and nxt != "_"
        pause = 0.0
        if line_end:
            pause = rng.uniform(*cfg.line_pause_s)
        elif word_end and rng.random() < cfg.word_pause_prob:
            pause = rng.uniform(*cfg.word_pause_s)
        plan.append((ch, delay, pause))
    return plan


def run_replay(cfg: ReplayConfig, *, label: str = "replay") -> ReplayReport:
    """Type the file into the server and report latency, cancellations and memory."""
    source = _read_source(cfg.file)
    plan = typing_plan(source, cfg)
    start = int(len(source) * cfg.start_fraction)
    text = source[:start]
    after = source[start + cfg.max_chars :] if cfg.keep_after else ""
    from dspark_lsp.syntax import detect_language

    language = detect_language(str(cfg.file), None) or "plaintext"
    client = StdioClient(cfg.server_command, cfg.log_file)
    started = time.monotonic()
    first_ms: float | None = None
    try:
        _initialize(client, cfg)
        if cfg.extra_documents > 0:
            _churn_documents(client, cfg, source, language)
        for path in cfg.open_files:
            _open(client, path.resolve().as_uri(), _read_source(path), detect_language(str(path), None) or language)
        doc = _Typed(cfg.file.resolve().as_uri(), text)  # the cursor: the end of ``text``
        _open(client, doc.uri, text + after, language)
        # Where the cursor rests, as our VS Code and Neovim clients tell the server (its warm-up spot).
        client.notify("dspark/cursor", {"textDocument": {"uri": doc.uri},
                                        "position": {"line": doc.line, "character": doc.col}})
        if cfg.first_after_s is not None:
            time.sleep(cfg.first_after_s)
            t0 = time.monotonic()
            _ask(client, doc, trigger=1).result(timeout=cfg.load_timeout_s)
            first_ms = round((time.monotonic() - t0) * 1000, 1)
        pending = _type(client, cfg, doc, plan)
        for future in pending:
            try:
                future.result(timeout=120)
            except Exception:
                pass  # cancelled requests answer with an error: counted from the server's stats
        stats = client.request("dspark/stats", {}).result(timeout=30)
    finally:
        client.close()
    report = _report(label, stats, len(plan), time.monotonic() - started)
    report.first_ms = first_ms
    return report


def _read_source(path: Path) -> str:
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not UTF-8 text") from exc
    if not source.strip():
        raise UserError(f"{path} is empty")
    return source


def _initialize(client: StdioClient, cfg: ReplayConfig) -> None:
    root = cfg.workspace.resolve() if cfg.workspace is not None else None
    init = client.request(
        "initialize",
        {
            "processId": os.getpid(),
            "rootUri": root.as_uri() if root else None,
            "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}] if root else None,
            "capabilities": {"window": {"workDoneProgress": True}},
            # The replay asks only at pauses (an editor after its own debounce), so no server debounce.
            "initializationOptions": {"dspark": {"debounceMs": 0, **cfg.settings}},
        },
    )
    init.result(timeout=60)
    client.notify("initialized", {})
    status = client.wait_status({"ready", "error", "disabled"}, cfg.load_timeout_s)
    if status["state"] != "ready":
        raise UserError(f"the server is not ready: {status.get('state')}: {status.get('message', '')}")


def _open(client: StdioClient, uri: str, text: str, language: str) -> None:
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": 1,
                                                            "text": text}})


@dataclass
class _Typed:
    """The replay's document as typed so far, and its cursor (LSP line, UTF-16 column)."""

    uri: str
    text: str
    version: int = 1
    line: int = 0
    col: int = 0

    def __post_init__(self) -> None:
        self.line = self.text.count("\n")
        self.col = _utf16_len(self.text[self.text.rfind("\n") + 1 :])

    def type(self, ch: str) -> dict[str, Any]:
        """The didChange params of typing ``ch`` at the cursor (then moved past it)."""
        self.version += 1
        at = {"line": self.line, "character": self.col}
        self.text += ch
        if ch == "\n":
            self.line, self.col = self.line + 1, 0
        else:
            self.col += _utf16_len(ch)
        return {"textDocument": {"uri": self.uri, "version": self.version},
                "contentChanges": [{"range": {"start": at, "end": at}, "text": ch}]}


def _ask(client: StdioClient, doc: _Typed, trigger: int = 2) -> Future[Any]:
    return client.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": doc.uri}, "position": {"line": doc.line, "character": doc.col},
        "context": {"triggerKind": trigger}})


def _type(client: StdioClient, cfg: ReplayConfig, doc: _Typed, plan: list[tuple[str, float, float]]) -> list[Future[Any]]:
    """Type the plan; at each pause ask once (an editor's automatic request after its debounce)."""
    pending: list[Future[Any]] = []
    for ch, delay, pause in plan:
        time.sleep(delay * cfg.time_scale)
        client.notify("textDocument/didChange", doc.type(ch))
        if pause <= 0:
            continue
        paused_at = time.monotonic()
        pending.append(_ask(client, doc))
        if cfg.patience_s > 0:
            try:
                pending[-1].result(timeout=cfg.patience_s * cfg.time_scale)
            except Exception:
                pass  # not answered in time (or cancelled): the typist goes on
        left = pause * cfg.time_scale - (time.monotonic() - paused_at)
        if left > 0:
            time.sleep(left)
    return pending


def _churn_documents(client: StdioClient, cfg: ReplayConfig, source: str, language: str) -> None:
    """A long session's worth of other files: open each, ask once at its end, close it. Peak RSS then
    shows whether per-document state is released (the replay's document stays the only open one)."""
    stem = cfg.file.resolve()
    for i in range(cfg.extra_documents):
        uri = stem.with_name(f"{stem.stem}.extra{i}{stem.suffix}").as_uri()
        client.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": source}},
        )
        last_line = source.count("\n")
        col = _utf16_len(source[source.rfind("\n") + 1 :])
        try:
            client.request(
                "textDocument/inlineCompletion",
                {
                    "textDocument": {"uri": uri},
                    "position": {"line": last_line, "character": col},
                    "context": {"triggerKind": 1},
                },
            ).result(timeout=cfg.load_timeout_s)
        except Exception:
            pass
        client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return round(ordered[index], 1)


def _figures(record: object) -> tuple[CompletionStats, bool]:
    """One request's service figures (the worker's record: a result's stats plus its flags) as the
    contract's typed stats, and whether it came from the typed-through cache. A record the server sent
    malformed counts as no figures rather than failing the whole replay."""
    if not isinstance(record, dict):
        return CompletionStats(), False
    try:
        stats = CompletionStats.from_json({k: v for k, v in record.items() if k not in RESULT_FLAGS})
    except ValueError:
        stats = CompletionStats()
    return stats, record.get("from_cache") is True


def _report(label: str, stats: dict[str, Any], typed: int, wall: float) -> ReplayReport:
    counters = stats.get("counters", {})
    records = [r for r in stats.get("requests", []) if r.get("status") in ("ok", "empty")]
    latencies = [float(r["latencyMs"]) for r in records]
    requests = int(counters.get("requests", 0))
    cancelled = int(counters.get("superseded", 0)) + int(counters.get("cancelled", 0))
    service: dict[str, Any] = {}
    figures = [_figures(r.get("service")) for r in records]
    for key in ("prefill_tokens", "reused_tokens", "resumed_tokens", "target_forwards", "accepted_per_forward", "latency_ms"):
        values = [float(v) for st, _ in figures if (v := getattr(st, key)) is not None]
        if values:
            service[key] = round(statistics.fmean(values), 2)
    service["from_cache"] = sum(1 for _, from_cache in figures if from_cache)
    reasons = [str(r["service"].get("stop_reason", "")) if isinstance(r.get("service"), dict) else "" for r in records]
    service["answered_early"] = reasons.count("deadline")  # quickAnswerMs: the rest decoded afterwards
    rows = [_request_row(latency, st, from_cache) | {"stop_reason": reason}
            for latency, (st, from_cache), reason in zip(latencies, figures, reasons, strict=True)]
    rss = stats.get("peakRssKb")
    return ReplayReport(
        label=label,
        requests=requests,
        completed=len(records),
        cancelled=cancelled,
        not_ready=int(counters.get("not_ready", 0)),
        errors=int(counters.get("error", 0)),
        cancelled_share=round(cancelled / requests, 3) if requests else 0.0,
        p50_ms=_percentile(latencies, 0.5),
        p95_ms=_percentile(latencies, 0.95),
        mean_ms=round(statistics.fmean(latencies), 1) if latencies else None,
        peak_rss_mb=round(rss / 1024, 1) if isinstance(rss, (int, float)) else None,
        typed_chars=typed,
        wall_s=round(wall, 1),
        service=service,
        open_documents=int(stats.get("documents", 0)),
        warm=dict(stats.get("warm", {})),
        per_request=rows,
    )


_ROW_FIELDS = ("prompt_tokens", "prefill_tokens", "reused_tokens", "resumed_tokens", "tokens", "target_forwards",
               "t_prefill_ms", "t_draft_ms", "t_verify_ms", "t_other_ms", "threads")


def _request_row(latency_ms: float, st: CompletionStats, from_cache: bool) -> dict[str, Any]:
    """The figures that explain one request's latency: how much prompt was new, how long it decoded."""
    row: dict[str, Any] = {"latency_ms": round(latency_ms, 1), "from_cache": from_cache}
    for key in _ROW_FIELDS:
        value = getattr(st, key)
        if value is not None:
            row[key] = round(value, 1) if isinstance(value, float) else value
    return row


def compare_reuse(cfg: ReplayConfig) -> dict[str, Any]:
    """The same replay with KV prefix reuse on and off (the hidden `prefixReuse` setting)."""
    on = run_replay(_with(cfg, prefixReuse=True), label="reuse on")
    off = run_replay(_with(cfg, prefixReuse=False), label="reuse off")
    ratio = (off.p50_ms / on.p50_ms) if on.p50_ms and off.p50_ms else None
    return {
        "reuse_on": asdict(on),
        "reuse_off": asdict(off),
        "p50_speedup_from_reuse": ratio and round(ratio, 2),
    }


def _with(cfg: ReplayConfig, **settings: Any) -> ReplayConfig:
    return ReplayConfig(**{**asdict(cfg), "file": cfg.file, "settings": {**cfg.settings, **settings}})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dspark_lsp.bench.lsp_replay", description=__doc__)
    parser.add_argument("file", type=Path, help="a source file to type")
    parser.add_argument("--model", default=None)
    parser.add_argument("--draft-model", default=None)
    parser.add_argument("--chars", type=int, default=300, help="characters to type (default 300)")
    parser.add_argument("--cps", type=float, default=8.0, help="typing speed, characters per second")
    parser.add_argument(
        "--patience", type=float, default=0.0, help="at a pause, wait up to S s for the answer"
    )
    parser.add_argument(
        "--extra-documents", type=int, default=0, help="open/complete/close N other files first"
    )
    parser.add_argument("--no-compare", action="store_true", help="one run with reuse on, no reuse-off run")
    parser.add_argument(
        "--server", default=None, help="server command (default: this Python, -m dspark_lsp.lsp --stdio)"
    )
    parser.add_argument("--log-file", default=None, help="append the server's stderr here")
    args = parser.parse_args(argv)
    settings: dict[str, Any] = {}
    if args.model:
        settings["model"] = args.model
    if args.draft_model:
        settings["draftModel"] = args.draft_model
    cfg = ReplayConfig(
        file=args.file,
        settings=settings,
        max_chars=args.chars,
        patience_s=args.patience,
        extra_documents=args.extra_documents,
        chars_per_second=args.cps,
        log_file=args.log_file,
    )
    if args.server:
        cfg.server_command = args.server.split()
    try:
        result: Any = asdict(run_replay(cfg)) if args.no_compare else compare_reuse(cfg)
    except UserError as exc:
        print(f"dspark-lsp: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps(result, indent=2))
    return 0


def server_settings(args: Any) -> dict[str, Any]:
    """The `dspark` settings a replay or soak sends the server, from the bench's model options."""
    settings: dict[str, Any] = {"model": args.model}
    if args.draft:
        settings["draftModel"] = args.draft
    if args.cache_dir:
        settings["cacheDir"] = args.cache_dir
    settings["maxNewTokens"] = args.max_new_tokens
    # Unset: the server's own defaults (what a user gets), not a bench's.
    if args.context_window is not None:
        settings["contextWindow"] = args.context_window
    if args.prefix_share is not None:
        settings["prefixShare"] = args.prefix_share
    if getattr(args, "lsp_quick_ms", None) is not None:
        settings["quickAnswerMs"] = args.lsp_quick_ms
    if getattr(args, "lsp_threads", None) is not None:
        settings["threads"] = args.lsp_threads
    if getattr(args, "lsp_fim_order", None) is not None:
        settings["fimOrder"] = args.lsp_fim_order
    sources = getattr(args, "lsp_sources", None)
    if sources is not None:
        settings.update(context_sources(sources))
    if getattr(args, "backend_url", None):
        backend: dict[str, Any] = {"url": args.backend_url}
        if getattr(args, "backend_model", None):
            backend["model"] = args.backend_model
        if getattr(args, "backend_timeout_ms", None):
            backend["timeoutMs"] = args.backend_timeout_ms
        settings["backend"] = backend
    return settings


SOURCES = {"open": "contextOpenFiles", "defs": "contextDefinitions"}


def context_sources(value: str) -> dict[str, bool]:
    """`--lsp-sources open,defs|open|defs|none` as the server's two source settings."""
    names = [] if value.strip() == "none" else [n.strip() for n in value.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SOURCES))
    if unknown or not names and value.strip() != "none":
        raise UserError(f"--lsp-sources {value!r}: expected open,defs, open, defs or none")
    return {setting: name in names for name, setting in SOURCES.items()}


if __name__ == "__main__":
    sys.exit(main())

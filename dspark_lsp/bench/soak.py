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

The soak (this module and soak_records, soak_measure, soak_editor, soak_output) talks raw JSON-RPC
(only dspark_lsp.lsp may import pygls/lsprotocol).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dspark_lsp.bench.lsp_replay import StdioClient, _percentile, server_settings
from dspark_lsp.bench.soak_editor import _Editor
from dspark_lsp.bench.soak_measure import (
    _mb,
    _RssSampler,
    _timely,
    read_rss_mb,
    rss_summary,
    slope_per_10min,
    windows_of,
)
from dspark_lsp.bench.soak_output import text_table, write_outputs, write_plot
from dspark_lsp.bench.soak_records import SoakConfig, SoakReport, _Request
from dspark_lsp.errors import UserError

# The soak's parts live in soak_records / soak_measure / soak_editor / soak_output; these names stay importable
# from here, where the bench, the tests and the results' scripts have always found them.
__all__ = [
    "SOURCE_SUFFIXES",
    "SoakConfig",
    "SoakReport",
    "_Request",
    "default_files",
    "read_rss_mb",
    "rss_summary",
    "run_soak",
    "run_soak_cli",
    "slope_per_10min",
    "text_table",
    "windows_of",
    "write_outputs",
    "write_plot",
]

# Extensions typed by default: one or more per language the corpus ships.
SOURCE_SUFFIXES = (".py", ".js", ".ts", ".go", ".rs", ".java", ".c", ".cpp", ".h")


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

"""The soak mode of `dspark-lsp bench --lsp` (bench/soak.py), and the bounds it relies on.

* the analysis (RSS slope, windows, percentiles) on made-up samples, where the answer is known;
* a short soak (~25 s) against the real server process on tiny random models: many documents in
  several languages opened, edited, closed and reopened, requests cancelled by newer keys; every
  request answered, the server up to the end, its open-document count equal to the editor's tabs;
* the service's per-document caches stay bounded and drop a document on didClose; no syntax tree
  outlives its request.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from dspark_lsp.bench import soak
from dspark_lsp.bench.soak import (
    SoakConfig,
    _Request,
    default_files,
    read_rss_mb,
    rss_summary,
    run_soak,
    slope_per_10min,
    text_table,
    windows_of,
    write_outputs,
)

TINY_SETTINGS: dict[str, Any] = {
    "device": "cpu",
    "dtype": "float32",
    "maxNewTokens": 4,
    "calibrate": False,
    "packWeights": "off",
    "contextWindow": 64,
}


# ------------------------------------------------------------------------------------ analysis
def test_slope_is_in_mb_per_ten_minutes() -> None:
    rising = [(t, 500 + t / 60) for t in range(0, 1200, 10)]  # 1 MB a minute
    assert slope_per_10min(rising) == pytest.approx(10.0)
    assert slope_per_10min([(t, 800.0) for t in range(0, 600, 5)]) == pytest.approx(0.0)
    assert slope_per_10min([(0, 1.0), (5, 2.0)]) is None


def test_rss_summary_ignores_the_warm_up_and_flags_growth() -> None:
    # Fast growth while loading/warming (first 300 s), flat after: flat.
    samples = [(float(t), 1000.0 + min(t, 300) * 0.5) for t in range(0, 1800, 5)]
    flat = rss_summary(samples, warmup_s=300, flat_limit=10)
    assert flat["rss_start_mb"] == 1000.0 and flat["rss_after_warmup_mb"] == 1150.0
    assert flat["rss_end_mb"] == 1150.0 and flat["rss_peak_mb"] == 1150.0
    assert flat["flat"] is True and flat["rss_slope_mb_per_10min"] == pytest.approx(0.0)
    # 3 MB a minute after the warm-up: 30 MB / 10 min, growing.
    leak = [(float(t), 1000.0 + t * 0.05) for t in range(0, 1800, 5)]
    growing = rss_summary(leak, warmup_s=300, flat_limit=10)
    assert growing["flat"] is False and growing["rss_slope_mb_per_10min"] == pytest.approx(30.0)
    assert rss_summary([], warmup_s=300, flat_limit=10)["flat"] is None


def _req(sent: float, latency_s: float | None, outcome: str, cancelled: bool = False) -> _Request:
    from concurrent.futures import Future

    r = _Request(0, "textDocument/inlineCompletion", sent, Future())
    r.answered = None if latency_s is None else sent + latency_s
    r.outcome, r.cancelled_by_client = outcome, cancelled
    return r


def test_windows_count_and_take_percentiles_of_timely_answers_only() -> None:
    reqs = [_req(0.5 + 0.9 * i, 0.1 * (i + 1), "suggestion") for i in range(10)]  # window 0: 100..1000 ms
    reqs += [_req(12, 9.0, "cancelled", cancelled=True), _req(13, 0.2, "error")]  # window 1
    reqs += [_req(14, 0.05, "empty"), _req(15, None, "pending")]
    w = windows_of(reqs, [(5.0, 900.0), (9.0, 901.0), (15.0, 905.0)], window_s=10, duration_s=25)
    assert [x["start_s"] for x in w] == [0, 10, 20]  # the partial last window counts
    assert w[0]["requests"] == 10 and w[0]["p50_ms"] == pytest.approx(500, abs=1)
    assert w[0]["p95_ms"] == pytest.approx(1000, abs=1) and w[0]["rss_mb"] == 901.0
    # The request the editor cancelled (9 s) and the error are no latency; the empty answer is.
    assert w[1]["requests"] == 4 and w[1]["answered_in_time"] == 1 and w[1]["p95_ms"] == pytest.approx(50, abs=1)
    assert w[1]["cancels"] == 1 and w[1]["errors"] == 1 and w[1]["suggestions"] == 0
    assert w[2]["requests"] == 0 and w[2]["p50_ms"] is None and w[2]["rss_mb"] is None
    late = windows_of([_req(31, 0.1, "empty")], [], window_s=10, duration_s=25)
    assert [x["requests"] for x in late] == [0, 0, 1]  # an answer landing after the end: last window


def test_read_rss_of_this_process_and_of_a_dead_one() -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc on this system")
    rss = read_rss_mb(os.getpid())
    assert rss is not None and 10 < rss < 100_000
    assert read_rss_mb(2**22 + 12345) is None  # above the default pid_max: never a live process


def test_default_files_span_several_languages() -> None:
    files = default_files()
    assert len({p.suffix for p in files}) >= 5, files


# --------------------------------------------------------------------------- a short real soak
@pytest.fixture(scope="module")
def short_soak(tiny_models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> soak.SoakReport:
    """~25 s of typing at 4x speed over six files in four languages, at most three tabs open."""
    target, draft = tiny_models
    corpus = Path(__file__).resolve().parents[2] / "bench" / "corpus"
    files = [corpus / p for p in ("python/lru_cache.py", "python/expr_lexer.py", "go/config.go",
                                  "rust/lexer.rs", "typescript/ledger.ts", "c/hashmap.c")]
    log = tmp_path_factory.mktemp("soak") / "server.log"
    cfg = SoakConfig(
        files=files,
        duration_s=25,
        settings={**TINY_SETTINGS, "model": str(target), "draftModel": str(draft)},
        server_command=[sys.executable, "-m", "dspark_lsp.cli", "--stdio", "--log-level", "warning"],
        time_scale=0.25,
        block_lines=(1, 2),
        block_chars_max=40,
        visits_per_document=(1, 1),
        max_open=3,
        close_prob=0.5,
        sample_every_s=0.5,
        window_s=5,
        warmup_s=5,
        answer_timeout_s=60,
        load_timeout_s=180,
        log_file=str(log),
    )
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the server inherits them (one thread: tiny models, a shared 2-core box)
    try:
        return run_soak(cfg)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.timeout(300)
def test_short_soak_answers_everything_and_the_server_stays_up(short_soak: soak.SoakReport) -> None:
    r = short_soak
    print(text_table(r))
    assert r.server_alive_at_end and r.exit_code == 0
    assert r.requests >= 30 and r.unanswered == 0 and r.answers == r.requests
    assert r.errors == 0, r.server_counters
    assert r.cancels_sent >= 1  # newer keys superseded unanswered requests
    assert r.suggestions + r.empty + r.cancelled_answers >= r.requests - r.cancels_sent
    assert r.p50_ms is not None and r.p95_ms is not None and r.p50_ms <= r.p95_ms
    # Documents came and went, in several languages; the server's count always matched the tabs.
    assert len(r.languages) >= 4 and r.opens >= 4 and r.closes >= 2 and r.reopens >= 1
    assert r.document_mismatches == []
    assert r.server_counters["documents_open_at_end"] <= 3
    # The server saw every request the editor sent (plus the per-window stats polls are not counted).
    assert r.server_counters["requests"] == r.requests


@pytest.mark.timeout(300)
def test_short_soak_samples_rss_and_fills_every_window(short_soak: soak.SoakReport) -> None:
    r = short_soak
    assert len(r.rss_samples) >= 30
    assert all(v > 50 for _, v in r.rss_samples)  # a Python server with torch loaded
    assert r.rss_after_warmup_mb is not None and r.rss_end_mb is not None
    assert r.rss_slope_mb_per_10min is not None and r.flat is not None
    assert len(r.windows) == 5
    assert all(w["requests"] > 0 and w["rss_mb"] is not None for w in r.windows), r.windows
    assert sum(w["requests"] for w in r.windows) == r.requests


@pytest.mark.timeout(300)
def test_short_soak_server_trims_the_heap_after_completions(short_soak: soak.SoakReport) -> None:
    """lsp/memory.py is on in the real server process: it ran malloc_trim after its completions (the
    environment did not turn it off), and the soak reports it."""
    from dspark_lsp.lsp import memory

    if not memory.enabled():
        pytest.skip("no glibc malloc_trim here")
    trim = short_soak.server_counters["malloc_trim"]
    assert trim["enabled"] is True
    assert 1 <= trim["trims"] <= short_soak.requests  # at most one per request, and some ran
    assert trim["ms"] >= 0


def test_outputs_without_matplotlib_say_the_plot_was_skipped(
    short_soak: soak.SoakReport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    paths = write_outputs(short_soak, tmp_path / "out")
    assert set(paths) == {"json", "text"} and not (tmp_path / "out" / "soak.png").exists()
    data = json.loads(paths["json"].read_text())
    assert data["plot"].startswith("skipped: matplotlib is not installed")
    assert data["requests"] == short_soak.requests and len(data["rss_samples"]) == len(short_soak.rss_samples)
    text = paths["text"].read_text()
    assert "slope after warm-up" in text and "p95 ms" in text and "skipped" in text


def test_outputs_with_matplotlib_write_a_png(short_soak: soak.SoakReport, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    paths = write_outputs(short_soak, tmp_path / "out")
    png = paths["png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "plot: " in paths["text"].read_text()


# ------------------------------------------------------------------------------------- the bounds
@pytest.fixture(scope="module")
def tiny_service(tiny_models: tuple[Path, Path]) -> Any:
    from dspark_lsp.service import CompletionService, ServiceConfig

    target, _ = tiny_models
    cfg = ServiceConfig(model=str(target), draft_model="ngram", max_new_tokens=3, calibrate=False,
                        context_window=64, pack_weights="off", dtype="float32", device="cpu")
    return CompletionService.load(cfg)


def _complete(service: Any, doc: str, text: str) -> Any:
    from dspark_lsp.service import CompletionRequest

    return service.complete(CompletionRequest(text=text, offset=len(text), path="a.py", doc_key=doc))


DOC_TEXT = "def add(a, b):\n    return a + b\n\nclass Point:\n    def norm(self):\n        return "


def test_completion_cache_is_bounded_in_total_and_per_document(tiny_service: Any) -> None:
    from dspark_lsp.service import _Shown

    service = tiny_service
    for i in range(service.SHOWN_CACHE + 40):
        for j in range(6):  # more than the four kept per document
            service._remember(f"file:///d{i}.py", _Shown("x" * j, "", "y", [1], "p", "single_line"))
        assert sum(len(v) for v in service._shown.values()) <= service.SHOWN_CACHE
    assert all(len(v) <= 4 for v in service._shown.values())
    assert "file:///d0.py" not in service._shown  # least recently used went first
    service._shown.clear()


def test_scheduler_state_prefix_cache_and_records_stay_bounded(tiny_service: Any) -> None:
    service = tiny_service
    for i in range(service.SHOWN_CACHE + 10):
        _complete(service, f"file:///s{i}.py", DOC_TEXT + "x" * (i % 7) + f"  # {i}")
        assert len(service._sched_state) <= service.SHOWN_CACHE
        pc = service.prefix_cache
        assert len(pc) <= pc.max_entries and pc.total_tokens <= pc.max_tokens
    assert len(service._sched_state) == service.SHOWN_CACHE  # full, not dropped wholesale
    assert len(service.recent_stats()) == service.RECENT


def test_forget_drops_a_documents_service_state(tiny_service: Any) -> None:
    from dspark_lsp.service import _Shown

    service = tiny_service
    _complete(service, "file:///keep.py", DOC_TEXT)
    _complete(service, "file:///gone.py", DOC_TEXT)
    service._remember("file:///gone.py", _Shown(DOC_TEXT, "", "1", [1], "p", "single_line"))
    assert "file:///gone.py" in service._sched_state and "file:///gone.py" in service._shown
    service.forget("file:///gone.py")
    assert "file:///gone.py" not in service._sched_state and "file:///gone.py" not in service._shown
    assert "file:///keep.py" in service._sched_state
    service.forget("file:///never-opened.py")  # no state: nothing to do, no error


def test_no_syntax_tree_outlives_its_request(tiny_service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service parses per request and keeps no tree: every SyntaxDocument is garbage afterwards."""
    import gc
    import weakref

    import dspark_lsp.syntax as syntax

    made: list[weakref.ref[Any]] = []

    class Tracked(syntax.SyntaxDocument):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(weakref.ref(self))

    monkeypatch.setattr(syntax, "SyntaxDocument", Tracked)
    for i in range(5):
        _complete(tiny_service, f"file:///t{i}.py", DOC_TEXT + "x" * i)
    gc.collect()
    assert len(made) >= 5
    assert [r for r in made if r() is not None] == []


def test_did_close_drops_the_documents_service_state_on_the_worker_thread() -> None:
    """The didClose handler closes the mirror, cancels the document's request and its pending warm-up,
    drops the document from the project context, and has the service forget the document on the
    executor (the one thread every service call runs on)."""
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    from lsprotocol import types

    from dspark_lsp.lsp.documents import DocumentStore
    from dspark_lsp.lsp.handlers import documents

    forgotten: list[tuple[str, str]] = []
    cancelled: list[str] = []
    closed: list[str] = []
    dropped: list[str] = []
    import threading

    service = SimpleNamespace(forget=lambda uri: forgotten.append((uri, threading.current_thread().name)))
    executor = ThreadPoolExecutor(1, thread_name_prefix="service")
    server = SimpleNamespace(
        docs=DocumentStore(),
        worker=SimpleNamespace(cancel_document=cancelled.append),
        project=SimpleNamespace(closed=closed.append),
        warmer=SimpleNamespace(drop=dropped.append),
        models=SimpleNamespace(service=service),
        executor=executor,
        encoding="utf-16",
    )
    uri = "file:///a.py"
    server.docs.open(uri, "x = 1\n", 1, "python")
    documents.did_close(
        server,  # type: ignore[arg-type]
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    executor.shutdown(wait=True)
    assert uri not in server.docs and cancelled == [uri]
    assert closed == [uri] and dropped == [uri]
    assert len(forgotten) == 1 and forgotten[0][0] == uri and forgotten[0][1].startswith("service")

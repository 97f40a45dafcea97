"""The soak's records: its configuration, one request as the editor saw it, and the report (bench/soak.py)."""

from __future__ import annotations

import sys
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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

"""What the soak measures: the server's RSS sampled from outside, and the figures made of the samples and the
requests (RSS slope after the warm-up, per-window counts and latency percentiles)."""

from __future__ import annotations

import threading
import time
from typing import Any

from dspark_lsp.bench.lsp_replay import _percentile
from dspark_lsp.bench.soak_records import _Request


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

"""A note when the default model answers slowly on this machine.

The default target (the 1.5B) was chosen on a 2-core CPU where its follow-ups while typing stay near
250 ms (docs/MODELS.md). On slower CPUs they do not: on a 2-core AVX2-only Zen 3 they are ~250 ms mid-file but
560-600 ms at a file's end, where the 0.5B answers in 260. A figure measured once at load (one forward) was
too noisy on a shared machine to tell those hosts apart (47-66 ms on the Zen 3, 35-52 on the Zen 4), so the
server watches what the user actually waits for instead: once the median of the last ``window`` answers
exceeds ``bound_ms`` (the issue's 400 ms for the 1.5B's follow-ups), it says so, once per server start, with
what to do about it. Only where the settings left the model at ``default``: naming a model is a choice.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Callable


class SlowAnswers:
    """Watches answer latencies; ``take`` gives the note once, when they have been slow."""

    def __init__(self, message: Callable[[float, int], str], bound_ms: float = 400.0, window: int = 20) -> None:
        if window < 1 or bound_ms <= 0:
            raise ValueError("window and bound_ms must be positive")
        self.message = message  # (median ms, answers counted) -> the note
        self.bound_ms = bound_ms
        self.window = window
        self._recent: deque[float] = deque(maxlen=window)
        self._pending: str | None = None
        self._said = False
        self._lock = threading.Lock()

    def observe(self, latency_ms: float) -> None:
        with self._lock:
            if self._said:
                return
            self._recent.append(latency_ms)
            if len(self._recent) == self.window:
                median = statistics.median(self._recent)
                if median > self.bound_ms:
                    self._pending, self._said = self.message(median, self.window), True

    def take(self) -> str | None:
        """The note, the first time it is due (then None forever)."""
        with self._lock:
            note, self._pending = self._pending, None
            return note

"""The verify-cost plan (engine.costs.ForwardPlan) for each CPU thread count the engine runs with.

The scheduler drafts by the shape of the target's cost curve: how much dearer a forward of n tokens is
than one of 1. That shape depends on the threads. The 1.5B on a 2-core Zen 5: at two threads 4 tokens
cost 1.7-1.9x one, at one thread 2.0x (docs/CPU_THREADS.md: the forwards measured per arm).
With the thread count following the machine's load (engine/cpu_share.py), a curve measured at load with
all threads would make the scheduler draft and verify more rows at one thread than pay there. So each
count gets its own plan: the load-time one for the count at load, the others measured when the engine
ran with them, at the next background prefill (LocalDecoder.warm), where a request can stop the
measurement between two short forwards. Until then the nearest count's plan stands in.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from dspark_lsp.engine.costs import ForwardPlan, calibrate_forwards

log = logging.getLogger(__name__)


@dataclass
class CostPlans:
    """``plans``: thread count -> its plan. ``measure``: time the target for a count not seen yet (False
    where the load-time curve is a stored profile: calibration off)."""

    plans: dict[int, ForwardPlan]
    measure: bool = True

    def for_threads(self, threads: int) -> ForwardPlan:
        """The plan for ``threads``, or the nearest count's (ties: the smaller count)."""
        plan = self.plans.get(threads)
        if plan is not None:
            return plan
        return self.plans[min(self.plans, key=lambda n: (abs(n - threads), n))]

    def missing(self, threads: int) -> bool:
        """Whether ``threads`` has no plan of its own and one can be measured."""
        return self.measure and threads not in self.plans

    def fill(self, model: Any, threads: int, cancel: threading.Event | None = None) -> bool:
        """Measure the plan of ``threads`` (the count the caller runs with now) if it has none. Returns
        whether a plan was added (False: it had one, measuring is off, or ``cancel`` stopped it)."""
        if not self.missing(threads):
            return False
        t0 = time.perf_counter()
        plan = calibrate_forwards(model, cancel)
        if not plan.cost_ms:
            return False
        self.plans[threads] = plan
        log.info("measured the forward costs at %d thread(s) in %.1f s: %s", threads, time.perf_counter() - t0,
                 {n: round(ms, 1) for n, ms in sorted(plan.measured_ms.items())})
        return True

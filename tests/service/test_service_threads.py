"""The local engine's CPU threads follow the other programs' use of the CPU, per request, on the thread
that decodes (torch keeps the count per thread), and the `threads` setting fixes them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from dspark_lsp.engine.cpu_share import CpuTimes, CpuWatch, ThreadPolicy
from dspark_lsp.service import CompletionRequest, CompletionService, ServiceConfig

DOC = "def add(a, b):\n    return a + b\n\nresult = add("


class Host:
    """Scripted CPU readings: another program's cores per reading."""

    def __init__(self) -> None:
        self.t = self.busy = 0.0

    def run_for(self, seconds: float, others: float) -> None:
        self.t += seconds
        self.busy += others * seconds

    def read(self) -> CpuTimes:
        return CpuTimes(self.busy, 0.0, self.t)


def _complete_on_a_worker(service: CompletionService) -> tuple[Any, list[int]]:
    """One completion on a fresh thread, as the language server runs them; the torch thread counts its
    decode saw."""
    seen: list[int] = []
    out: list[Any] = []
    req = CompletionRequest(text=DOC, offset=len(DOC), path="a.py", doc_key="file:///a.py", max_new_tokens=4)
    worker = threading.Thread(target=lambda: out.append(service.complete(
        req, on_text=lambda _t: seen.append(torch.get_num_threads()))))
    worker.start()
    worker.join()
    service.prefix_cache.clear()
    service._shown.clear()  # the next request decodes again instead of answering from the cache
    return out[0], seen


@pytest.fixture
def service(tiny_models: tuple[Path, Path]) -> Any:
    svc = CompletionService.load(ServiceConfig(model=str(tiny_models[0]), draft_model="ngram", fim_order="psm"))
    yield svc
    svc.close()


def _scripted(service: CompletionService, policy: ThreadPolicy) -> Host:
    host = Host()
    local = service._local()
    local.cpu_watch.stop()
    local.cpu_watch = CpuWatch(policy, cores=2, reader=host.read)
    local.cpu_watch.sample()
    return host


def test_a_busy_core_elsewhere_gives_one_thread_and_an_idle_host_all(service: CompletionService) -> None:
    host = _scripted(service, ThreadPolicy(most=2))
    watch = service._local().cpu_watch
    host.run_for(1.0, others=1.0)
    watch.sample()
    busy, seen_busy = _complete_on_a_worker(service)
    assert busy.stats["threads"] == 1 and seen_busy and set(seen_busy) == {1}
    host.run_for(1.0, others=0.0)
    watch.sample()
    idle, seen_idle = _complete_on_a_worker(service)
    assert idle.stats["threads"] == 2 and set(seen_idle) == {2}
    assert busy.completion_ids == idle.completion_ids  # the thread count changes the speed, not the completion


def test_the_threads_setting_fixes_the_count(service: CompletionService) -> None:
    service.update_config(ServiceConfig(model=service.config.model, draft_model="ngram", fim_order="psm", threads=1))
    assert service._local().cpu_watch.policy == ThreadPolicy(most=1, adaptive=False)
    host = _scripted(service, service._local().cpu_watch.policy)
    host.run_for(1.0, others=0.0)
    service._local().cpu_watch.sample()
    res, seen = _complete_on_a_worker(service)
    assert res.stats["threads"] == 1 and set(seen) == {1}
    service.update_config(ServiceConfig(model=service.config.model, draft_model="ngram", fim_order="psm"))
    assert service._local().cpu_watch.policy.adaptive


def test_threads_setting_is_checked(service: CompletionService) -> None:
    cfg, problems = ServiceConfig.from_settings({"threads": -1})
    assert cfg.threads == 0 and problems and "threads" in problems[0]


def test_a_thread_count_gets_its_own_cost_curve_in_the_background(service: CompletionService) -> None:
    """The scheduler's cost curve is measured at load with every thread; the first request at one thread
    plans with it (the nearest there is); the next background warm-up at one thread measures its own."""
    local = service._local()
    loaded = set(local.cost_plans.plans)
    host = _scripted(service, ThreadPolicy(most=2))
    host.run_for(1.0, others=1.0)
    local.cpu_watch.sample()
    local.cost_plans.plans = {2: local.cost_plans.plans[min(loaded)]}  # as on a 2-core machine
    res, _ = _complete_on_a_worker(service)
    assert res.stats["threads"] == 1 and local.cost_plans.missing(1) and set(local.cost_plans.plans) == {2}
    req = CompletionRequest(text=DOC + "1", offset=len(DOC) + 1, path="a.py", doc_key="file:///a.py")
    stopped = threading.Event()
    stopped.set()
    worker = threading.Thread(target=lambda: service.warm(req, stopped))
    worker.start()
    worker.join()
    assert set(local.cost_plans.plans) == {2}  # a request came: nothing measured yet
    worker = threading.Thread(target=lambda: service.warm(req))
    worker.start()
    worker.join()
    assert set(local.cost_plans.plans) == {1, 2} and not local.cost_plans.missing(1)
    assert local.cost_plans.plans[1].cost_ms and local.cost_plans.plans[1].cost_ms[1] > 0


def test_the_load_reading_thread_ends_with_its_decoder(tiny_models: tuple[Path, Path]) -> None:
    """Each loaded engine reads /proc in a thread of its own; one dropped without close() (a reload, a
    test) must not leave that thread running for the rest of the process."""
    import gc

    svc = CompletionService.load(ServiceConfig(model=str(tiny_models[0]), draft_model="ngram"))
    watch = svc._local().cpu_watch
    assert watch._thread is not None and watch._thread.is_alive()
    del svc
    gc.collect()
    watch._thread.join(timeout=2.0)
    assert not watch._thread.is_alive()

"""The status bar's figures come from the real CompletionService's stats (tiny random models).

Issue 15: the server read `stats["speedup"]`, which only the test fake wrote, so no editor ever showed
a speed-up. Here the real service decodes, and the server's `dspark/status` payload is built from its
result exactly as after a completion in the editor.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dspark_lsp.lsp.channel import STATUS_METHOD
from dspark_lsp.lsp.loader import READY
from dspark_lsp.lsp.server import create_server
from dspark_lsp.lsp.session import Session
from dspark_lsp.lsp.worker import Outcome
from dspark_lsp.service import CompletionRequest, CompletionService, ServiceConfig

DOC = "def add(a, b):\n    return a + b\n\nresult = add("


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    # Tiny models decode far faster on one thread than on two shared ones (see conftest).
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def service(tiny_models: tuple[Path, Path]) -> CompletionService:
    target, draft = tiny_models
    cfg = ServiceConfig(model=str(target), draft_model=str(draft), max_new_tokens=16, calibrate=False)
    return CompletionService.load(cfg)


def req(text: str = DOC, doc: str = "file:///a.py") -> CompletionRequest:
    return CompletionRequest(text=text, offset=len(text), path="a.py", doc_key=doc)


def ready_server() -> tuple[Session, list[dict[str, Any]]]:
    """A server whose models are ready, with its dspark/status notifications recorded."""
    server = create_server().session
    server.models = SimpleNamespace(state=READY, message="models ready")  # type: ignore[assignment]
    sent: list[dict[str, Any]] = []

    def notify(method: str, params: Any) -> None:
        if method == STATUS_METHOD:
            sent.append(params)

    server.channel.notify = notify  # type: ignore[method-assign]
    return server, sent


def test_service_stats_carry_the_forward_speedup(service: CompletionService) -> None:
    res = service.complete(req(doc="file:///speedup.py"))
    st = res.stats
    assert st["tokens"] >= 1 and st["target_forwards"] >= 1
    # Tokens per target forward = forwards the target alone would run (one per token) / forwards run.
    assert st["speedup"] == pytest.approx(st["tokens"] / st["target_forwards"], abs=1e-3)
    assert 1.0 <= st["speedup"] <= st["tokens"]


def test_status_shows_the_real_services_speedup_and_latency(service: CompletionService) -> None:
    server, sent = ready_server()
    res = service.complete(req(doc="file:///status.py"))
    assert res.text and not res.from_cache
    server._report_completion(Outcome("ok", text=res.text, result=res, latency_ms=84.64))
    assert len(sent) == 1
    status = sent[0]
    assert status["state"] == READY and status["message"] == "models ready"
    assert status["lastLatencyMs"] == 84.6
    assert status["speedup"] == res.stats["speedup"] >= 1.0
    assert status["acceptedPerForward"] == res.stats["accepted_per_forward"]

    # Typing through the shown completion: answered from the cache, no model ran. The latency is the
    # new answer's; the speed-up stays the last decoded completion's (the cache has no forwards).
    typed = res.text[:1]
    cached = service.complete(req(DOC + typed, doc="file:///status.py"))
    assert cached.from_cache and "speedup" not in cached.stats
    server._report_completion(Outcome("ok", text=cached.text, result=cached, latency_ms=3.0))
    assert sent[-1]["lastLatencyMs"] == 3.0
    assert sent[-1]["speedup"] == status["speedup"]


def test_nothing_decoded_means_no_speedup(service: CompletionService) -> None:
    # A decoded completion with no tokens has no ratio to show: the previous figure is dropped,
    # not kept as if it described this answer.
    server, sent = ready_server()
    server.last_speedup = 2.0
    empty = SimpleNamespace(stats={"tokens": 0, "target_forwards": 1, "accepted_per_forward": 0.0}, from_cache=False)
    server._report_completion(Outcome("ok", text="", result=empty, latency_ms=10.0))
    assert "speedup" not in sent[-1] and sent[-1]["lastLatencyMs"] == 10.0

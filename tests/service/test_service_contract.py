"""The typed service contract (dspark_lsp.contract, issue 17 item 3): one request / result / stats type for
the local service, the remote one, the test fake and the LSP layer, with one wire form for the stats.

The VS Code speed-up bug (issue 15) came from an untyped stats dict: the server read `stats["speedup"]`,
which only the fake wrote. Here every service answers in the same types, every figure it reports is a
declared field (none hides in `extra`), and what `dspark/stats` sends parses back into the contract.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from dspark_lsp.contract import (
    RECORD_FLAGS,
    RESULT_FLAGS,
    STATS_FIELDS,
    CompletionRequest,
    CompletionResult,
    CompletionStats,
    ServiceRecord,
    as_result,
)
from dspark_lsp.engine.stats import DecodeStats

pytestmark = pytest.mark.timeout(300)  # the session's tiny models are built inside the first test's time

FIXTURES = Path(__file__).parents[1] / "helpers" / "lsp_fixtures"
DOC = "def add(a, b):\n    return a + b\n\nresult = add("
# The local service's stats keys, in the order they were sent before the contract (the wire form).
LOCAL_KEYS = [
    "latency_ms", "tokens", "seconds", "prompt_tokens", "prefill_tokens", "reused_tokens", "resumed_tokens",
    "target_forwards", "draft_forwards", "accepted_per_forward", "proposed", "accepted", "k_trace", "tau_trace",
    "t_prefill_ms", "t_draft_ms", "t_verify_ms", "t_other_ms", "draft", "weights", "speedup",
]
REMOTE_KEYS = {
    "latency_ms", "seconds", "prompt_tokens", "first_text_ms", "finish_reason", "backend", "served_model",
    "draft", "weights",
}


def _fake_service() -> ModuleType:
    spec = importlib.util.spec_from_file_location("contract_fake_service", FIXTURES / "fake_service.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def _decode_stats(new_tokens: int = 6, target_forwards: int = 3) -> DecodeStats:
    return DecodeStats(
        prompt_tokens=40, reused_tokens=8, prefill_tokens=32, new_tokens=new_tokens,
        target_forwards=target_forwards, draft_forwards=4, proposed=5, accepted=3, k_trace=[3, 2], tau_trace=[0.9, 0.85],
        t_prefill=0.012, t_draft=0.003, t_verify=0.02, t_total=0.04,
    )


# ----------------------------------------------------------------------------------- the module
def test_the_contract_imports_without_torch() -> None:
    code = (
        "import sys, dspark_lsp.contract, dspark_lsp.lsp.backend\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'tree_sitter') if m in sys.modules)\n"
        "layers = sorted(m for m in sys.modules if m.startswith(('dspark_lsp.engine', 'dspark_lsp.syntax',"
        " 'dspark_lsp.models', 'dspark_lsp.service')))\n"
        "assert not heavy and not layers, (heavy, layers)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_engine_and_syntax_never_import_the_lsp_layer_or_the_contract() -> None:
    root = Path(__file__).parents[2] / "dspark_lsp"
    for layer in ("engine", "syntax"):
        for path in (root / layer).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert "dspark_lsp.lsp" not in text and "dspark_lsp.contract" not in text, path


# ---------------------------------------------------------------------------------- wire form
def test_stats_from_the_decode_keep_the_wire_form() -> None:
    stats = CompletionStats.from_decode(_decode_stats(), latency_ms=51.234, draft="ngram", weights="float32")
    wire = stats.to_json()
    assert list(wire) == LOCAL_KEYS
    assert wire["accepted_per_forward"] == wire["speedup"] == 2.0 and wire["t_other_ms"] == 5.0
    assert wire["latency_ms"] == 51.23 and wire["seconds"] == 0.04 and wire["k_trace"] == [3, 2]
    assert CompletionStats.from_json(json.loads(json.dumps(wire))) == stats
    # Nothing decoded: no ratio to show, so no speedup key at all (the status bar drops its figure).
    empty = CompletionStats.from_decode(_decode_stats(0, 1), latency_ms=1.0, draft="none", weights="float32")
    assert empty.speedup is None and "speedup" not in empty.to_json() and "speedup" not in empty


def test_remote_stats_send_unknown_figures_as_null() -> None:
    stats = CompletionStats(latency_ms=3.0, seconds=0.1, prompt_tokens=9, backend="http://x", served_model="m",
                            draft="remote", weights="remote")
    wire = stats.to_json()
    assert set(wire) == REMOTE_KEYS and wire["first_text_ms"] is None and wire["finish_reason"] is None
    assert CompletionStats.from_json(wire) == stats


def test_from_json_checks_declared_figures_and_keeps_the_rest() -> None:
    stats = CompletionStats.from_json({"tokens": 3, "speedup": 2, "model": "fake", "rounds": 0})
    assert stats.tokens == 3 and stats.speedup == 2 and stats.extra == {"model": "fake", "rounds": 0}
    assert stats.to_json() == {"tokens": 3, "speedup": 2, "model": "fake", "rounds": 0}
    for bad in ({"tokens": "3"}, {"tokens": True}, {"speedup": "fast"}, {"k_trace": [1, "2"]}, {"draft": 1}):
        with pytest.raises(ValueError):
            CompletionStats.from_json(bad)
    with pytest.raises(ValueError):
        CompletionStats(extra={"speedup": 1.0})  # an undeclared figure may not shadow a declared one
    with pytest.raises(ValueError):
        ServiceRecord("d", 0, "single_line", False, False, "", CompletionStats(extra={"cancelled": True}))


def test_stats_read_as_a_mapping_of_their_wire_form() -> None:
    stats = CompletionStats(latency_ms=1.5, tokens=2, k_trace=[1], extra={"model": "x"})
    assert dict(stats) == stats.to_json() and stats["tokens"] == 2 and stats.get("speedup") is None
    assert "speedup" not in stats and "model" in stats and len(stats) == 4
    assert stats.scalars() == {"latency_ms": 1.5, "tokens": 2, "model": "x"}
    decoded = CompletionStats.from_decode(_decode_stats(), latency_ms=1.0, draft="ngram", weights="float32")
    assert decoded.without_lists().to_json() == decoded.scalars()  # a record keeps no per-round lists


def test_no_stats_field_shadows_a_record_or_result_flag() -> None:
    assert not set(STATS_FIELDS) & (set(RECORD_FLAGS) | set(RESULT_FLAGS))
    assert "extra" not in STATS_FIELDS


def test_a_duck_typed_answer_is_read_once_through_the_contract() -> None:
    real = CompletionResult("x", "", [], "single_line", CompletionStats(speedup=1.5))
    assert as_result(real) is real
    duck = as_result(SimpleNamespace(text="y", stats={"speedup": 2.0, "model": "m"}, from_cache=True))
    assert isinstance(duck, CompletionResult) and duck.text == "y" and duck.from_cache
    assert duck.stats.speedup == 2.0 and duck.stats.extra == {"model": "m"}
    assert as_result(SimpleNamespace(stats={"speedup": "fast"})).stats == CompletionStats()
    assert as_result(None) == CompletionResult("", "", [], "")


# --------------------------------------------------------------------------------- the services
@pytest.fixture(scope="module")
def service(tiny_models: tuple[Path, Path]) -> Any:
    from dspark_lsp.service import CompletionService, ServiceConfig

    target, draft = tiny_models
    cfg = ServiceConfig(model=str(target), draft_model=str(draft), max_new_tokens=8, calibrate=False)
    return CompletionService.load(cfg)


def _declared_only(stats: CompletionStats) -> None:
    assert isinstance(stats, CompletionStats)
    assert stats.extra == {}, f"figures outside the contract: {stats.extra}"
    assert CompletionStats.from_json(json.loads(json.dumps(stats.to_json()))) == stats


def _records_validate(records: list[dict[str, Any]]) -> list[ServiceRecord]:
    parsed = [ServiceRecord.from_json(json.loads(json.dumps(r))) for r in records]
    for record, wire in zip(parsed, records, strict=True):
        assert record.to_json() == wire
    return parsed


def test_the_local_service_answers_in_the_contract(service: Any) -> None:
    decoded = service.complete(CompletionRequest(text=DOC, offset=len(DOC), path="a.py", doc_key="file:///c.py"))
    assert type(decoded) is CompletionResult
    _declared_only(decoded.stats)
    assert list(decoded.stats.to_json())[: len(LOCAL_KEYS) - 1] == LOCAL_KEYS[:-1]
    if decoded.text:
        typed = decoded.text[:1]
        cached = service.complete(CompletionRequest(text=DOC + typed, offset=len(DOC) + 1, path="a.py",
                                                    doc_key="file:///c.py"))
        assert cached.from_cache and set(cached.stats) == {"latency_ms", "typed_through"}
        _declared_only(cached.stats)
    out_of_scope = service.complete(CompletionRequest(text="value = compute", offset=len("value = com"),
                                                      path="a.py", doc_key="file:///c.py"))
    assert out_of_scope.stop_reason == "scope_none" and dict(out_of_scope.stats) == {"latency_ms": 0.0}
    records = _records_validate(service.recent_stats())
    assert all(r.stats.extra == {} for r in records) and records[-1].doc == "file:///c.py"


def test_the_remote_service_answers_in_the_contract(tiny_models: tuple[Path, Path]) -> None:
    from openai_fake import FakeOpenAI

    from dspark_lsp.remote.config import RemoteSettings
    from dspark_lsp.service import CompletionService, ServiceConfig

    fake = FakeOpenAI()
    try:
        remote = RemoteSettings(url=fake.url, timeout_ms=5000)
        service = CompletionService.load(ServiceConfig(model=str(tiny_models[0]), max_new_tokens=24, backend=remote))
        doc = "def add(a, b):\n    "
        result = service.complete(CompletionRequest(text=doc, offset=len(doc), path="a.py", doc_key="file:///r.py"))
        assert type(result) is CompletionResult and result.text == "return a + b"
        _declared_only(result.stats)
        assert REMOTE_KEYS <= set(result.stats) and result.stats.backend == fake.url
        records = _records_validate(service.recent_stats())
        assert records[-1].stats.backend == fake.url and records[-1].stats.extra == {}
    finally:
        fake.close()


def test_the_fake_service_answers_in_the_same_types(service: Any) -> None:
    fake_service = _fake_service()
    fake = fake_service.FakeService.load(fake_service.FakeConfig())
    req = fake_service.BACKEND.make_request(text="ab", offset=2, language_id="python", doc_key="file:///f.py")
    assert type(req) is CompletionRequest
    answer = fake.complete(req)
    real = service.complete(CompletionRequest(text=DOC, offset=len(DOC), path="a.py", doc_key="file:///f.py"))
    assert type(answer) is type(real) is CompletionResult
    assert type(answer.stats) is type(real.stats) is CompletionStats
    # The status bar's figures are declared fields for both (issue 15: the fake alone wrote "speedup").
    assert answer.stats.speedup == 1.7 and answer.stats.accepted_per_forward == 2.5
    _records_validate(fake.recent_stats())


def test_the_dspark_stats_reply_validates_against_the_contract(service: Any) -> None:
    """What `dspark/stats` sends, from the real service through the worker: every service record parses
    into a `ServiceRecord` with declared figures only, every request's figures into `CompletionStats`."""
    from dspark_lsp.lsp.executor import SerialExecutor
    from dspark_lsp.lsp.handlers.stats import collect
    from dspark_lsp.lsp.loader import READY
    from dspark_lsp.lsp.server import create_server
    from dspark_lsp.lsp.worker import CompletionWorker

    server = create_server().session
    models = SimpleNamespace(state=READY, message="models ready", service=service)
    executor = SerialExecutor("contract-test")
    try:
        server.models = models  # type: ignore[assignment]
        server.worker = CompletionWorker(models, executor)  # type: ignore[arg-type]
        uri = "file:///stats.py"
        for text in (DOC, DOC + "1"):
            outcome = asyncio.run(server.worker.run(
                uri, lambda t=text: CompletionRequest(text=t, offset=len(t), path="a.py", doc_key=uri), 0
            ))
            assert outcome.status in ("ok", "empty") and isinstance(outcome.result, CompletionResult)
        reply = json.loads(json.dumps(collect(server)))
    finally:
        executor.shutdown()
    records = _records_validate(reply["service"])
    assert records and all(r.stats.extra == {} for r in records)
    assert len(reply["requests"]) == 2
    for request in reply["requests"]:
        figures = request["service"]
        assert set(RESULT_FLAGS) <= figures.keys()
        stats = CompletionStats.from_json({k: v for k, v in figures.items() if k not in RESULT_FLAGS})
        assert stats.extra == {} and stats.latency_ms is not None

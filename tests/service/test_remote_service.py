"""The completion service with the `backend` setting: our own FIM prompt to a fake OpenAI-compatible
server, the stop rules cutting the stream (and closing it), the typed-through cache, cancellation,
errors, and the setting's parsing in ServiceConfig. The tokenizer is the tiny test models' one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_fake import MODEL, FakeOpenAI

from dspark_lsp.errors import UserError
from dspark_lsp.prompt import build_fim_prompt
from dspark_lsp.remote.client import BackendError
from dspark_lsp.remote.config import RemoteSettings
from dspark_lsp.service import CompletionRequest, CompletionService, RemoteCompletionService, ServiceConfig
from tests.service.test_remote_client import closed_port

pytestmark = pytest.mark.timeout(300)  # the session's tiny models are built inside the first test's time
BLOCK_DOC = "def add(a, b):\n    "
LINE_DOC = "values = [0]\nresult = add("


@pytest.fixture()
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture()
def make(fake: FakeOpenAI, tiny_models: tuple[Path, Path]) -> Any:
    def make_service(**backend: Any) -> RemoteCompletionService:
        remote = RemoteSettings(**{"url": fake.url, "timeout_ms": 5000, **backend})
        cfg = ServiceConfig(model=str(tiny_models[0]), max_new_tokens=24, backend=remote)
        service = CompletionService.load(cfg)
        assert isinstance(service, RemoteCompletionService)
        return service

    return make_service


def req(text: str, doc: str = "file:///a.py") -> CompletionRequest:
    return CompletionRequest(text=text, offset=len(text), path="a.py", doc_key=doc)


# ----------------------------------------------------------------------------------------- prompt
def test_the_request_carries_our_own_fim_prompt(make: Any, fake: FakeOpenAI) -> None:
    service = make()
    result = service.complete(req(BLOCK_DOC))
    sent = fake.requests[-1]
    # A server cannot heal the prompt's last token, so the default suffix-first order falls back to psm there.
    assert service.config.fim_order == "spm" and service.config.token_healing
    local = build_fim_prompt(BLOCK_DOC, len(BLOCK_DOC), service.tokenizer, service.fim,
                             context_window=service.config.context_window, prefix_share=service.config.prefix_share,
                             order="psm")
    assert sent["prompt"] == local.text == result.prompt
    assert sent["model"] == MODEL  # from GET /v1/models: no backend.model given
    assert sent["max_tokens"] == 24 and sent["temperature"] == 0.0 and sent["stream"] is True
    fim = service.fim
    assert set(sent["stop_token_ids"]) == {*fim.eos_ids, fim.prefix_id, fim.suffix_id, fim.middle_id}
    assert "\n" not in sent["stop"]  # multi-line scope: no line-break stop
    assert len(sent["stop"]) == 4 and "<|endoftext|>" in sent["stop"]  # vLLM refuses more than 4
    assert result.text == "return a + b" and result.scope == "multi_line"
    assert result.stats["backend"] == fake.url and result.stats["draft"] == "remote"


def test_single_line_scope_sends_a_line_break_stop(make: Any, fake: FakeOpenAI) -> None:
    fake.pieces = ["1, ", "2)", "\nprint(", "result)\n"]
    result = make().complete(req(LINE_DOC))
    assert result.scope == "single_line" and fake.requests[-1]["stop"][0] == "\n"
    assert len(fake.requests[-1]["stop"]) == 4
    assert result.text == "1, 2)"


def test_extra_body_and_no_stop_token_ids(make: Any, fake: FakeOpenAI) -> None:
    make(extra_body={"top_k": 1, "seed": 3}, stop_token_ids=False, stream=False).complete(req(BLOCK_DOC))
    sent = fake.requests[-1]
    assert sent["top_k"] == 1 and sent["seed"] == 3 and "stop_token_ids" not in sent and sent["stream"] is False


def test_a_named_model_that_is_not_served_fails_the_load(make: Any) -> None:
    with pytest.raises(UserError, match=r"serves fake-coder, not 'other'"):
        make(model="other")


# --------------------------------------------------------------------------------------- stopping
def test_stop_rules_cut_the_stream_and_close_it(make: Any, fake: FakeOpenAI) -> None:
    """A dedent to column 0 ends a function body: the service stops reading there and the server sees
    the connection close long before its 200 further lines."""
    fake.pieces = ["return a", " + b\n", "\n", "def other():\n", *[f"    x{i} = {i}\n" for i in range(200)]]
    fake.piece_delay_s = 0.02
    result = make().complete(req(BLOCK_DOC))
    assert result.text == "return a + b" and result.stop_reason == "syntax"
    assert fake.disconnected.wait(3.0) and fake.finished_streams == 0 and fake.events_sent < 100


def test_markers_spelled_as_text_end_the_completion(make: Any, fake: FakeOpenAI) -> None:
    fake.pieces = ["return a + b", "<|fim_prefix|>", "garbage"]
    assert make().complete(req(BLOCK_DOC)).text == "return a + b"


def test_streamed_text_reaches_on_text(make: Any, fake: FakeOpenAI) -> None:
    seen: list[str] = []
    make().complete(req(BLOCK_DOC), on_text=seen.append)
    assert seen[0] == "return" and seen[-1].startswith("return a + b")


# -------------------------------------------------------------------------------- cache and stats
def test_typing_through_is_answered_without_the_server(make: Any, fake: FakeOpenAI) -> None:
    service = make()
    first = service.complete(req(BLOCK_DOC))
    assert first.text == "return a + b"
    sent = len(fake.requests)
    again = service.complete(req(BLOCK_DOC + "retu"))
    assert again.from_cache and again.text == "rn a + b" and len(fake.requests) == sent
    stats = service.recent_stats()
    assert stats[0]["backend"] == fake.url and stats[0]["finish_reason"] == "stop" and stats[1]["from_cache"]


def test_scope_none_sends_nothing(make: Any, fake: FakeOpenAI) -> None:
    service = make()
    result = service.complete(CompletionRequest(text="value = compute", offset=len("value = com"), path="a.py"))
    assert result.stop_reason == "scope_none" and not fake.requests


# ----------------------------------------------------------------------------- cancel and errors
def test_cancel_aborts_the_request(make: Any, fake: FakeOpenAI) -> None:
    fake.pieces = [f"x{i} " for i in range(300)]
    fake.piece_delay_s = 0.02
    service = make()
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    result = service.complete(req(BLOCK_DOC), cancel=cancel)
    assert result.cancelled and result.stop_reason == "cancelled" and result.text == ""
    assert fake.disconnected.wait(3.0) and fake.finished_streams == 0
    fake.pieces, fake.piece_delay_s = ["return a + b\n"], 0.0
    assert not service.complete(req(BLOCK_DOC + "r")).from_cache  # nothing was remembered


@pytest.mark.parametrize(("behaviour", "words"), [("error500", "HTTP 500"), ("garbage", "not JSON")])
def test_server_errors_raise_one_clear_line_and_the_service_recovers(
    make: Any, fake: FakeOpenAI, behaviour: str, words: str
) -> None:
    service = make()
    fake.behaviour = behaviour
    with pytest.raises(BackendError, match=words) as info:
        service.complete(req(BLOCK_DOC))
    assert "\n" not in str(info.value)
    fake.behaviour = "stream"
    assert service.complete(req(BLOCK_DOC, doc="file:///b.py")).text == "return a + b"


def test_a_server_down_at_load_is_not_fatal(tiny_models: tuple[Path, Path], caplog: pytest.LogCaptureFixture) -> None:
    port = closed_port()
    cfg = ServiceConfig(model=str(tiny_models[0]), backend=RemoteSettings(url=f"http://127.0.0.1:{port}"))
    with caplog.at_level(logging.WARNING, logger="dspark_lsp"):
        service = CompletionService.load(cfg)
    assert any("not answering yet" in r.getMessage() and "connection refused" in r.getMessage() for r in caplog.records)
    with pytest.raises(BackendError, match="connection refused"):
        service.complete(req(BLOCK_DOC))


def test_a_missing_tokenizer_is_a_clear_load_error(tmp_path: Path) -> None:
    cfg = ServiceConfig(model=str(tmp_path / "nothing"), backend=RemoteSettings(url="http://127.0.0.1:1"))
    with pytest.raises(UserError, match="does not exist"):
        CompletionService.load(cfg)


# ------------------------------------------------------------------------------------- settings
def test_backend_setting_reaches_service_config() -> None:
    cfg, problems = ServiceConfig.from_settings({"backend": {"url": "http://gpu:8000", "timeoutMs": 2000}, "maxNewTokens": 32})
    assert problems == [] and cfg.backend == RemoteSettings(url="http://gpu:8000", timeout_ms=2000)
    assert cfg.max_new_tokens == 32 and cfg.problems() == []
    local, _ = ServiceConfig.from_settings({})
    assert local.backend is None and cfg.needs_reload(local) and local.needs_reload(cfg)
    same, _ = ServiceConfig.from_settings({"backend": "http://gpu:8000"})
    other, _ = ServiceConfig.from_settings({"backend": "http://gpu:8001"})
    assert same.needs_reload(other) and not same.needs_reload(ServiceConfig.from_settings({"backend": "http://gpu:8000"})[0])


def test_a_bad_backend_setting_is_reported_and_the_local_engine_kept() -> None:
    cfg, problems = ServiceConfig.from_settings({"backend": {"url": "gpu:8000"}})
    assert cfg.backend is None
    assert problems == ["backend.url must be an http:// or https:// URL with a host, got 'gpu:8000'; using the local engine"]


def test_update_config_changes_knobs_without_reloading(make: Any, fake: FakeOpenAI) -> None:
    from dataclasses import replace

    service = make()
    service.update_config(replace(service.config, max_new_tokens=7, completion_cache=False))
    service.complete(req(BLOCK_DOC))
    assert fake.requests[-1]["max_tokens"] == 7
    assert not service.complete(req(BLOCK_DOC + "ret")).from_cache


# ------------------------------------------------------------------------------ CLI and bench flags
def test_bench_backend_flags_reach_the_replay_settings() -> None:
    from dspark_lsp.bench.lsp_replay import server_settings
    from dspark_lsp.cli import build_parser

    args = build_parser().parse_args(
        ["bench", "--lsp", "--backend-url", "http://gpu:8000", "--backend-model", "m", "--backend-timeout-ms", "900"]
    )
    assert server_settings(args)["backend"] == {"url": "http://gpu:8000", "model": "m", "timeoutMs": 900}
    assert "backend" not in server_settings(build_parser().parse_args(["bench", "--lsp"]))


def test_cli_complete_through_a_backend(
    fake: FakeOpenAI, tiny_models: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dspark_lsp.cli import main

    source = tmp_path / "a.py"
    source.write_text(BLOCK_DOC)
    code = main(["complete", str(source), "--line", "1", "--col", "4", "--model", str(tiny_models[0]),
                 "--backend-url", fake.url])
    out = capsys.readouterr()
    assert code == 0 and out.out == "return a + b\n" and f"from {fake.url}" in out.err
    assert main(["complete", str(source), "--line", "1", "--col", "4", "--model", str(tiny_models[0]),
                 "--backend-url", "gpu:8000"]) == 2
    assert "backend.url must be an http:// or https:// URL" in capsys.readouterr().err

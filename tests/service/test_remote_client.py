"""The OpenAI-compatible completions client against a fake server on loopback (tests/helpers/openai_fake.py):
streaming, one JSON answer, HTTP errors, answers that are not JSON, slow servers and the timeout,
cancellation and our own cut mid-stream (the server must see the connection close), and the setting."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from openai_fake import MODEL, FakeOpenAI

from dspark_lsp.errors import UserError
from dspark_lsp.remote.client import BackendError, CompletionsClient
from dspark_lsp.remote.config import RemoteSettings, parse_backend

pytestmark = pytest.mark.timeout(60)


@pytest.fixture()
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


def client_for(fake: FakeOpenAI, **kw: object) -> CompletionsClient:
    return CompletionsClient(RemoteSettings(url=fake.url, **kw))  # type: ignore[arg-type]


def body(**kw: object) -> dict[str, object]:
    return {"model": MODEL, "prompt": "<|fim_prefix|>def f(a, b):\n    <|fim_suffix|><|fim_middle|>",
            "max_tokens": 16, "temperature": 0.0, "stream": True, **kw}


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


# ----------------------------------------------------------------------------------------- answers
def test_streaming_text_arrives_piece_by_piece(fake: FakeOpenAI) -> None:
    seen: list[str] = []
    answer = client_for(fake).complete(body(), on_text=lambda t: seen.append(t) or False)
    assert answer.text == "return a + b\n"
    assert seen == ["return", "return a", "return a +", "return a + b", "return a + b\n"]
    assert answer.finish_reason == "stop" and not answer.cancelled and not answer.cut
    assert answer.completion_tokens == 5 and answer.prompt_tokens == 7
    assert answer.first_text_ms is not None and answer.first_text_ms >= 0
    assert fake.requests[0]["prompt"] == body()["prompt"]
    assert fake.wait_finished(1) and fake.finished_streams == 1


def test_stop_strings_reach_the_server(fake: FakeOpenAI) -> None:
    answer = client_for(fake).complete(body(stop=[" +"]))
    assert answer.text == "return a"
    assert fake.requests[0]["stop"] == [" +"]


def test_one_json_answer(fake: FakeOpenAI) -> None:
    fake.behaviour = "json"
    seen: list[str] = []
    answer = client_for(fake, stream=False).complete(body(stream=False), on_text=lambda t: seen.append(t) or False)
    assert answer.text == "return a + b\n" and answer.finish_reason == "stop"
    assert seen == ["return a + b\n"] and answer.completion_tokens == 5


def test_models_list(fake: FakeOpenAI) -> None:
    fake.models = ["a", "b"]
    assert client_for(fake).models() == ["a", "b"]


def test_url_with_v1_and_api_key_header(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPARK_TEST_KEY", "sk-secret")
    settings = RemoteSettings(url=fake.url + "/v1/", api_key_env="DSPARK_TEST_KEY")
    answer = CompletionsClient(settings, settings.api_key()).complete(body())
    assert answer.text == "return a + b\n"
    assert fake.headers[0]["Authorization"] == "Bearer sk-secret"
    assert "sk-secret" not in settings.describe()


def test_missing_api_key_variable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSPARK_NO_SUCH_KEY", raising=False)
    with pytest.raises(UserError, match="DSPARK_NO_SUCH_KEY.*not set"):
        RemoteSettings(url="http://127.0.0.1:1", api_key_env="DSPARK_NO_SUCH_KEY").api_key()


# ------------------------------------------------------------------------------------------ errors
def test_http_500_says_status_and_message(fake: FakeOpenAI) -> None:
    fake.behaviour = "error500"
    with pytest.raises(BackendError) as info:
        client_for(fake).complete(body())
    message = str(info.value)
    assert "HTTP 500" in message and "CUDA out of memory (fake)" in message and "\n" not in message


def test_unknown_model_is_a_404_with_a_hint(fake: FakeOpenAI) -> None:
    with pytest.raises(BackendError, match=r"HTTP 404.*does not exist.*backend\.model"):
        client_for(fake).complete(body(model="nope"))


@pytest.mark.parametrize("behaviour", ["garbage", "garbage_stream"])
def test_an_answer_that_is_not_json(fake: FakeOpenAI, behaviour: str) -> None:
    fake.behaviour = behaviour
    with pytest.raises(BackendError, match="not JSON"):
        client_for(fake).complete(body())


def test_json_without_choices(fake: FakeOpenAI) -> None:
    fake.behaviour = "no_choices"
    with pytest.raises(BackendError, match="no choices"):
        client_for(fake).complete(body(stream=False))


def test_connection_refused() -> None:
    client = CompletionsClient(RemoteSettings(url=f"http://127.0.0.1:{closed_port()}"))
    with pytest.raises(BackendError, match="connection refused"):
        client.complete(body())
    with pytest.raises(BackendError, match="connection refused"):
        client.models()


def test_a_slow_server_times_out_on_time(fake: FakeOpenAI) -> None:
    fake.behaviour = "slow"
    fake.delay_s = 3.0
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"no complete answer within 0\.3 s"):
        client_for(fake, timeout_ms=300).complete(body())
    assert time.monotonic() - started < 1.5


def test_a_stream_slower_than_the_timeout(fake: FakeOpenAI) -> None:
    """The deadline is for the whole answer, not each read: a trickle of events cannot keep it alive."""
    fake.pieces = ["x"] * 100
    fake.piece_delay_s = 0.05
    started = time.monotonic()
    with pytest.raises(BackendError, match="within 0.5 s"):
        client_for(fake, timeout_ms=500).complete(body())
    assert time.monotonic() - started < 1.5
    assert fake.disconnected.wait(3.0)


def test_a_slow_server_within_the_timeout_answers(fake: FakeOpenAI) -> None:
    fake.behaviour = "slow"
    fake.delay_s = 0.3
    assert client_for(fake, timeout_ms=3000).complete(body()).text == "return a + b\n"


# ------------------------------------------------------------------------------------ cancellation
def test_cancel_mid_stream_closes_the_connection(fake: FakeOpenAI) -> None:
    fake.pieces = [f"t{i} " for i in range(200)]
    fake.piece_delay_s = 0.02  # 4 s of stream
    cancel = threading.Event()
    seen: list[str] = []

    def on_text(text: str) -> bool:
        seen.append(text)
        if len(seen) == 3:
            threading.Timer(0.05, cancel.set).start()
        return False

    started = time.monotonic()
    answer = client_for(fake, timeout_ms=30_000).complete(body(), cancel=cancel, on_text=on_text)
    elapsed = time.monotonic() - started
    assert answer.cancelled and elapsed < 1.5
    assert fake.disconnected.wait(3.0), "the server never saw the connection close"
    assert fake.events_sent < 150 and fake.finished_streams == 0


def test_cancel_before_the_answer_starts(fake: FakeOpenAI) -> None:
    fake.behaviour = "slow"
    fake.delay_s = 2.0
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    started = time.monotonic()
    answer = client_for(fake, timeout_ms=30_000).complete(body(), cancel=cancel)
    assert answer.cancelled and answer.text == "" and time.monotonic() - started < 1.0


def test_our_own_cut_stops_reading_and_closes(fake: FakeOpenAI) -> None:
    fake.pieces = ["a\n", "b\n", *[f"line {i}\n" for i in range(200)]]
    fake.piece_delay_s = 0.02
    answer = client_for(fake).complete(body(), on_text=lambda t: t.count("\n") >= 2)
    assert answer.cut and not answer.cancelled and answer.text == "a\nb\n"
    assert fake.disconnected.wait(3.0) and fake.finished_streams == 0


# --------------------------------------------------------------------------------------- settings
def test_backend_setting_forms() -> None:
    assert parse_backend(None) == (None, []) and parse_backend("local") == (None, [])
    s, problems = parse_backend("http://gpu:8000")
    assert s == RemoteSettings(url="http://gpu:8000") and problems == []
    s, problems = parse_backend({"url": "https://gpu/v1", "model": "m", "apiKeyEnv": "KEY", "timeoutMs": 2000,
                                 "stream": False, "stopTokenIds": False, "extraBody": {"top_k": 1}, "tokenizer": "t"})
    assert problems == [] and s is not None
    assert (s.model, s.api_key_env, s.timeout_ms, s.stream, s.stop_token_ids, s.extra_body, s.tokenizer) == (
        "m", "KEY", 2000, False, False, {"top_k": 1}, "t")
    assert s.endpoint("completions") == "https://gpu/v1/completions"
    assert RemoteSettings(url="http://h:1/").endpoint("models") == "http://h:1/v1/models"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (42, "must be an object"),
        ({"model": "m"}, "needs a url"),
        ({"url": "ftp://x"}, "http:// or https://"),
        ({"url": "http://h:notaport"}, "not a URL"),
        ({"url": "http://h", "timeoutMs": 5}, "timeoutMs must be an integer"),
        ({"url": "http://h", "timeoutMs": True}, "timeoutMs must be an integer"),
        ({"url": "http://h", "apiKeyEnv": "not a name"}, "apiKeyEnv"),
        ({"url": "http://h", "stream": "yes"}, "stream must be true or false"),
        ({"url": "http://h", "extraBody": {"prompt": "x"}}, "may not set prompt"),
        ({"url": "http://h", "extraBody": []}, "extraBody must be an object"),
    ],
)
def test_bad_backend_settings_are_reported(value: object, words: str) -> None:
    settings, problems = parse_backend(value)
    assert settings is None
    assert any(words in p for p in problems), problems
    assert all("local engine" in p for p in problems if words in p)


def test_unknown_backend_key_is_reported_but_kept() -> None:
    settings, problems = parse_backend({"url": "http://h", "colour": "red"})
    assert settings == RemoteSettings(url="http://h")
    assert problems == ["unknown backend setting 'colour' ignored"]

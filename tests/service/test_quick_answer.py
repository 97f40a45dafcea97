"""Quick answers (quickAnswerMs, dspark_lsp/quick_answer.py): an automatic request may answer with its
finished lines once the deadline passed; the decode goes on in the background and the whole completion,
the same as one asked in full, is then typed through from the cache."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dspark_lsp.completion import Prepared
from dspark_lsp.contract import CompletionRequest
from dspark_lsp.models import cache
from dspark_lsp.quick_answer import EarlyStop, Unfinished, has_finished_line

MODEL = "qwen2.5-coder-0.5b"
MANIFEST = cache.model_dir(cache.cache_root(), MODEL) / "dspark-model.json"

FIB = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    '


class Tracker:
    def __init__(self, stop_at: int | None = None) -> None:
        self.stop_at = stop_at

    def stop_index(self, text: str) -> int | None:
        return self.stop_at


def shown(text: str) -> str:
    # What the answer would show: its finished lines, less a block header with no body yet.
    lines = text.split("\n")[:-1]
    while lines and lines[-1].rstrip().endswith(":"):
        lines.pop()
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("text", "finished"),
    [("", False), ("x = 1", False), ("x = 1\n", True), ("\n    \n", False), ("\n    if n < 2:\n        ret", True)],
)
def test_a_finished_line_has_code_and_a_line_break(text: str, finished: bool) -> None:
    assert has_finished_line(text) is finished


def test_the_deadline_stops_only_after_a_finished_line() -> None:
    past, future = time.perf_counter() - 1, time.perf_counter() + 60
    assert EarlyStop(Tracker(), None, shown)("x = 1\ny") is False  # no deadline: never early
    assert EarlyStop(Tracker(), future, shown)("x = 1\ny") is False
    waiting = EarlyStop(Tracker(), past, shown)
    assert waiting("x = fo") is False and not waiting.hit  # the first line is never shown cut
    assert waiting("if x:\n    y") is False and not waiting.hit  # nothing the answer would show
    assert waiting("if x:\n    y = 1\n") is True and waiting.hit
    syntax = EarlyStop(Tracker(stop_at=3), past, shown)
    assert syntax("abc") is True and not syntax.hit  # the syntax's own stop is not an early answer


def test_an_unfinished_answer_is_still_ahead_while_the_user_types_through_it() -> None:
    prep = Prepared(CompletionRequest("ab", 1), 0.0, "a", "b", None, None, None)  # type: ignore[arg-type]
    job = Unfinished(prep, (1, 2), "xy = 1\nz")
    assert job.still_ahead("a", "b")
    assert job.still_ahead("axy = ", "b")  # typed along the text decoded so far
    assert job.still_ahead("axy = 1\nz = 2", "b")  # typed past it
    assert not job.still_ahead("axq", "b")  # typed something else
    assert not job.still_ahead("axy", "c")  # the text after the cursor changed
    assert not job.still_ahead("", "ab")  # the cursor moved back


def test_an_unfinished_first_line_is_never_cut(tiny_models: tuple[Path, Path]) -> None:
    # The tiny random model writes no line breaks: however early the deadline, the answer is the whole
    # completion, as asked in full.
    from dspark_lsp.service import CompletionService, ServiceConfig

    service = CompletionService.load(ServiceConfig(model=str(tiny_models[0]), draft_model="ngram", max_new_tokens=24,
                                                   quick_answer_ms=1, completion_cache=False))
    doc = "def f(x):\n    "
    full = service.complete(CompletionRequest(doc, len(doc), path="a.py", doc_key="file:///a.py"))
    quick = service.complete(CompletionRequest(doc, len(doc), path="a.py", doc_key="file:///a.py", automatic=True))
    assert full.text and quick.text == full.text and quick.stop_reason == full.stop_reason != "deadline"


@pytest.mark.real_model
@pytest.mark.skipif(not MANIFEST.is_file(), reason=f"real model not prepared; run: dspark-lsp models prepare {MODEL}")
def test_an_early_answer_then_its_continuation_give_the_whole_completion() -> None:
    from dspark_lsp.service import CompletionService, ServiceConfig

    service = CompletionService.load(ServiceConfig(model=MODEL, max_new_tokens=48, quick_answer_ms=1))

    def request(doc_key: str, typed: str = "", automatic: bool = True) -> CompletionRequest:
        text = FIB + typed
        return CompletionRequest(text, len(text), path="fib.py", doc_key=doc_key, automatic=automatic)

    full = service.complete(request("file:///full.py", automatic=False)).text
    assert full.count("\n") >= 1, f"a multi-line completion is wanted here: {full!r}"
    early = service.complete(request("file:///early.py"))
    assert early.stop_reason == "deadline"
    assert full.startswith(early.text) and len(early.text) < len(full)
    assert full[len(early.text)] == "\n", "the answer ends with a finished line"
    # Typing through the whole answer: nothing cached beyond it until the continuation ran.
    assert service.finish_early_answer(request("file:///early.py", early.text)) > 0
    rest = service.complete(request("file:///early.py", early.text))
    assert rest.from_cache and early.text + rest.text == full
    assert service.finish_early_answer(request("file:///early.py", early.text)) == 0, "finished: nothing left"

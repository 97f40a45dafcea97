"""The eval's per-problem runner and report on fakes (no model): what each figure counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dspark_lsp.contract import CompletionStats
from dspark_lsp.evaluation.problems import Problem
from dspark_lsp.evaluation.report import build_report, format_table
from dspark_lsp.evaluation.runner import (
    LLAMACPP,
    ORACLE,
    RAW,
    SERVICE,
    Attempt,
    Record,
    RunConfig,
    evaluate_problem,
)

PROMPT = "def add(a, b):\n"
SUFFIX = "\n\ndef twice(x):\n    return add(x, x)\n"
TEST = "def check(candidate):\n    assert candidate(1, 2) == 3\n"


def problem(pid: str = "p0", tests: bool = True) -> Problem:
    return Problem(
        id=pid,
        set="humaneval-single" if tests else "corpus",
        language="python",
        text=PROMPT + "\n" + SUFFIX,
        offset=len(PROMPT),
        reference="    return a + b",
        path="problem.py",
        test=TEST if tests else None,
        entry_point="add" if tests else None,
    )


@dataclass
class _Result:
    text: str
    scope: str = "multi_line"
    stop_reason: str = "syntax"
    completion_ids: list[int] = field(default_factory=list)
    # The service's figures (contract.CompletionStats); the eval reads its prompt and prefill sizes.
    stats: CompletionStats = field(default_factory=lambda: CompletionStats(prompt_tokens=12, t_prefill_ms=3.5, tokens=4))


class FakeService:
    """Answers every request with ``answer`` and records what it was asked (the server's request)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.requests: list[Any] = []
        self.cleared = 0
        outer = self

        class _Cache:
            def clear(self) -> None:
                outer.cleared += 1

        self.prefix_cache = _Cache()

    def complete(self, req: Any) -> _Result:
        self.requests.append(req)
        return _Result(self.answer)


@dataclass
class _Peer:
    text: str
    latency_ms: float = 12.0

    def complete(self, text: str, offset: int) -> Any:
        return self


NO_CEILINGS = RunConfig(ceilings=False, timeout_s=10.0)


def test_a_right_completion_counts_as_right() -> None:
    svc = FakeService("    return a + b")
    rec = evaluate_problem(svc, problem(), NO_CEILINGS, peer=_Peer("    return b + a"))
    a = rec.attempts[SERVICE]
    assert a.passed is True and a.exact and a.similarity == 1.0 and not a.empty
    assert not a.too_long and not a.too_short and a.latency_ms is not None
    # Where the time went: the service's own prompt size, prefill time and decoded tokens.
    assert (a.prompt_tokens, a.prefill_ms, a.tokens) == (12, 3.5, 4)
    peer = rec.attempts[LLAMACPP]
    assert peer.passed is True and not peer.exact and peer.latency_ms == 12.0
    # The request is the server's: whole document, cursor, language, path, a key of its own; cold cache.
    (req,) = svc.requests
    assert req.text == PROMPT + "\n" + SUFFIX and req.offset == len(PROMPT)
    assert req.language_id == "python" and req.path == "problem.py" and req.doc_key.startswith("eval://")
    assert svc.cleared == 1
    assert RAW not in rec.attempts and ORACLE not in rec.attempts


def test_wrong_empty_and_overlong_completions() -> None:
    wrong = evaluate_problem(FakeService("    return a - b"), problem(), NO_CEILINGS).attempts[SERVICE]
    assert wrong.passed is False and not wrong.exact and 0 < wrong.similarity < 1
    empty = evaluate_problem(FakeService(""), problem(), NO_CEILINGS).attempts[SERVICE]
    assert empty.empty and empty.too_short and empty.passed is False and empty.similarity == 0.0
    long = evaluate_problem(FakeService("    return a + b\n\nprint(add(1, 2))"), problem(), NO_CEILINGS)
    assert long.attempts[SERVICE].too_long and long.attempts[SERVICE].passed is True
    untested = evaluate_problem(FakeService("    return a + b"), problem(tests=False), NO_CEILINGS)
    assert untested.attempts[SERVICE].passed is None and untested.attempts[SERVICE].exact


def test_report_aggregates_per_group() -> None:
    recs = [
        evaluate_problem(FakeService("    return a + b"), problem("a"), NO_CEILINGS),
        evaluate_problem(FakeService(""), problem("b"), NO_CEILINGS),
        evaluate_problem(FakeService("    return a + b"), problem("c", tests=False), NO_CEILINGS),
    ]
    report = build_report(recs, {"seed": 0}, {"llamacpp_infill": "absent"})
    single = report["groups"]["humaneval-single"]["methods"][SERVICE]
    assert single["n"] == 2 and single["pass_at_1"] == 0.5 and single["empty"] == 0.5
    assert single["exact_match"] == 0.5 and single["too_short"] == 0.5 and single["tested"] == 2
    corpus = report["groups"]["corpus-python"]["methods"][SERVICE]
    assert corpus["pass_at_1"] is None and corpus["exact_match"] == 1.0
    assert report["groups"]["all"]["problems"] == 3
    assert [p["id"] for p in report["problems"]] == ["a", "b", "c"]
    table = format_table(report)
    assert "humaneval-single" in table and "corpus-python" in table and "llamacpp_infill skipped" in table


def _attempt(text: str, passed: bool | None) -> Attempt:
    return Attempt(
        text=text, passed=passed, exact=False, similarity=0.0, completion_lines=1, reference_lines=1
    )


def test_empty_answers_are_counted_against_the_oracle_cut() -> None:
    """Four kinds of empty answer: the oracle cut empty too, the oracle's cut failing (every answer fails),
    the oracle's cut passing where the empty answer passes as well, and the one that loses a pass."""
    cases = [
        ("both-empty", ("", False), ("", False)),
        ("oracle-fails", ("", False), ("    return b", False)),
        ("both-pass", ("", True), ("    return a + b", True)),
        ("lost", ("", False), ("    return a + b", True)),
        ("not-empty", ("    return a", False), ("    return a + b", True)),
    ]
    recs = [
        Record(problem(pid), "multi_line", "syntax", {SERVICE: _attempt(*mine), ORACLE: _attempt(*oracle)})
        for pid, mine, oracle in cases
    ]
    report = build_report(recs, {"seed": 0}, {})
    e = report["groups"]["humaneval-single"]["empty_answers"]
    assert e == {
        "service_empty": 4,
        "oracle_empty": 1,
        "empty_oracle_not": 3,
        "empty_oracle_passes": 2,
        "lost_pass": 1,
    }
    assert (
        "4 empty answers (3 where the oracle cut is not empty, 2 where it passes, 1 losing a pass)"
        in format_table(report)
    )
    # Without the oracle (--no-ceilings) there is nothing to compare with.
    bare = build_report([Record(problem(), "multi_line", "syntax", {SERVICE: _attempt("", False)})], {}, {})
    assert bare["groups"]["humaneval-single"]["empty_answers"] is None

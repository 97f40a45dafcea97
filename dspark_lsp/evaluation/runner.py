"""One hole, every way the eval completes it: the service (what the editor gets), the model's raw output,
the oracle cut of that output, and llama.cpp's infill (when available).

The service call is exactly the server's: a ``CompletionRequest`` with the document, cursor, language id,
path and a document key, through ``CompletionService.complete`` (scope, prompt budget, stops, clean-up).
Each hole is a fresh document for it: its own key (so no completion cache or scheduler state carries
over) and an empty prefix cache (so the latency is a first request's, the prefill included).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dspark_lsp.evaluation.execution import DEFAULT_TIMEOUT_S, passes
from dspark_lsp.evaluation.metrics import edit_similarity, exact_match, length_of
from dspark_lsp.evaluation.oracle import oracle_cut
from dspark_lsp.evaluation.problems import Problem
from dspark_lsp.prompt import text_after_heal

SERVICE, RAW, ORACLE, LLAMACPP = "service", "raw", "oracle_cut", "llamacpp_infill"
METHODS = (SERVICE, RAW, ORACLE, LLAMACPP)


@dataclass
class Attempt:
    """One completion of a hole and how it measures against the hole."""

    text: str
    passed: bool | None  # None where the problem has no tests
    exact: bool
    similarity: float
    completion_lines: int
    reference_lines: int
    latency_ms: float | None = None
    # Where the service's latency went (its request stats; None for the other methods): a cold hole's
    # time is its prompt's prefill plus its decode, and the two answer to different fixes.
    prompt_tokens: int | None = None
    prefill_ms: float | None = None
    tokens: int | None = None  # tokens decoded

    @property
    def empty(self) -> bool:
        return not self.text.strip()

    @property
    def too_long(self) -> bool:
        return self.completion_lines > self.reference_lines

    @property
    def too_short(self) -> bool:
        return self.completion_lines < self.reference_lines


@dataclass
class Record:
    problem: Problem
    scope: str
    stop_reason: str
    attempts: dict[str, Attempt] = field(default_factory=dict)
    # The service's ids are the start of the raw output (both greedy on the same prompt): False flags a
    # service that changed the model's output, not only where it ends.
    service_within_raw: bool | None = None
    raw_ids: list[int] = field(default_factory=list)  # the raw output's tokens (to re-cut it offline)
    heal: str = ""  # the prompt's backed-off text (token healing), which raw_ids spell first
    reused: bool = False  # copied from a saved run whose prompt for this hole was the same (--reuse)


class Completer(Protocol):
    """What the peer needs to offer (``evaluation.infill.InfillPeer``, or a test's fake)."""

    def complete(self, text: str, offset: int) -> Any: ...


@dataclass(frozen=True)
class RunConfig:
    raw_max_tokens: int = 128  # how far the raw output may run before its FIM end token
    timeout_s: float = DEFAULT_TIMEOUT_S  # per test run
    ceilings: bool = True  # the raw output and the oracle cut


def judge(problem: Problem, text: str, latency_ms: float | None, passed: bool | None) -> Attempt:
    """The text metrics of ``text``; ``passed`` is the test verdict (None where there are no tests)."""
    n = length_of(text, problem.reference)
    return Attempt(
        text=text,
        passed=passed,
        exact=exact_match(text, problem.reference),
        similarity=edit_similarity(text, problem.reference),
        completion_lines=n.completion_lines,
        reference_lines=n.reference_lines,
        latency_ms=latency_ms,
    )


def check_of(problem: Problem, timeout_s: float) -> Callable[[str], bool]:
    def check(completion: str) -> bool:
        assert problem.test and problem.entry_point
        return passes(problem.text, problem.offset, completion, problem.test, problem.entry_point, timeout_s)

    return check


def doc_key(problem: Problem) -> str:
    return f"eval://{problem.set}/{problem.id}"


def request_of(problem: Problem) -> Any:
    """The server's request for ``problem``: its document, cursor, language id, path and key."""
    from dspark_lsp.service import CompletionRequest

    return CompletionRequest(
        text=problem.text,
        offset=problem.offset,
        language_id=problem.language if problem.language != "plain" else None,
        path=problem.path,
        doc_key=doc_key(problem),
    )


def service_prompt(service: Any, problem: Problem, config: Any = None) -> Any:
    """The FIM prompt the service decodes ``problem`` from (window, context budget, share and order of
    ``config``, default the service's own): the raw output and --reuse must see the service's exact ids."""
    from dspark_lsp.syntax import SyntaxDocument, detect_language

    req = request_of(problem)
    doc = SyntaxDocument(req.text, detect_language(req.path, req.language_id))
    return service.prompt_for(req, doc, config=config)


def service_attempt(service: Any, problem: Problem, cfg: RunConfig) -> tuple[Attempt, Any]:
    service.prefix_cache.clear()  # a first request: its latency includes the prefill
    t0 = time.perf_counter()
    result = service.complete(request_of(problem))
    latency = (time.perf_counter() - t0) * 1000
    passed = check_of(problem, cfg.timeout_s)(result.text) if problem.has_tests else None
    attempt = judge(problem, result.text, latency, passed)
    st = result.stats
    attempt.prompt_tokens, attempt.prefill_ms, attempt.tokens = st.prompt_tokens, st.t_prefill_ms, st.tokens
    return attempt, result


def raw_output(service: Any, problem: Problem, max_tokens: int) -> tuple[str, list[int], str]:
    """The model's greedy continuation of the service's own prompt until its FIM end token (or
    ``max_tokens``), with no stop rule and no clean-up, and the prompt's healed text (its tokens are the
    first ones; the text returned starts after it). The decoder is lossless, so the service's draft only
    makes it sooner; the prompt's prefill comes from the prefix cache the service call just filled."""
    cfg = service.config
    fp = service_prompt(service, problem)
    fim = service.fim
    res = service.decoder.generate(
        fp.ids,
        config=cfg.decode_config(max_tokens, service.verify_cost_ms, service.pad_to),
        draft=service.draft,
        eos_ids=(*fim.eos_ids, fim.prefix_id, fim.suffix_id, fim.middle_id),
        heal=service.decoding.heal_for(fp.heal, []),
    )
    text = str(
        service.tokenizer.decode(res.tokens, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    )
    return text_after_heal(text.rstrip("\ufffd"), fp.heal), list(res.tokens), fp.heal


def evaluate_problem(service: Any, problem: Problem, cfg: RunConfig, peer: Completer | None = None) -> Record:
    attempt, result = service_attempt(service, problem, cfg)
    rec = Record(problem, result.scope, result.stop_reason, {SERVICE: attempt})
    check = check_of(problem, cfg.timeout_s) if problem.has_tests else None
    if cfg.ceilings:
        raw, raw_ids, rec.heal = raw_output(service, problem, cfg.raw_max_tokens)
        rec.attempts[RAW] = judge(problem, raw, None, check(raw) if check else None)
        cut = oracle_cut(raw, problem.reference, check)
        rec.attempts[ORACLE] = judge(problem, cut.text, None, cut.passed)
        ids = list(result.completion_ids)
        rec.service_within_raw = raw_ids[: len(ids)] == ids
        rec.raw_ids = raw_ids
    if peer is not None:
        got = peer.complete(problem.text, problem.offset)
        rec.attempts[LLAMACPP] = judge(problem, got.text, got.latency_ms, check(got.text) if check else None)
    return rec

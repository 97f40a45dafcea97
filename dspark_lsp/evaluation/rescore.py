"""Re-cut a saved eval's raw outputs with the current stop rules, scope and clean-up: no model needed.

The service's output is the start of the raw output (greedy, lossless, same prompt; the report checks it),
so what the service would show today is the raw output's first ``max_new_tokens`` tokens passed through
today's scope decision, stop rules and clean-up. This measures a stop/scope change on the very same
model outputs in seconds. Latency is not re-measured (the decode would stop elsewhere).
"""

from __future__ import annotations

from typing import Any

from dspark_lsp.errors import UserError
from dspark_lsp.evaluation.execution import DEFAULT_TIMEOUT_S
from dspark_lsp.evaluation.problems import Problem
from dspark_lsp.evaluation.report import attempt_from_json
from dspark_lsp.evaluation.runner import SERVICE, Record, check_of, judge
from dspark_lsp.prompt import text_after_heal


def recut(
    problem: Problem, raw_ids: list[int], tokenizer: Any, max_new_tokens: int, multiline: str, heal: str = ""
) -> tuple[str, str]:
    """(text, scope) the service shows for ``problem`` when the model's greedy output is ``raw_ids``
    (which spell ``heal``, the prompt's backed-off text, first)."""
    from dspark_lsp.service import decide_scope, finish_text
    from dspark_lsp.syntax import Scope, SyntaxDocument, detect_language

    language = detect_language(problem.path, problem.language if problem.language != "plain" else None)
    doc = SyntaxDocument(problem.text, language)
    scope = decide_scope(doc, problem.offset, multiline)
    if scope is Scope.NONE:
        return "", scope.value
    ids = raw_ids[:max_new_tokens]
    full = str(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
    tracker = doc.generation(problem.offset, scope, continue_lines=multiline == "auto")
    # The raw output went on past the budget: the service's decode ended on it (unless a stop came first,
    # which the tracker finds either way).
    capped = len(raw_ids) > max_new_tokens
    full = text_after_heal(full.rstrip("\ufffd"), heal)
    text, _ = finish_text(tracker, full, problem.text[problem.offset :], capped=capped)
    return text, tracker.scope.value


def rescore(
    saved: dict[str, Any],
    problems: list[Problem],
    tokenizer: Any,
    *,
    max_new_tokens: int,
    multiline: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tuple[list[Record], int]:
    """Records with the service attempt re-cut (the saved ceilings kept) and how many texts changed."""
    by_key = {(p.set, p.id): p for p in problems}
    records: list[Record] = []
    changed = 0
    for item in saved.get("problems", []):
        problem = by_key.get((item["set"], item["id"]))
        if problem is None:
            raise UserError(f"--rescore: problem {item['set']} {item['id']} is not among the loaded problems")
        if not item.get("raw_ids") and item["attempts"].get("raw", {}).get("text"):
            raise UserError(
                "--rescore needs a report made with the ceilings on (it re-cuts their raw output)"
            )
        heal = str(item.get("heal") or "")
        text, scope = recut(problem, list(item.get("raw_ids") or []), tokenizer, max_new_tokens, multiline, heal)
        old = item["attempts"][SERVICE]
        changed += text != old["text"]
        passed = check_of(problem, timeout_s)(text) if problem.has_tests else None
        if text == old["text"]:
            passed = old["passed"]  # the same text: no need to run its tests again
        rec = Record(problem, scope, "rescored", {SERVICE: judge(problem, text, None, passed)})
        for m, a in item["attempts"].items():
            if m != SERVICE:
                rec.attempts[m] = attempt_from_json(a)
        rec.raw_ids = list(item.get("raw_ids") or [])
        rec.heal = heal
        records.append(rec)
    return records, changed

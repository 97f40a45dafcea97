"""Aggregates per set and language (and overall), as JSON and as a table for a terminal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dspark_lsp.evaluation.metrics import mean, percentile
from dspark_lsp.evaluation.runner import METHODS, ORACLE, SERVICE, Attempt, Record


def group_of(rec: Record) -> str:
    """HumanEval sets are one language; corpus holes are grouped by language."""
    p = rec.problem
    return p.set if p.set.startswith("humaneval-") else f"{p.set}-{p.language}"


def _rate(flags: Iterable[bool]) -> float | None:
    f = list(flags)
    return round(sum(f) / len(f), 4) if f else None


def _round(v: float | None, digits: int = 4) -> float | None:
    return None if v is None else round(v, digits)


def summarise(attempts: list[Attempt]) -> dict[str, Any]:
    tested = [a.passed for a in attempts if a.passed is not None]
    latencies = [a.latency_ms for a in attempts if a.latency_ms is not None]
    prefills = [a.prefill_ms for a in attempts if a.prefill_ms is not None]
    prompts = [float(a.prompt_tokens) for a in attempts if a.prompt_tokens is not None]
    return {
        "n": len(attempts),
        "pass_at_1": _rate(bool(p) for p in tested),
        "tested": len(tested),
        "exact_match": _rate(a.exact for a in attempts),
        "edit_similarity": _round(mean([a.similarity for a in attempts])),
        "empty": _rate(a.empty for a in attempts),
        "too_long": _rate(a.too_long for a in attempts),
        "too_short": _rate(a.too_short for a in attempts),
        "latency_p50_ms": _round(percentile(latencies, 50), 1),
        "latency_p95_ms": _round(percentile(latencies, 95), 1),
        # A cold hole's share of latency in its prompt's prefill, and that prompt's size (service only).
        "prefill_p50_ms": _round(percentile(prefills, 50), 1) if prefills else None,
        "prompt_tokens_p50": _round(percentile(prompts, 50), 1) if prompts else None,
    }


def empty_answers(recs: list[Record]) -> dict[str, int] | None:
    """What the service's empty answers cost, against the oracle cut of the same raw output.

    The oracle cut is the best line cut for the tests, and when no cut passes it is the cut most like the
    reference, which is seldom empty: so "empty where the oracle is not" mostly counts holes where every
    answer fails and the model only re-typed the code after the cursor. ``lost_pass`` is the count that
    matters to a user: holes where the service said nothing, failed, and a cut of the model's own output
    would have passed.
    """
    pairs = [
        (r.attempts[SERVICE], r.attempts[ORACLE])
        for r in recs
        if SERVICE in r.attempts and ORACLE in r.attempts
    ]
    if not pairs:
        return None
    mine = [(s, o) for s, o in pairs if s.empty]
    return {
        "service_empty": len(mine),
        "oracle_empty": sum(o.empty for _, o in pairs),
        "empty_oracle_not": sum(not o.empty for _, o in mine),
        "empty_oracle_passes": sum(not o.empty and bool(o.passed) for _, o in mine),
        "lost_pass": sum(bool(o.passed) and s.passed is False for s, o in mine),
    }


def build_report(records: list[Record], settings: dict[str, Any], skipped: dict[str, str]) -> dict[str, Any]:
    groups: dict[str, list[Record]] = {}
    for rec in records:
        groups.setdefault(group_of(rec), []).append(rec)
    if len(groups) > 1:
        groups["all"] = list(records)
    out: dict[str, Any] = {"settings": settings, "skipped": skipped, "groups": {}}
    for name, recs in groups.items():
        methods = {
            m: summarise([r.attempts[m] for r in recs if m in r.attempts])
            for m in METHODS
            if any(m in r.attempts for r in recs)
        }
        scopes: dict[str, int] = {}
        for r in recs:
            scopes[r.scope] = scopes.get(r.scope, 0) + 1
        within = [r.service_within_raw for r in recs if r.service_within_raw is not None]
        out["groups"][name] = {
            "problems": len(recs),
            "reused": sum(r.reused for r in recs),
            "scopes": scopes,
            "service_not_within_raw": sum(not w for w in within),
            "empty_answers": empty_answers(recs),
            "methods": methods,
        }
    out["problems"] = [record_json(r) for r in records]
    return out


def attempt_from_json(saved: dict[str, Any]) -> Attempt:
    """The inverse of an attempt's entry in ``record_json``."""
    return Attempt(
        text=saved["text"],
        passed=saved["passed"],
        exact=saved["exact"],
        similarity=saved["similarity"],
        completion_lines=saved["lines"],
        reference_lines=saved["reference_lines"],
        latency_ms=saved.get("latency_ms"),
        prompt_tokens=saved.get("prompt_tokens"),
        prefill_ms=saved.get("prefill_ms"),
        tokens=saved.get("tokens"),
    )


def _timing(a: Attempt) -> dict[str, Any]:
    """The service's breakdown of its latency, only where it was reported (other methods have none)."""
    got = {"prompt_tokens": a.prompt_tokens, "prefill_ms": _round(a.prefill_ms, 1), "tokens": a.tokens}
    return {k: v for k, v in got.items() if v is not None}


def record_json(rec: Record) -> dict[str, Any]:
    p = rec.problem
    return {
        "id": p.id,
        "set": p.set,
        "language": p.language,
        "scope": rec.scope,
        "stop_reason": rec.stop_reason,
        "reference": p.reference,
        "service_within_raw": rec.service_within_raw,
        "raw_ids": rec.raw_ids,
        "heal": rec.heal,
        "reused": rec.reused,
        "attempts": {
            m: {
                "text": a.text,
                "passed": a.passed,
                "exact": a.exact,
                "similarity": round(a.similarity, 4),
                "lines": a.completion_lines,
                "reference_lines": a.reference_lines,
                "latency_ms": _round(a.latency_ms, 1),
                **_timing(a),
            }
            for m, a in rec.attempts.items()
        },
    }


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_table(report: dict[str, Any]) -> str:
    head = (
        f"{'group':<22} {'method':<16} {'n':>4} {'pass@1':>7} {'EM':>6} {'ES':>6} {'empty':>6} "
        f"{'long':>6} {'short':>6} {'p50 ms':>8} {'p95 ms':>8} {'prefill':>8} {'prompt':>7}"
    )
    lines = [head, "-" * len(head)]
    for name, g in report["groups"].items():
        for m, s in g["methods"].items():
            lines.append(
                f"{name:<22} {m:<16} {s['n']:>4} {_fmt(s['pass_at_1'], '.3f'):>7} {_fmt(s['exact_match'], '.3f'):>6} "
                f"{_fmt(s['edit_similarity'], '.3f'):>6} {_fmt(s['empty'], '.3f'):>6} {_fmt(s['too_long'], '.3f'):>6} "
                f"{_fmt(s['too_short'], '.3f'):>6} {_fmt(s['latency_p50_ms'], '.0f'):>8} "
                f"{_fmt(s['latency_p95_ms'], '.0f'):>8} {_fmt(s.get('prefill_p50_ms'), '.0f'):>8} "
                f"{_fmt(s.get('prompt_tokens_p50'), '.0f'):>7}"
            )
    for name, g in report["groups"].items():
        e = g.get("empty_answers")
        if e and e["service_empty"]:
            lines.append(
                f"{name}: {e['service_empty']} empty answers ({e['empty_oracle_not']} where the oracle cut is not "
                f"empty, {e['empty_oracle_passes']} where it passes, {e['lost_pass']} losing a pass)"
            )
    for m, why in report.get("skipped", {}).items():
        lines.append(f"({m} skipped: {why})")
    return "\n".join(lines)

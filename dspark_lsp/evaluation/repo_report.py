"""Scores of the repository-level set: the first line against the target, and the per-language table.

Exact match (EM) and edit similarity (ES, 1 - Levenshtein / longer length, in [0, 1]) as CrossCodeEval
scores its line completions, on the first line of each answer, with whitespace runs collapsed and the
ends stripped (the editor shows ``f(a,  b)`` and ``f(a, b)`` alike; a model is not wrong for either).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dspark_lsp.evaluation.metrics import edit_distance, percentile

ALL = "all"


def first_line(text: str) -> str:
    return text.split("\n", 1)[0].rstrip("\r")


def _norm(text: str) -> str:
    return " ".join(text.split())


def score(completion: str, target: str) -> tuple[bool, float]:
    """(exact match, edit similarity) of ``completion``'s first line against ``target``'s."""
    a, b = _norm(first_line(completion)), _norm(first_line(target))
    longest = max(len(a), len(b))
    es = 1.0 if longest == 0 else 1.0 - edit_distance(a, b) / longest
    return a == b, es


@dataclass
class Record:
    """One hole answered by one method (a variant of the service, or the peer)."""

    hole: str  # the hole's id
    language: str
    method: str
    text: str  # the answer's first line
    target: str
    em: bool
    es: float
    latency_ms: float
    prompt_tokens: int | None = None
    context_files: int = 0  # other files' pieces the prompt held (0 for no context)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["es"] = round(self.es, 4)
        out["latency_ms"] = round(self.latency_ms, 1)
        return out


def make_record(hole: str, language: str, method: str, text: str, target: str, latency_ms: float,
                prompt_tokens: int | None = None, context_files: int = 0) -> Record:  # fmt: skip
    em, es = score(text, target)
    return Record(hole, language, method, first_line(text), target, em, es, latency_ms, prompt_tokens,
                  context_files)  # fmt: skip


def _cell(records: Sequence[Record]) -> dict[str, Any]:
    n = len(records)
    latency = percentile([r.latency_ms for r in records], 50)
    tokens = [r.prompt_tokens for r in records if r.prompt_tokens is not None]
    return {
        "n": n,
        "em": round(sum(r.em for r in records) / n, 4),
        "es": round(sum(r.es for r in records) / n, 4),
        "latency_p50_ms": None if latency is None else round(latency, 1),
        "prompt_tokens_mean": round(sum(tokens) / len(tokens), 1) if tokens else None,
        "with_context": sum(r.context_files > 0 for r in records),
    }


def summarise(records: Iterable[Record], methods: Sequence[str]) -> dict[str, dict[str, Any]]:
    """{language or "all": {method: cell}}, over the holes every listed method answered (so each row
    of a language compares the same holes)."""
    recs = list(records)
    by_hole: dict[str, set[str]] = {}
    for r in recs:
        by_hole.setdefault(r.hole, set()).add(r.method)
    complete = {h for h, ms in by_hole.items() if all(m in ms for m in methods)}
    kept = [r for r in recs if r.hole in complete and r.method in methods]
    languages = sorted({r.language for r in kept})
    out: dict[str, dict[str, Any]] = {}
    for lang in [*languages, ALL]:
        rows = [r for r in kept if lang == ALL or r.language == lang]
        out[lang] = {m: _cell([r for r in rows if r.method == m]) for m in methods if rows}
    return out


def markdown(summary: dict[str, dict[str, Any]], methods: Sequence[str]) -> str:
    """One table a language (and all together): a row a method, EM / ES / p50 latency / prompt size."""
    lines: list[str] = []
    for lang, cells in summary.items():
        if not cells:
            continue
        n = next(iter(cells.values()))["n"]
        lines += [f"### {lang} ({n} holes)", "",
                  "| method | EM | ES | p50 latency (ms) | prompt tokens (mean) | holes with context |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for m in methods:
            c = cells.get(m)
            if c is None:
                continue
            tokens = "" if c["prompt_tokens_mean"] is None else f"{c['prompt_tokens_mean']:.0f}"
            latency = "" if c["latency_p50_ms"] is None else f"{c['latency_p50_ms']:.0f}"
            lines.append(f"| {m} | {c['em']:.3f} | {c['es']:.3f} | {latency} | {tokens} | {c['with_context']} |")
        lines.append("")
    return "\n".join(lines)


def _main(argv: list[str] | None = None) -> int:
    """Re-tabulate saved reports over chosen methods (each table then covers the holes they all ran);
    several reports (e.g. passes written to different folders) are merged, the first one's record of a
    (hole, method) pair winning."""
    ap = argparse.ArgumentParser(prog="python -m dspark_lsp.evaluation.repo_report")
    ap.add_argument("reports", nargs="+", help="`eval --repo` report.json files")
    ap.add_argument("--methods", required=True, help="comma-separated, e.g. today,window")
    args = ap.parse_args(argv)
    records: dict[tuple[str, str], Record] = {}
    for path in args.reports:
        try:
            saved = json.loads(Path(path).read_text(encoding="utf-8"))
            for rec in (Record(**r) for r in saved["records"]):
                records.setdefault((rec.hole, rec.method), rec)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"repo_report: {path}: not an eval --repo report ({exc})", file=sys.stderr)
            return 2
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - {m for _h, m in records})
    if unknown:
        print(f"repo_report: no records of {', '.join(unknown)}", file=sys.stderr)
        return 2
    print(markdown(summarise(records.values(), methods), methods))
    return 0


if __name__ == "__main__":
    sys.exit(_main())

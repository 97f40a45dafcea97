"""Reuse a saved eval's records for holes whose prompt a settings change leaves untouched.

A sweep over the prompt window (256 → 512 → 1024 tokens) changes the model's input only for the holes
whose prefix or suffix did not fit the smaller window; for every other hole the exact same token ids go
into the same greedy, lossless decoder, so its completion, raw output and verdict are the saved ones. A
window run with ``--reuse`` decodes only the holes whose prompt differs and copies the rest (their
latency too, measured in the saved run: the report counts how many were copied).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_lsp.errors import UserError
from dspark_lsp.evaluation.problems import Problem
from dspark_lsp.evaluation.report import attempt_from_json
from dspark_lsp.evaluation.runner import Record

# Settings that change what a hole's completion is, apart from the prompt window: they must match.
_MUST_MATCH = ("max_new_tokens", "multiline", "model", "draft_model", "dtype")


@dataclass(frozen=True)
class SavedRun:
    path: str
    service: dict[str, Any]  # the saved run's service settings
    raw_max_tokens: int
    records: dict[tuple[str, str], dict[str, Any]]  # (set, id) -> saved record


def load_saved(path: str) -> SavedRun:
    try:
        saved = json.loads(Path(path).read_text(encoding="utf-8"))
        settings = saved["settings"]
        service = settings["service"]
        raw_max = int(settings["raw_max_tokens"])
        records = {(p["set"], p["id"]): p for p in saved["problems"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"--reuse {path}: not an eval report with its settings ({exc})") from exc
    return SavedRun(path, service, raw_max, records)


def check_compatible(saved: SavedRun, service: dict[str, Any], raw_max_tokens: int) -> None:
    """Refuse a saved run whose completions would differ for reasons other than the prompt."""
    for key in _MUST_MATCH:
        if saved.service.get(key) != service.get(key):
            raise UserError(
                f"--reuse {saved.path}: its {key} is {saved.service.get(key)!r}, this run's "
                f"{service.get(key)!r}"
            )
    if saved.raw_max_tokens != raw_max_tokens:
        raise UserError(
            f"--reuse {saved.path}: its --raw-max-tokens is {saved.raw_max_tokens}, this run's {raw_max_tokens}"
        )


# The settings that shape a hole's prompt; a saved run that lacks one had that setting's value then
# (context_budget and fim_order came later: 0 and "psm" before).
_PROMPT_KEYS = {"context_window": None, "prefix_share": None, "context_budget": 0, "fim_order": "psm"}


def prompt_ids(problem: Problem, service: Any, settings: dict[str, Any] | None = None) -> list[int]:
    """The token ids the service decodes ``problem`` from, with the prompt settings of ``settings`` (a
    saved run's service settings) in place of its own where given."""
    from dataclasses import replace

    from dspark_lsp.evaluation.runner import service_prompt

    config = service.config
    if settings is not None:
        changes = {k: settings.get(k, getattr(config, k) if d is None else d) for k, d in _PROMPT_KEYS.items()}
        config = replace(config, **changes)
    return list(service_prompt(service, problem, config).ids)


def reused_record(saved: SavedRun, problem: Problem, service: Any) -> Record | None:
    """The saved record of ``problem`` when this run's prompt for it is the saved run's, else None."""
    item = saved.records.get((problem.set, problem.id))
    if item is None:
        return None
    now = prompt_ids(problem, service)
    then = prompt_ids(problem, service, saved.service)
    if now != then:
        return None
    rec = Record(problem, item["scope"], item["stop_reason"])
    rec.attempts = {m: attempt_from_json(a) for m, a in item["attempts"].items()}
    rec.service_within_raw = item.get("service_within_raw")
    rec.raw_ids = list(item.get("raw_ids") or [])
    rec.heal = str(item.get("heal") or "")
    rec.reused = True
    return rec

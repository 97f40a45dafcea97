"""A fake completion service with the shape of dspark_lsp.service, for protocol-level tests.

It speaks the service contract (dspark_lsp.contract): it is asked a `CompletionRequest`, answers a
`CompletionResult` whose `CompletionStats` carry the real service's speed-up figures and, in `extra`,
what the tests check (what it was asked, its config, its load), and records each request as the real
service does (`ServiceRecord`).

Its answers encode what it was asked, so tests can check the server's position handling exactly:
"<OFFSET|TAIL>" where OFFSET is the code-point cursor offset the service received and TAIL the two
characters before it. Model names select behaviours:
  default / fake / fake2: answer at once        slow: one 50 ms round per max_new_tokens, cancellable
  broken: load fails (ModelError)               crash: complete() raises
  slowload: load takes 6 s with progress        multiline: answers "a\\nb"
  empty: answers ""
  early: an automatic request answers "a" as cut short by quickAnswerMs (stop_reason "deadline");
         finish_early_answer() is recorded in the "warms" list as "finish:<doc_key>@<offset>"
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from dspark_lsp.contract import CompletionRequest, CompletionResult, CompletionStats, ServiceRecord
from dspark_lsp.errors import ModelError
from dspark_lsp.lsp.backend import Backend

LOADS = 0  # loads in this process: tests tell a reload from a knob update by it


@dataclass
class FakeConfig:
    model: str = "default"
    draft_model: str | None = None
    threshold: float = 0.9
    max_new_tokens: int = 64
    # The context settings the language server reads off the config (lsp/project.py, lsp/warm.py).
    context_budget: int = 0
    context_open_files: bool = True
    context_definitions: bool = True
    warm_up: bool = False

    @classmethod
    def from_settings(
        cls, settings: dict[str, Any], base: FakeConfig | None = None
    ) -> tuple[FakeConfig, list[str]]:
        cfg = replace(base) if base else cls()
        problems: list[str] = []
        if isinstance(settings.get("model"), str):
            cfg.model = settings["model"]
        if "draftModel" in settings:
            cfg.draft_model = settings["draftModel"]
        if "threshold" in settings:
            value = settings["threshold"]
            if isinstance(value, (int, float)) and 0 < value <= 1:
                cfg.threshold = float(value)
            else:
                problems.append(f"threshold must be in (0, 1], got {value!r}; using 0.9")
        for key, name in (("contextBudget", "context_budget"), ("contextOpenFiles", "context_open_files"),
                          ("contextDefinitions", "context_definitions"), ("warmUp", "warm_up")):
            if key in settings:
                setattr(cfg, name, settings[key])
        if "maxNewTokens" in settings:
            value = settings["maxNewTokens"]
            if isinstance(value, int) and value > 0:
                cfg.max_new_tokens = value
            else:
                problems.append(f"maxNewTokens must be a positive integer, got {value!r}; using 64")
        return cfg, problems

    def needs_reload(self, other: FakeConfig) -> bool:
        return (self.model, self.draft_model) != (other.model, other.draft_model)


class FakeService:
    notice: str | None = None

    def __init__(self, config: FakeConfig, load_index: int) -> None:
        self.config = config
        self.load_index = load_index
        self.records: list[ServiceRecord] = []
        self.closed = False
        self.warms: list[str] = []  # "<doc_key>@<offset>" of each warm() call, in order
        self._noted = False

    @classmethod
    def load(
        cls, config: FakeConfig, progress: Callable[[str, float | None], None] | None = None
    ) -> FakeService:
        global LOADS
        if config.model == "broken":
            raise ModelError("model 'broken' not found (fake)")
        if config.model == "slowload":
            for i in range(3):
                if progress:
                    progress(f"step {i + 1}/3", (i + 1) / 3)
                time.sleep(2.0)  # long enough that a loaded CI machine still asks before ready
        elif progress:
            progress("fake load", 1.0)
        LOADS += 1
        return cls(config, LOADS)

    def complete(
        self,
        req: CompletionRequest,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> CompletionResult:
        if self.closed:
            raise RuntimeError("complete() on a closed service")
        started = time.perf_counter()
        model = self.config.model
        cancelled = False
        rounds = 0
        if model == "crash":
            raise RuntimeError("fake decode crash")
        if model == "slow":
            for _ in range(self.config.max_new_tokens):
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                time.sleep(0.05)
                rounds += 1
        if model == "multiline":
            text = "a\nb"
        elif model == "empty":
            text = ""
        elif model == "early":
            text = "a"
        else:
            text = f"<{req.offset}|{req.text[max(0, req.offset - 2) : req.offset]}>"
        latency = (time.perf_counter() - started) * 1000
        stats = CompletionStats(
            latency_ms=latency,
            accepted_per_forward=2.5,
            speedup=1.7,
            extra={
                "model": model,
                "threshold": self.config.threshold,
                "load_index": self.load_index,
                "offset": req.offset,
                "tail": req.text[max(0, req.offset - 2) : req.offset],
                "text_len": len(req.text),
                "doc_key": req.doc_key,
                "language_id": req.language_id,
                "rounds": rounds,
                # What the language server sent of the project (lsp/project.py).
                "context": ",".join(f"{f.source}:{f.path}" for f in req.context),
                "repo_name": req.repo_name,
                "prompt_path": req.prompt_path,
                "warms": ";".join(self.warms),
                "automatic": req.automatic,
            },
        )
        result = CompletionResult(
            text="" if cancelled else text,
            prompt="",
            completion_ids=[],
            scope="single_line",
            stats=stats,
            cancelled=cancelled,
            stop_reason="deadline" if model == "early" and req.automatic else "eos",
        )
        self.records.append(result.record(req.doc_key))
        return result

    def warm(self, req: CompletionRequest, cancel: threading.Event | None = None) -> int:
        self.warms.append(f"{req.doc_key}@{req.offset}")
        return len(req.text)

    def finish_early_answer(self, req: CompletionRequest, cancel: threading.Event | None = None) -> int:
        self.warms.append(f"finish:{req.doc_key}@{req.offset}")
        return 1

    def update_config(self, config: FakeConfig) -> None:
        self.config = config

    def take_notice(self) -> str | None:
        # "slownote": a note comes due with the second answer (as latency_note.SlowAnswers gives one), once.
        if self.config.model == "slownote" and len(self.records) >= 2 and not self._noted:
            self._noted = True
            return "completions took 999 ms (fake)"
        return None

    def recent_stats(self) -> list[dict[str, Any]]:
        return [record.to_json() for record in self.records[-100:]]

    def close(self) -> None:
        self.closed = True


BACKEND = Backend(
    config_from_settings=lambda settings, base: FakeConfig.from_settings(settings, base),
    make_request=CompletionRequest,
    load=FakeService.load,
)

"""Quick answers change no completion: for each HumanEval hole, the completion asked in full (invoked) against
the early answer of an automatic request (quickAnswerMs 1: as early as a finished line allows) and the whole
completion its background continuation (finish_early_answer) puts in the typed-through cache; where that goes
past the shown lines, also what typing through them is answered with (from the cache, no model run). Usage:
python lossless.py MODEL LIMIT > lossless-MODEL.txt   (repository root on PYTHONPATH, venv active)"""

from __future__ import annotations

import sys
import time

from dspark_lsp.bench.prompts import find_humaneval_dir
from dspark_lsp.contract import CompletionRequest
from dspark_lsp.evaluation.problems import Problem, load_problems
from dspark_lsp.service import CompletionService, ServiceConfig


def main() -> None:
    model, limit = sys.argv[1], int(sys.argv[2])
    problems = load_problems(find_humaneval_dir("auto"), ["single", "multi", "span"], None, limit, 0)
    service = CompletionService.load(ServiceConfig(model=model, quick_answer_ms=1))
    same = early_n = 0
    for i, p in enumerate(problems):
        def req(key: str, typed: str = "", automatic: bool = True, p: Problem = p) -> CompletionRequest:
            text = p.text[: p.offset] + typed + p.text[p.offset:]
            return CompletionRequest(text, p.offset + len(typed), language_id="python", path="x.py",
                                     doc_key=key, automatic=automatic)

        # Both cold: a prompt whose KV the prefix cache holds feeds only its last token, and through the
        # one-row product path rather than the prefill's GEMM, whose rounding differs (the same for any request).
        service.prefix_cache.clear()
        full = service.complete(req(f"full{i}", automatic=False))
        service.prefix_cache.clear()
        t0 = time.perf_counter()
        early = service.complete(req(f"early{i}"))
        early_ms = (time.perf_counter() - t0) * 1000
        got = early.text
        if early.stop_reason == "deadline":
            early_n += 1
            service.finish_early_answer(req(f"early{i}"))
            # The whole completion the continuation put in the typed-through cache (the newest entry)...
            got = service._shown[f"early{i}"][-1].text
            # ...and, where it goes past the shown lines, what typing through them is answered with.
            if got != early.text:
                rest = service.complete(req(f"early{i}", early.text))
                typed = early.text + (rest.text if rest.from_cache else "<not cached>")
                got = got if typed == got else f"{got} <typed through: {typed!r}>"
        ok = got == full.text
        same += ok
        print(f"{p.id}\t{early.stop_reason}\tfull {len(full.text)} chars, early {len(early.text)} "
              f"({early_ms:.0f} ms)\t{'same' if ok else 'DIFFERENT'}", flush=True)
        if not ok:
            print(f"  full:  {full.text!r}\n  quick: {got!r}", flush=True)
    print(f"# {len(problems)} holes: {early_n} answered early; early + rest == full on {same}")


if __name__ == "__main__":
    main()

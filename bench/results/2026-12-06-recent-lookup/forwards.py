"""The typing replay's request positions (dspark_lsp/lsp/worker.py, the replay's seeded pauses) asked in order, in
one process, through CompletionService: tokens and target forwards per request, one JSON line each, then a total.
No warm-ups, and no timing that means anything (other jobs share the host): the figure is tokens per forward.

    python forwards.py PAIR SEED [CHARS]          # PYTHONPATH=OLD_CHECKOUT runs the code before
"""

import json
import sys
import time
from pathlib import Path

from dspark_lsp.bench.lsp_replay import ReplayConfig, typing_plan
from dspark_lsp.service import CompletionRequest, CompletionService, ServiceConfig


def main() -> None:
    model, seed = sys.argv[1], int(sys.argv[2])
    chars = int(sys.argv[3]) if len(sys.argv) > 3 else 600
    path = Path(__file__).resolve().parents[3] / "dspark_lsp/lsp/worker.py"
    source = path.read_text()
    cfg = ReplayConfig(file=path, max_chars=chars, seed=seed)
    text = source[: int(len(source) * cfg.start_fraction)]
    service = CompletionService.load(ServiceConfig(model=model, max_new_tokens=32))
    rows = []
    for ch, _delay, pause in typing_plan(source, cfg):
        text += ch
        if pause <= 0:
            continue
        t0 = time.perf_counter()
        res = service.complete(CompletionRequest(text=text, offset=len(text), path=str(path), doc_key=path.as_uri()))
        row = {"ms": round((time.perf_counter() - t0) * 1000), "cache": res.from_cache, "tokens": 0, "forwards": 0,
               "text": res.text[:60]}
        if not res.from_cache:
            row.update(tokens=res.stats["tokens"], forwards=res.stats["target_forwards"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    decoded = [r for r in rows if not r["cache"]]
    tokens, forwards = sum(r["tokens"] for r in decoded), sum(r["forwards"] for r in decoded)
    print(f"requests {len(rows)} decoded {len(decoded)} tokens {tokens} forwards {forwards} "
          f"tok/fw {tokens / max(1, forwards):.3f}")


if __name__ == "__main__":
    main()

"""Where a cold HumanEval hole's time goes in the service: prefill, draft, verify, other, outside the decode."""
import sys
import time

import torch

from dspark_lsp.bench.prompts import find_humaneval_dir
from dspark_lsp.evaluation.problems import load_problems
from dspark_lsp.evaluation.runner import request_of
from dspark_lsp.service import CompletionService, ServiceConfig

torch.set_num_threads(2)
svc = CompletionService.load(ServiceConfig(model="qwen2.5-coder-1.5b", device="cpu"))
probs = load_problems(find_humaneval_dir("auto"), ["single", "multi"], None, int(sys.argv[1]) if len(sys.argv) > 1 else 6, 0)
svc.complete(request_of(probs[0]))
for p in probs:
    svc.prefix_cache.clear()
    t0 = time.perf_counter()
    r = svc.complete(request_of(p))
    ms = (time.perf_counter() - t0) * 1000
    s = r.stats
    f = {k: v for k, v in s.scalars().items() if k in ("latency_ms","t_prefill_ms","t_draft_ms","t_verify_ms","t_other_ms","prompt_tokens","tokens","target_forwards")}
    print(f"{ms:7.0f} ms", f, r.stop_reason, flush=True)

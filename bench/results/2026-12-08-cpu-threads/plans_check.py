"""The real 1.5B service with one core busy elsewhere: does the engine drop to one thread and measure a
one-thread cost curve at a background warm-up? Repository root: python bench/results/2026-12-08-cpu-threads/plans_check.py"""
import logging
import subprocess
import sys
import threading
import time

from dspark_lsp.service import CompletionRequest, CompletionService, ServiceConfig

logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
svc = CompletionService.load(ServiceConfig(model="qwen2.5-coder-1.5b"))
local = svc._local()
print("load plan threads", list(local.cost_plans.plans), {n: round(v, 1) for n, v in local.cost_plans.plans[2].measured_ms.items()})
burn = subprocess.Popen([sys.executable, "bench/results/2026-12-08-cpu-threads/burn.py", "60"])
time.sleep(2.0)
print("others", local.cpu_watch.others(), "threads", local.cpu_watch.threads())
text = open("dspark_lsp/lsp/worker.py").read()[:3000]
req = CompletionRequest(text=text, offset=len(text), path="worker.py", doc_key="file:///w.py")
t0 = time.time()
th = threading.Thread(target=lambda: print("warmed", svc.warm(req)))
th.start()
th.join()
print("warm took %.1f s" % (time.time() - t0), "plans", list(local.cost_plans.plans))
if 1 in local.cost_plans.plans:
    print("1-thread curve", {n: round(v, 1) for n, v in local.cost_plans.plans[1].measured_ms.items()})
out = []
th = threading.Thread(target=lambda: out.append(svc.complete(req)))
th.start()
th.join()
print("complete threads", out[0].stats["threads"], "latency", out[0].stats["latency_ms"])
burn.kill()
svc.close()

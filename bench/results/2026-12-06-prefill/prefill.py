"""Cold prefill of the first 256 and 1,024 tokens of dspark_lsp/lsp/worker.py (plus one decoded token), twice
each, in one process, no prefix reuse. Usage: prefill.py PAIR"""

import sys
import time
from pathlib import Path

from dspark_lsp.engine.config import DecodeConfig
from dspark_lsp.service import CompletionService, ServiceConfig


def main() -> None:
    model = sys.argv[1]
    service = CompletionService.load(ServiceConfig(model=model, draft_model="ngram", prefix_reuse=False,
                                                   calibrate=False))
    text = (Path(__file__).resolve().parents[3] / "dspark_lsp/lsp/worker.py").read_text()
    ids = service.tokenizer.encode(text, add_special_tokens=False)
    for n in (256, 1024):
        for _ in range(2):
            t0 = time.perf_counter()
            service.decoder.generate(ids[:n], config=DecodeConfig(max_new_tokens=1))
            dt = time.perf_counter() - t0
            print(f"{model} {n} tokens: {dt:.2f} s ({dt * 1000 / n:.1f} ms a token)", flush=True)


if __name__ == "__main__":
    main()

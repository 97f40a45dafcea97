"""llama.cpp on the repository-level set: the same prompt text the service sent, greedy, first line.

The peer row answers "is it the model or the server?": llama.cpp (llama-cpp-python, an optional extra)
runs the target's own GGUF file on exactly the prompt our service built for a hole (its ``prompt``, the
model input as text, encoded with the same tokenizer), decodes greedily up to the same token cap and
stops at the first line break or an end / FIM marker token, so it is scored on the same first line.
Every hole pays its whole prefill (the state is reset), as the service's holes do (its prefix cache is
cleared per hole).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class PeerAnswer:
    text: str
    tokens: int
    prompt_tokens: int
    latency_ms: float


class RawPromptPeer:
    """Greedy first-line completions of given prompt texts by one llama.cpp context over ``gguf``."""

    def __init__(self, gguf: Path, tokenizer: Any, fim: Any, *, threads: int, max_new_tokens: int,
                 n_ctx: int = 4096) -> None:  # fmt: skip
        from dspark_lsp.bench.llamacpp import LlamaCppRunner

        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.runner = LlamaCppRunner(gguf, n_ctx=n_ctx, threads=threads)
        self.n_ctx = n_ctx
        self.eos = {*fim.eos_ids, fim.prefix_id, fim.suffix_id, fim.middle_id}
        self.runner.warm_up([fim.prefix_id, fim.suffix_id, fim.middle_id])

    def _decode(self, ids: list[int]) -> str:
        text = str(self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
        return text.rstrip("\ufffd")

    def complete(self, prompt: str) -> PeerAnswer:
        t0 = time.perf_counter()
        # The prompt text holds the FIM and repository markers as text: the tokenizer maps them back to
        # their special ids (the run records whether the count matches the service's prompt_tokens).
        ids = list(self.tokenizer.encode(prompt, add_special_tokens=False))
        if len(ids) + self.max_new_tokens >= self.n_ctx:
            ids = ids[-(self.n_ctx - self.max_new_tokens - 1) :]
        llm = self.runner.llm
        llm.reset()
        out: list[int] = []
        gen = llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0,
                           frequency_penalty=0.0, presence_penalty=0.0, reset=True)  # fmt: skip
        try:
            for tok in gen:
                tok = int(tok)
                if tok in self.eos:
                    break
                out.append(tok)
                if "\n" in self._decode(out) or len(out) >= self.max_new_tokens:
                    break
        finally:
            gen.close()
        text = self._decode(out).split("\n", 1)[0].rstrip()
        return PeerAnswer(text, len(out), len(ids), (time.perf_counter() - t0) * 1000)


def gguf_for(model: str, draft: str | None, cache_dir: str | None) -> tuple[Path | None, str | None]:
    """The target's GGUF file, or why the peer cannot run (llama-cpp-python missing, no GGUF)."""
    from dspark_lsp.bench.llamacpp import llamacpp_missing

    why = llamacpp_missing()
    if why is not None:
        return None, why
    from dspark_lsp.models.loader import gguf_source, resolve_model
    from dspark_lsp.models.registry import pair_for

    target = pair_for(model, draft).target
    gguf = gguf_source(target, resolve_model(target, cache_dir), cache_dir)
    return (gguf, None) if gguf is not None else (None, f"no GGUF file for {target}")

"""llama.cpp's ``/infill`` as llama.vscode drives it, on the target's own GGUF file (optional extra).

What llama.vscode users get, rebuilt around llama-cpp-python (the bench's ``LlamaCppRunner`` owns the
``Llama``) so no server is needed:

* the request as llama.vscode builds it: ``input_prefix`` = up to 256 lines before the cursor's line,
  ``prompt`` = the cursor's line up to the cursor, ``input_suffix`` = the rest of that line and up to 64
  lines after it; nothing when more than 8 characters follow the cursor on its line (max_line_suffix);
  ``n_indent`` = the cursor line's indentation; ``n_predict`` 128.
* the prompt as llama-server's infill formats it: FIM prefix marker, the last 3/4·n_batch prefix tokens,
  suffix marker, the first n_batch/4 − 2 − |prompt| suffix tokens, middle marker, then the prompt's tokens.
* its stops: an end-of-generation token, ``n_predict``, and ``n_indent`` (a new line indented less than
  the cursor's line ends the text at that line's first character).
* the client's clean-up: trailing blank space dropped, an all-blank answer discarded.

Differences, on purpose: greedy (llama.vscode samples with top-k 40), no time limits (t_max_*_ms make the
text depend on the machine's load), no ring buffer of extra context (the eval's holes are one file each).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_lsp.models.fim import FimTokens


@dataclass(frozen=True)
class InfillConfig:
    n_prefix_lines: int = 256
    n_suffix_lines: int = 64
    max_line_suffix: int = 8
    n_predict: int = 128
    n_batch: int = 1024  # llama-server's prompt split: 3/4 of it for the prefix, 1/4 for the suffix


@dataclass(frozen=True)
class InfillRequest:
    input_prefix: str
    prompt: str
    input_suffix: str
    n_indent: int


@dataclass
class InfillResult:
    text: str
    tokens: int
    latency_ms: float
    skipped: str | None = None  # why llama.vscode would not have asked (then text is empty)


def infill_request(text: str, offset: int, cfg: InfillConfig) -> InfillRequest | None:
    """llama.vscode's request fields at ``offset``; None when it would not ask (text after the cursor)."""
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line_end = len(text) if line_end < 0 else line_end
    line = text[line_start:line_end].rstrip("\r")
    line_prefix, line_suffix = text[line_start:offset], line[offset - line_start :]
    if len(line_suffix) > cfg.max_line_suffix:
        return None
    before = text[: max(0, line_start - 1)].split("\n") if line_start > 0 else []
    after = text[line_end + 1 :].split("\n") if line_end < len(text) else []
    prefix_lines = before[-cfg.n_prefix_lines :]
    suffix_lines = after[: cfg.n_suffix_lines]
    return InfillRequest(
        input_prefix="\n".join(prefix_lines) + "\n" if prefix_lines else "",
        prompt=line_prefix,
        input_suffix=line_suffix + "\n" + "\n".join(suffix_lines) + "\n",
        n_indent=len(line) - len(line.lstrip()),
    )


def infill_ids(req: InfillRequest, tokenizer: Any, fim: FimTokens, cfg: InfillConfig) -> list[int]:
    def enc(s: str) -> list[int]:
        return list(tokenizer.encode(s, add_special_tokens=False)) if s else []

    prompt = enc(req.prompt)
    prefix = enc(req.input_prefix)[-(3 * cfg.n_batch // 4) :]
    suffix = enc(req.input_suffix)[: max(0, cfg.n_batch // 4 - (2 + len(prompt)))]
    return [fim.prefix_id, *prefix, fim.suffix_id, *suffix, fim.middle_id, *prompt]


def indent_cut(generated: str, n_indent: int) -> int | None:
    """llama-server's n_indent rule: the index where a line after the first starts its code with less
    indentation than ``n_indent`` (its leading blank space stays, the client strips it); else None."""
    if n_indent <= 0:
        return None
    pos = generated.find("\n")
    while pos >= 0:
        start = pos + 1
        i = start
        while i < len(generated) and generated[i] in " \t":
            i += 1
        if i < len(generated) and generated[i] != "\n" and i - start < n_indent:
            return i
        pos = generated.find("\n", start)
    return None


class InfillPeer:
    """Greedy infill completions from one llama.cpp context over ``gguf``."""

    def __init__(
        self, gguf: Path, tokenizer: Any, fim: FimTokens, *, threads: int, cfg: InfillConfig
    ) -> None:
        from dspark_lsp.bench.llamacpp import LlamaCppRunner

        self.cfg = cfg
        self.tokenizer = tokenizer
        self.fim = fim
        self.runner = LlamaCppRunner(gguf, n_ctx=cfg.n_batch + cfg.n_predict + 16, threads=threads)
        self.eos = {*fim.eos_ids, fim.prefix_id, fim.suffix_id, fim.middle_id}
        self.runner.warm_up([fim.prefix_id, fim.suffix_id, fim.middle_id])

    def _decode(self, ids: list[int]) -> str:
        text = str(self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
        return text.rstrip("\ufffd")

    def complete(self, text: str, offset: int) -> InfillResult:
        t0 = time.perf_counter()
        req = infill_request(text, offset, self.cfg)
        if req is None:
            return InfillResult("", 0, 0.0, skipped="max_line_suffix")
        ids = infill_ids(req, self.tokenizer, self.fim, self.cfg)
        llm = self.runner.llm
        llm.reset()  # every hole pays its prefill, as a first request does
        out: list[int] = []
        gen = llm.generate(
            ids,
            temp=0.0,
            top_k=1,
            top_p=1.0,
            min_p=0.0,
            repeat_penalty=1.0,
            frequency_penalty=0.0,
            presence_penalty=0.0,
            reset=True,
        )
        try:
            for tok in gen:
                tok = int(tok)
                if tok in self.eos:
                    break
                out.append(tok)
                # As llama-server: the n_indent rule is checked after every token (a line's indentation
                # is known once its first code character arrives, a token or more after the line break).
                if indent_cut(self._decode(out), req.n_indent) is not None or len(out) >= self.cfg.n_predict:
                    break
        finally:
            gen.close()
        generated = self._decode(out)
        cut = indent_cut(generated, req.n_indent)
        body = generated if cut is None else generated[:cut]
        body = body.rstrip()
        return InfillResult(body if body.strip() else "", len(out), (time.perf_counter() - t0) * 1000)

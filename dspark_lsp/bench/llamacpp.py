"""llama.cpp (through llama-cpp-python, an optional extra) as a peer in `dspark-lsp bench`.

Two methods run the target's own GGUF file on the same prompt token ids as our loops:

* ``llamacpp_greedy``: plain greedy decoding, ``Llama.generate`` with ``temp=0`` (llama.cpp's greedy
  sampler: the argmax of the logits; the penalty stage it always adds is a no-op at repeat 1, frequency 0,
  presence 0).
* ``llamacpp_lookup``: llama-cpp-python's speculative mode, prompt-lookup decoding
  (``LlamaPromptLookupDecoding`` as ``draft_model``), still greedy: ``generate`` verifies the drafted
  tokens in one ``eval`` and keeps each one only while it equals the greedy sample at its position.

Every prompt pays its full prefill (the state is reset first, so ``generate`` finds no cached prefix).
Forwards are counted as ``eval`` calls (each prompt's prefill is one, as in our loops), so tokens per
forward compare with ours.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

LLAMACPP_MISSING = (
    "llama-cpp-python is not installed (pip install 'dspark-lsp[llamacpp]'; it compiles llama.cpp, "
    "~10 min on 2 cores)"
)
# Draft length and n-gram size of the lookup: as `hf_prompt_lookup` (prompt_lookup_num_tokens=10; HF's
# max_matching_ngram_size and llama-cpp-python's max_ngram_size both default to 2).
LOOKUP_TOKENS = 10
LOOKUP_NGRAM = 2


def llamacpp_missing() -> str | None:
    """None when llama-cpp-python imports, else why the llama.cpp methods are skipped."""
    try:
        import llama_cpp  # noqa: F401
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # noqa: F401
    except ImportError:
        return LLAMACPP_MISSING
    return None


@dataclass
class LlamaRun:
    tokens: list[int]
    seconds: float
    t_prefill: float  # until the prefill's own token is out (the prompt's forward and its sample)
    forwards: int  # eval calls: the prefill and each decode forward
    drafted: int = 0  # lookup tokens sent to verify forwards
    t_draft: float = 0.0


class _CappedLookup:
    """The prompt-lookup draft, capped to what the token budget can still use.

    llama-cpp-python's ``generate`` does not know ``max_new_tokens``: uncapped, the last verify forwards
    would carry drafts past the budget (costing time, changing no output). Our loops cap ``k`` the same way.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.room = 0
        self.drafted = 0
        self.t_draft = 0.0

    def __call__(self, input_ids: Any, /, **kwargs: Any) -> Any:
        if self.room <= 0:
            return np.array([], dtype=np.intc)
        t0 = time.perf_counter()
        draft = self.inner(input_ids, **kwargs)[: self.room]
        self.t_draft += time.perf_counter() - t0
        self.drafted += len(draft)
        return draft


class LlamaCppRunner:
    """One ``Llama`` over a GGUF file (built once per bench run), decoding greedily.

    ``lookup_tokens``: None for plain greedy, else the prompt-lookup draft length (the lookup needs
    ``logits_all``: its verify forwards sample at every drafted position). ``prompt_logits``: keep every
    prompt position's logits in ``llm.scores`` too (tests read them to check greediness); otherwise the
    prefill asks llama.cpp for the last position's logits only, as llama.cpp's own tools and our loops do
    (llama-cpp-python would compute the LM head at every prompt position once a draft model is set).
    """

    def __init__(
        self,
        gguf: str | Path,
        *,
        n_ctx: int,
        threads: int,
        lookup_tokens: int | None = None,
        prompt_logits: bool = False,
    ) -> None:
        import llama_cpp
        import llama_cpp.llama_speculative

        # Any: llama-cpp-python is optional (CI may lack it) and its draft_model wants its own base class.
        Llama: Any = llama_cpp.Llama
        LlamaPromptLookupDecoding: Any = llama_cpp.llama_speculative.LlamaPromptLookupDecoding
        self.draft: _CappedLookup | None = None
        if lookup_tokens is not None:
            self.draft = _CappedLookup(
                LlamaPromptLookupDecoding(max_ngram_size=LOOKUP_NGRAM, num_pred_tokens=lookup_tokens)
            )
        self.logits_all = prompt_logits or self.draft is not None
        self.prompt_logits = prompt_logits
        self.llm: Any = Llama(
            model_path=str(gguf),
            n_ctx=n_ctx,
            n_batch=n_ctx,  # the whole prompt in one eval: one prefill forward, as ours
            n_threads=threads,
            n_threads_batch=threads,
            logits_all=self.logits_all,
            draft_model=self.draft,
            verbose=False,
        )
        self.forwards = 0
        inner_eval = self.llm.eval

        def counted_eval(tokens: Any) -> None:
            self.forwards += 1
            inner_eval(tokens)

        self.llm.eval = counted_eval

    def forward_costs(self, context: list[int], sizes: tuple[int, ...], repeats: int = 5) -> dict[int, float]:
        """Fastest-of-``repeats`` ms of one llama.cpp forward (``eval``) of n tokens on a KV cache of
        ``context``, as a verify forward runs it: with logits for every row when this runner keeps them
        (the lookup runner; a plain greedy step needs only the last row's). Rolled back between calls by
        moving its token count, as its own speculative loop does."""
        llm = self.llm
        # llama.cpp may round its context up past the n_ctx asked for; the Python side's token buffer is not.
        cap = min(int(llm.n_ctx()), len(llm.input_ids)) - max(sizes) - 1
        ctx = context[: max(1, cap)]
        llm.reset()
        llm._logits_all = False
        llm.eval(ctx)
        llm._logits_all = self.logits_all
        out: dict[int, float] = {}
        try:
            for n in sizes:
                rows = (ctx * (n // len(ctx) + 1))[:n]
                best = float("inf")
                for _ in range(repeats):
                    llm.n_tokens = len(ctx)
                    t0 = time.perf_counter()
                    llm.eval(rows)
                    best = min(best, time.perf_counter() - t0)
                out[n] = round(best * 1000, 3)
        finally:
            llm.reset()
            self.forwards = 0
        return out

    def warm_up(self, ids: list[int]) -> None:
        """One short untimed decode: the first ever eval pages the file in and sets llama.cpp up
        (measured: ~25 s on the first call, then well under 1 s)."""
        self.generate(ids, 4, [])

    def generate(self, ids: list[int], max_new: int, eos: list[int]) -> LlamaRun:
        """Greedy continuation of ``ids``: exactly ``max_new`` tokens, or fewer when an ``eos`` id comes
        (which is dropped, as our decoder does)."""
        if max_new <= 0:
            return LlamaRun([], 0.0, 0.0, 0)
        llm = self.llm
        llm.reset()  # no cached prefix: generate() then prefills the whole prompt
        self.forwards = 0
        draft = self.draft
        if draft is not None:
            draft.drafted, draft.t_draft, draft.room = 0, 0.0, max_new - 1
        last_only = self.logits_all and not self.prompt_logits
        out: list[int] = []
        t_prefill = 0.0
        t0 = time.perf_counter()
        if last_only:
            llm._logits_all = False  # read by eval() for each batch it sends
        gen = llm.generate(
            ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0,
            frequency_penalty=0.0, presence_penalty=0.0, reset=True,
        )
        try:
            for tok in gen:
                if not out and not t_prefill:
                    t_prefill = time.perf_counter() - t0
                    if last_only:
                        llm._logits_all = True  # the verify forwards sample at every position
                tok = int(tok)
                if tok in eos:
                    break
                out.append(tok)
                if len(out) >= max_new:
                    break
                if draft is not None:
                    # The next draft extends this token: its verify forward adds up to room + 1 tokens.
                    draft.room = max_new - len(out) - 1
        finally:
            gen.close()
            llm._logits_all = self.logits_all
        seconds = time.perf_counter() - t0
        if draft is None:
            return LlamaRun(out, seconds, t_prefill, self.forwards)
        return LlamaRun(out, seconds, t_prefill, self.forwards, draft.drafted, draft.t_draft)

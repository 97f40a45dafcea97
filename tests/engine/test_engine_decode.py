"""The decode loop's contracts: cancellation, streaming, EOS / stop / token cap, draft modes, relaxed
acceptance (opt-in, lossy), early stop on low draft confidence, chunked prefill, config validation."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from dspark_lsp.drafts.causal_lm import ModelDraftSource
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine import decode as decode_module
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource, Proposal

V = 48
PROMPT = [5, 9, 2, 33, 17, 5, 9]


class ScriptedDraft(DraftSource):
    """Proposes ``script(context, max_tokens, parallel)`` -> (tokens, confidences); records its calls."""

    name = "scripted"

    def __init__(
        self, script: Callable[[list[int], int, bool], tuple[list[int], list[float]]], parallel: bool = True
    ) -> None:
        self.script = script
        self.supports_parallel = parallel
        self.calls: list[tuple[int, int, bool]] = []

    def propose(
        self,
        context: list[int],
        max_tokens: int,
        *,
        parallel: bool,
        tau: float,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Proposal:
        self.calls.append((len(context), max_tokens, parallel))
        toks, conf = self.script(list(context), max_tokens, parallel)
        return Proposal(tokens=list(toks), confidence=list(conf))

    def reset(self) -> None:
        pass


@pytest.fixture(scope="module")
def target(random_lm: Any) -> Any:
    return random_lm(31, vocab_size=V, hidden=32, layers=2, head_scale=16.0)


@pytest.fixture(scope="module")
def reference(target: Any) -> list[int]:
    """The target's own greedy continuation of PROMPT (60 tokens)."""
    return SpeculativeDecoder(target).generate(PROMPT, config=DecodeConfig(max_new_tokens=60)).tokens


def oracle_draft(reference: list[int], conf: float = 1.0) -> ScriptedDraft:
    """Proposes the target's own continuation: every round is accepted in full."""

    def script(ctx: list[int], n: int, parallel: bool) -> tuple[list[int], list[float]]:
        done = len(ctx) - len(PROMPT)
        toks = reference[done : done + (n if parallel else 1)]
        return toks, [conf] * len(toks)

    return ScriptedDraft(script)


# ------------------------------------------------------------------------------------ cancellation
def test_cancel_set_after_the_first_round_stops_within_one_round(target: Any, reference: list[int]) -> None:
    decoder = SpeculativeDecoder(target)
    cancel = threading.Event()
    seen: list[list[int]] = []

    def on_tokens(ids: list[int]) -> None:
        seen.append(list(ids))
        if len(seen) == 2:  # 1st call: the prefill's token; 2nd: after the first verify round
            cancel.set()

    k = 4
    res = decoder.generate(
        PROMPT,
        config=DecodeConfig(max_new_tokens=60, scheduler=SchedulerConfig(fixed_k=k)),
        draft=oracle_draft(reference),
        on_tokens=on_tokens,
        cancel=cancel,
    )
    assert res.stop_reason == "cancelled"
    snapshot = seen[1]
    assert len(snapshot) == 1 + k + 1  # first token, then k accepted + 1 bonus
    assert res.tokens[: len(snapshot)] == snapshot
    assert len(res.tokens) - len(snapshot) <= k + 1  # at most one more round
    assert res.tokens == reference[: len(res.tokens)]
    # prefill + the first round + at most one more
    assert res.stats.target_forwards <= 3
    assert len(seen) <= 3


def test_cancel_before_the_call_produces_nothing(target: Any) -> None:
    cancel = threading.Event()
    cancel.set()
    res = SpeculativeDecoder(target).generate(PROMPT, config=DecodeConfig(max_new_tokens=20), cancel=cancel)
    assert res.tokens == []
    assert res.stop_reason == "cancelled"
    assert res.stats.target_forwards <= 1


class CancelAfterForwards(torch.nn.Module):
    """Wraps a model; sets ``cancel`` once ``n`` forwards have run (a request cancelled mid-prefill)."""

    def __init__(self, inner: Any, cancel: threading.Event, n: int) -> None:
        super().__init__()
        self.inner, self.cancel, self.n, self.calls = inner, cancel, n, 0
        self.config = inner.config

    def forward(self, input_ids: torch.Tensor, cache: Any = None, use_cache: bool = True) -> Any:
        self.calls += 1
        if self.calls >= self.n:
            self.cancel.set()
        return self.inner(input_ids=input_ids, cache=cache, use_cache=use_cache)


def test_cancel_between_prefill_chunks(target: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode_module, "PREFILL_CHUNK", 3)
    cancel = threading.Event()
    wrapped = CancelAfterForwards(target, cancel, 1)
    res = SpeculativeDecoder(wrapped).generate(PROMPT, config=DecodeConfig(max_new_tokens=20), cancel=cancel)
    assert res.stop_reason == "cancelled" and res.tokens == []
    assert wrapped.calls == 1  # 7 prompt tokens = 3 chunks; it stopped after the first
    # Cancelled before the call: a long prompt is not prefilled at all.
    res = SpeculativeDecoder(target).generate(PROMPT, config=DecodeConfig(max_new_tokens=20), cancel=cancel)
    assert res.stop_reason == "cancelled" and res.stats.target_forwards == 0


def test_a_cancelled_prefill_leaves_a_consistent_prefix_cache(
    target: Any, reference: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dspark_lsp.engine.prefix_cache import PrefixCache

    monkeypatch.setattr(decode_module, "PREFILL_CHUNK", 3)
    pc = PrefixCache(min_reuse=1)
    cancel = threading.Event()
    decoder = SpeculativeDecoder(CancelAfterForwards(target, cancel, 1), prefix_cache=pc)
    assert decoder.generate(PROMPT, config=DecodeConfig(max_new_tokens=5), cancel=cancel).tokens == []
    # The next (uncancelled) call reuses the one chunk that was prefilled and still gives the target's output.
    res = SpeculativeDecoder(target, prefix_cache=pc).generate(PROMPT, config=DecodeConfig(max_new_tokens=5))
    assert res.stats.reused_tokens == 3
    assert res.tokens == reference[:5]


def test_cancel_from_another_thread_while_decoding(target: Any, reference: list[int]) -> None:
    """The LSP worker case: decoding runs in a thread, the request is cancelled from elsewhere."""
    decoder = SpeculativeDecoder(target)
    cancel, started = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def on_tokens(ids: list[int]) -> None:
        started.set()
        assert cancel.wait(10), "the main thread never cancelled"

    def work() -> None:
        box["res"] = decoder.generate(
            PROMPT,
            config=DecodeConfig(max_new_tokens=60),
            draft=NgramDraftSource(),
            on_tokens=on_tokens,
            cancel=cancel,
        )

    worker = threading.Thread(target=work)
    worker.start()
    assert started.wait(10)
    cancel.set()
    worker.join(10)
    assert not worker.is_alive()
    res = box["res"]
    assert res.stop_reason == "cancelled"
    assert len(res.tokens) == 1  # cancelled right after the prefill's token was streamed
    assert res.tokens == reference[:1]


# --------------------------------------------------------------------------- streaming and stopping
def test_streaming_callback_sees_growing_prefixes_of_the_result(target: Any, reference: list[int]) -> None:
    seen: list[list[int]] = []
    res = SpeculativeDecoder(target).generate(
        PROMPT, config=DecodeConfig(max_new_tokens=25), draft=oracle_draft(reference), on_tokens=seen.append
    )
    assert res.tokens == reference[:25]
    assert seen[0] == res.tokens[:1]
    assert seen[-1] == res.tokens
    for a, b in zip(seen, seen[1:], strict=False):
        assert len(b) > len(a) and b[: len(a)] == a


@pytest.mark.parametrize("max_new", [1, 2, 7, 13])
def test_token_cap_is_exact_even_mid_round(target: Any, reference: list[int], max_new: int) -> None:
    res = SpeculativeDecoder(target).generate(
        PROMPT,
        config=DecodeConfig(max_new_tokens=max_new, scheduler=SchedulerConfig(fixed_k=5)),
        draft=oracle_draft(reference),
    )
    assert res.tokens == reference[:max_new]
    assert res.stop_reason == "max_tokens"


def test_zero_new_tokens(target: Any) -> None:
    res = SpeculativeDecoder(target).generate(PROMPT, config=DecodeConfig(max_new_tokens=0))
    assert res.tokens == [] and res.stop_reason == "max_tokens"


def _first_new_index(reference: list[int], start: int) -> int:
    """An index >= start whose token does not occur earlier in reference."""
    for i in range(start, len(reference)):
        if reference[i] not in reference[:i]:
            return i
    raise AssertionError("no fresh token in the reference")


@pytest.mark.parametrize("with_draft", [False, True])
def test_eos_ends_generation_and_is_not_returned(target: Any, reference: list[int], with_draft: bool) -> None:
    i = _first_new_index(reference, 3)
    eos = reference[i]
    res = SpeculativeDecoder(target).generate(
        PROMPT,
        config=DecodeConfig(max_new_tokens=60, scheduler=SchedulerConfig(fixed_k=5)),
        draft=oracle_draft(reference) if with_draft else None,
        eos_ids=[eos, 10_000],
    )
    assert res.tokens == reference[:i]
    assert res.stop_reason == "eos"


def test_eos_as_the_very_first_token(target: Any, reference: list[int]) -> None:
    res = SpeculativeDecoder(target).generate(
        PROMPT, config=DecodeConfig(max_new_tokens=10), eos_ids=[reference[0]]
    )
    assert res.tokens == [] and res.stop_reason == "eos"


def test_stop_callback_ends_generation(target: Any, reference: list[int]) -> None:
    calls: list[list[int]] = []

    def stop(ids: list[int]) -> bool:
        calls.append(list(ids))
        return len(ids) >= 5

    res = SpeculativeDecoder(target).generate(
        PROMPT,
        config=DecodeConfig(max_new_tokens=60, scheduler=SchedulerConfig(fixed_k=3)),
        draft=oracle_draft(reference),
        stop=stop,
    )
    assert res.stop_reason == "stop"
    assert 5 <= len(res.tokens) <= 5 + 3  # the round that crossed the line is kept (the caller cuts)
    assert res.tokens == reference[: len(res.tokens)]
    assert calls[-1] == res.tokens


# ------------------------------------------------------------------------------------ draft modes
@pytest.mark.parametrize(
    ("mode", "key", "want_ar", "want_parallel"),
    [
        ("semi", lambda ids: True, True, False),
        ("semi", lambda ids: False, False, True),
        ("ar", lambda ids: False, True, False),
        ("parallel", lambda ids: True, False, True),
    ],
)
def test_draft_mode_picks_ar_or_parallel_steps(
    target: Any,
    reference: list[int],
    mode: str,
    key: Callable[[list[int]], bool],
    want_ar: bool,
    want_parallel: bool,
) -> None:
    draft = oracle_draft(reference)
    keys: list[list[int]] = []

    def is_key(ids: list[int]) -> bool:
        keys.append(list(ids))
        return key(ids)

    res = SpeculativeDecoder(target).generate(
        PROMPT,
        config=DecodeConfig(max_new_tokens=20, draft_mode=mode, scheduler=SchedulerConfig(fixed_k=3)),  # type: ignore[arg-type]
        draft=draft,
        is_key=is_key,
    )
    assert res.tokens == reference[:20]
    s = res.stats
    assert (s.draft_steps_ar > 0) == want_ar
    assert (s.draft_steps_parallel > 0) == want_parallel
    assert all(p == (not want_ar) for _, _, p in draft.calls)
    if mode == "semi":
        # is_key sees the generated ids (never the prompt): they start with the first generated token.
        assert keys and all(k[:1] == res.tokens[:1] for k in keys)


def test_a_draft_without_parallel_support_is_only_asked_for_ar_steps(target: Any) -> None:
    src = ModelDraftSource(target, V)
    res = SpeculativeDecoder(target).generate(
        PROMPT, config=DecodeConfig(max_new_tokens=12, draft_mode="parallel"), draft=src
    )
    assert res.stats.draft_steps_parallel == 0 and res.stats.draft_steps_ar > 0


def test_drafting_stops_at_the_first_token_below_tau(target: Any, reference: list[int]) -> None:
    """Confidences 0.95, 0.95, 0.5, 0.95 with tau 0.9: the round verifies only the first two."""

    def script(ctx: list[int], n: int, parallel: bool) -> tuple[list[int], list[float]]:
        done = len(ctx) - len(PROMPT)
        return reference[done : done + 4], [0.95, 0.95, 0.5, 0.95]

    res = SpeculativeDecoder(target).generate(
        PROMPT,
        config=DecodeConfig(
            max_new_tokens=4, draft_mode="parallel", scheduler=SchedulerConfig(fixed_k=4, tau=0.9)
        ),
        draft=ScriptedDraft(script),
    )
    assert res.tokens == reference[:4]
    assert res.stats.proposed == 2 and res.stats.accepted == 2
    assert res.stats.target_forwards == 2  # prefill + one round (2 accepted + bonus)


def test_a_low_confidence_first_token_is_still_verified(target: Any, reference: list[int]) -> None:
    def script(ctx: list[int], n: int, parallel: bool) -> tuple[list[int], list[float]]:
        done = len(ctx) - len(PROMPT)
        return reference[done : done + 3], [0.2, 1.0, 1.0]

    res = SpeculativeDecoder(target).generate(
        PROMPT,
        config=DecodeConfig(
            max_new_tokens=3, draft_mode="parallel", scheduler=SchedulerConfig(fixed_k=3, tau=0.9)
        ),
        draft=ScriptedDraft(script),
    )
    assert res.stats.proposed == 1 and res.stats.accepted == 1
    assert res.tokens == reference[:3]


def test_ngram_draft_speeds_up_a_repetitive_continuation(target: Any, reference: list[int]) -> None:
    """The n-gram source, given the reference as extra corpus, proposes it: few target forwards."""
    draft = NgramDraftSource(extra_corpus=PROMPT + reference)
    res = SpeculativeDecoder(target).generate(
        PROMPT, config=DecodeConfig(max_new_tokens=40, scheduler=SchedulerConfig(tau=0.5)), draft=draft
    )
    assert res.tokens == reference[:40]
    assert res.stats.accepted > 0
    assert res.stats.target_forwards < 40


# ---------------------------------------------------------------------------------- relaxed mode
def _second_choice(target: Any, reference: list[int]) -> tuple[int, float]:
    """The target's second most likely token after PROMPT + reference[:1], and its probability."""
    with torch.no_grad():
        logits = target(torch.tensor([PROMPT + reference[:1]])).logits[0, -1]
    probs = torch.softmax(logits.float(), -1)
    top2 = torch.topk(probs, 2)
    assert int(top2.indices[0]) == reference[1]
    return int(top2.indices[1]), float(top2.values[1])


def _one_shot_draft(token: int) -> ScriptedDraft:
    """Proposes ``token`` in the first round only."""

    def script(ctx: list[int], n: int, parallel: bool) -> tuple[list[int], list[float]]:
        return ([token], [1.0]) if len(ctx) == len(PROMPT) + 1 else ([], [])

    return ScriptedDraft(script)


def test_relaxed_mode_is_off_by_default(target: Any, reference: list[int]) -> None:
    from dspark_lsp.service import ServiceConfig

    assert DecodeConfig().relaxed is False
    assert ServiceConfig().decode_config().relaxed is False
    token, _p = _second_choice(target, reference)
    res = SpeculativeDecoder(target).generate(
        PROMPT, config=DecodeConfig(max_new_tokens=6), draft=_one_shot_draft(token)
    )
    assert res.tokens == reference[:6]
    assert res.stats.accepted == 0


def test_relaxed_mode_accepts_a_non_argmax_token_above_the_threshold(
    target: Any, reference: list[int]
) -> None:
    token, p = _second_choice(target, reference)
    assert token != reference[1]
    decoder = SpeculativeDecoder(target)

    accepted = decoder.generate(
        PROMPT,
        config=DecodeConfig(max_new_tokens=6, relaxed=True, relaxed_threshold=p * 0.98),
        draft=_one_shot_draft(token),
    )
    assert accepted.tokens[:2] == [reference[0], token]  # lossy: differs from the target alone
    assert accepted.stats.accepted == 1

    rejected = decoder.generate(
        PROMPT,
        config=DecodeConfig(max_new_tokens=6, relaxed=True, relaxed_threshold=min(1.0, p * 1.02)),
        draft=_one_shot_draft(token),
    )
    assert rejected.tokens == reference[:6]
    assert rejected.stats.accepted == 0


# ------------------------------------------------------------------------------ prefill and config
def test_chunked_prefill_gives_the_same_tokens(
    target: Any, reference: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decode_module, "PREFILL_CHUNK", 3)
    res = SpeculativeDecoder(target).generate(PROMPT, config=DecodeConfig(max_new_tokens=10))
    assert res.tokens == reference[:10]
    # ceil(7 / 3) prefill chunks (the last yields token 1) + 9 single-token rounds.
    assert res.stats.target_forwards == 1 + 9  # the prefill counts once, however many slices


def test_the_prefill_runs_the_lm_head_for_its_last_row_only(target: Any, reference: list[int]) -> None:
    rows: list[int] = []
    hook = target.get_output_embeddings().register_forward_hook(lambda m, args, out: rows.append(args[0].shape[1]))
    try:
        res = SpeculativeDecoder(target).generate(PROMPT, config=DecodeConfig(max_new_tokens=4))
    finally:
        hook.remove()
    assert res.tokens == reference[:4]
    # A 7-token prompt: the LM head sees 1 row in the prefill (not 7), then 1 per single-token round.
    assert rows == [1, 1, 1, 1]


@pytest.mark.parametrize("prompt_len", [1, 2, 3])
def test_a_padded_prefill_still_yields_the_last_real_tokens_prediction(target: Any, prompt_len: int) -> None:
    prompt = PROMPT[:prompt_len]
    plain = SpeculativeDecoder(target).generate(prompt, config=DecodeConfig(max_new_tokens=6)).tokens
    # Short prompts are padded to 4 rows: the kept logits rows are the last real one plus the padding.
    padded = SpeculativeDecoder(target).generate(
        prompt, config=DecodeConfig(max_new_tokens=6, pad_to={1: 4, 2: 4, 3: 4})
    )
    assert padded.tokens == plain


def test_sampling_is_reproducible_with_a_seed(target: Any) -> None:
    decoder = SpeculativeDecoder(target)
    draft: DraftSource = ModelDraftSource(target, V)

    def run(seed: int) -> list[int]:
        cfg = DecodeConfig(max_new_tokens=15, temperature=1.0, seed=seed)
        return decoder.generate(PROMPT, config=cfg, draft=draft).tokens

    assert run(3) == run(3)
    assert len({tuple(run(s)) for s in range(6)}) > 1


@pytest.mark.parametrize(
    "config",
    [
        DecodeConfig(max_new_tokens=-1),
        DecodeConfig(temperature=-0.1),
        DecodeConfig(draft_mode="beam"),  # type: ignore[arg-type]
        DecodeConfig(relaxed=True, temperature=0.5),
        DecodeConfig(scheduler=SchedulerConfig(k_min=0)),
        DecodeConfig(scheduler=SchedulerConfig(k_min=4, k_max=2)),
        DecodeConfig(scheduler=SchedulerConfig(tau=0.3)),  # below tau_min
        DecodeConfig(scheduler=SchedulerConfig(fixed_k=-1)),
    ],
)
def test_invalid_configs_are_refused(target: Any, config: DecodeConfig) -> None:
    with pytest.raises(ValueError):
        SpeculativeDecoder(target).generate(PROMPT, config=config)


def test_empty_prompt_is_refused(target: Any) -> None:
    with pytest.raises(ValueError):
        SpeculativeDecoder(target).generate([])


def test_stats_serialise(target: Any, reference: list[int]) -> None:
    res = SpeculativeDecoder(target).generate(
        PROMPT,
        config=DecodeConfig(max_new_tokens=12, scheduler=SchedulerConfig(fixed_k=3)),
        draft=oracle_draft(reference),
    )
    d = json.loads(json.dumps(res.stats.to_dict()))
    assert d["new_tokens"] == 12
    # 1 (prefill) + 4 + 4 (3 accepted + bonus) + 3 (room left for 2 drafts + bonus) = 12.
    assert d["accepted_hist"] == {"2": 1, "3": 2}
    assert d["tokens_per_forward"] == pytest.approx(12 / res.stats.target_forwards, abs=1e-3)
    assert d["stop_reason"] == "max_tokens"
    assert res.stats.t_total >= res.stats.t_prefill + res.stats.t_draft + res.stats.t_verify - 1e-6

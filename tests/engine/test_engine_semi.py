"""Semi-autoregressive drafting: key positions are drafted one token at a time, the rest in parallel
blocks that end where the text reaches the next key position."""

from __future__ import annotations

from typing import Any

from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.draft import DraftSource, Proposal


class Recorder(DraftSource):
    """A confident parallel-capable model draft that records each call as (parallel, want, context length)."""

    name = "recorder"
    supports_parallel = True

    def __init__(self) -> None:
        self.calls: list[tuple[bool, int, int]] = []

    def propose(self, context: list[int], max_tokens: int, **kw: Any) -> Proposal:
        parallel = bool(kw.get("parallel"))
        n = max_tokens if parallel else 1
        self.calls.append((parallel, n, len(context)))
        return Proposal(tokens=[7] * n, confidence=[1.0] * n, forwards=1)

    def reset(self) -> None:
        self.calls.clear()


def _calls(mode: str, key_at: set[int]) -> list[tuple[bool, int, int]]:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    target = Qwen2ForCausalLM(
        Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=1)
    ).eval()
    src = Recorder()
    cfg = DecodeConfig(max_new_tokens=8, draft_mode=mode, scheduler=SchedulerConfig(fixed_k=5, tau=0.5))  # type: ignore[arg-type]
    # is_key sees the generated tokens plus the draft so far: key when that count is in key_at.
    SpeculativeDecoder(target).generate([1, 2, 3], config=cfg, draft=src, is_key=lambda ids: len(ids) in key_at)
    return src.calls


def test_parallel_block_stops_at_the_next_key_position() -> None:
    # After the prefill 1 token is generated; draft positions are then counts 1, 2, 3, ...; 3 is key.
    calls = _calls("semi", key_at={3})
    # Parallel block of 5 from count 1, cut before count 3 (2 tokens kept), AR at 3, parallel for the rest.
    assert [(p, n) for p, n, _ in calls[:3]] == [(True, 5), (False, 1), (True, 2)]
    assert [c for _, _, c in calls[:3]] == [4, 6, 7]  # the prompt (3) + 1 generated, + 2, + 3


def test_ablations_do_not_cut() -> None:
    par = _calls("parallel", key_at={3})
    assert par[0][:2] == (True, 5) and par[1][2] != par[0][2] + 2  # no call right after 2 tokens
    ar = _calls("ar", key_at={3})
    assert [(p, n) for p, n, _ in ar[:5]] == [(False, 1)] * 5
    assert [c for _, _, c in ar[:5]] == [4, 5, 6, 7, 8]


class OneAtATime(Recorder):
    """A model draft that always stops after one (confident) token, however many were asked for."""

    def propose(self, context: list[int], max_tokens: int, **kw: Any) -> Proposal:
        self.calls.append((bool(kw.get("parallel")), max_tokens, len(context)))
        return Proposal(tokens=[7], confidence=[1.0], forwards=1)


def test_a_short_proposal_does_not_end_the_round() -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    target = Qwen2ForCausalLM(
        Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=1)
    ).eval()
    src = OneAtATime()
    cfg = DecodeConfig(max_new_tokens=8, draft_mode="parallel", scheduler=SchedulerConfig(fixed_k=4, tau=0.5))
    SpeculativeDecoder(target).generate([1, 2, 3], config=cfg, draft=src)
    # The first round asks for 4, gets 1, and asks again for the remaining 3, 2, 1.
    assert [n for _, n, _ in src.calls[:4]] == [4, 3, 2, 1]
    assert [c for _, _, c in src.calls[:4]] == [4, 5, 6, 7]


def test_mode_ablation_replays_every_mode_exactly(tiny_tokenizer: Any) -> None:
    from dspark_lsp.bench.mode_ablation import MODES, run
    from dspark_lsp.drafts.ngram import NgramDraftSource

    text = "<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>"
    prompt = tiny_tokenizer(text)["input_ids"]
    target = tiny_tokenizer("a + b\n")["input_ids"]
    totals = run([{"prompt": prompt, "target": target}], tiny_tokenizer, NgramDraftSource(), {1: 10.0, 8: 10.0})
    assert set(totals) == set(MODES)
    for t in totals.values():
        assert t.tokens == len(target) and 1 <= t.forwards <= len(target) + 1
        assert set(t.by_language) == {"python"} and t.as_dict()["est_tokens_per_s"] > 0


def test_mode_ablation_replays_named_variants_with_their_own_k(tiny_tokenizer: Any) -> None:
    from dspark_lsp.bench.mode_ablation import Variant, run
    from dspark_lsp.drafts.ngram import NgramDraftSource

    text = "<|fim_prefix|>def add(a, b):\n    return a + b\n\nx = add(<|fim_suffix|>\n<|fim_middle|>"
    prompt = tiny_tokenizer(text)["input_ids"]
    target = tiny_tokenizer("1, 2)\nprint(x)\n")["input_ids"]
    variants = {"one": Variant(NgramDraftSource(), "parallel", 1), "sched": Variant(NgramDraftSource(), "semi")}
    item = {"prompt": prompt, "target": target, "language": "python"}
    totals = run([item], tiny_tokenizer, None, {1: 10.0, 8: 10.0}, variants=variants)
    assert set(totals) == {"one", "sched"}
    for t in totals.values():
        assert t.tokens == len(target) and set(t.by_language) == {"python"}
    # A fixed k of 1 can never take more than two tokens per forward.
    assert totals["one"].tokens / totals["one"].forwards <= 2.0


def test_engine_continuations_are_the_targets_greedy_tokens(tiny_models: Any, tiny_target: Any,
                                                            greedy_reference: Any) -> None:
    from dspark_lsp.bench.acceptance import engine_continuations

    prompts = [("python", [5, 9, 13, 40]), ("cpp", [7, 7, 8])]
    data = engine_continuations(str(tiny_models[0]), prompts, 6, "float32", 1)
    items = data["items"]
    assert isinstance(items, list) and [it["language"] for it in items] == ["python", "cpp"]
    for it, (_, p) in zip(items, prompts, strict=True):
        want = greedy_reference(tiny_target, p, 6)
        assert it["target"][: len(want)] == want


def test_recalibration_pairs_come_from_the_replayed_rounds(tiny_tokenizer: Any) -> None:
    from dspark_lsp.drafts.ngram import NgramDraftSource
    from dspark_lsp.training.recalibrate import replay_pairs

    text = "<|fim_prefix|>a = [1, 2, 3, 4, 5, 6]\nb = [1, 2, 3, 4, 5, 6]\nc = [<|fim_suffix|>\n<|fim_middle|>"
    prompt = tiny_tokenizer(text)["input_ids"]
    target = tiny_tokenizer("1, 2, 4]\n")["input_ids"]
    item = {"prompt": prompt, "target": target, "language": "python"}
    pairs = replay_pairs(NgramDraftSource(), [item], tiny_tokenizer, [], {1: 10.0, 8: 10.0}, ("ar", "semi"))
    assert pairs and all(0.0 < c <= 1.0 for c, _, _ in pairs)
    assert any(ok for _, ok, _ in pairs) and not all(ok for _, ok, _ in pairs)  # "1, 2," lands, " 3" does not
    assert all(slot == -1 for _, _, slot in pairs)  # the lookup states no calibration slot

"""A prefill slice stops between layers once its cancel flag is set (engine/interrupt.py): the layers after
the flag never run, every layer's cache goes back to where the slice began, what earlier slices prefilled
is kept for reuse, and the next request's output is what a fresh decoder gives."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.config import DecodeConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.interrupt import ForwardInterrupted, check_interrupt, interruptible
from dspark_lsp.engine.kv import crop_layers, forward, new_cache
from dspark_lsp.engine.prefix_cache import PrefixCache
from dspark_lsp.models.lean_forward import use_lean_forward

V = 64
LAYERS = 4


@pytest.fixture(scope="module")
def target(random_lm: Any) -> Any:
    model = random_lm(31, vocab_size=V, hidden=32, layers=LAYERS, head_scale=16.0)
    assert use_lean_forward(model)  # the forward that checks between layers
    return model


def _count_layers(model: Any) -> tuple[list[int], list[Any]]:
    """Which layers ran (their MLP's down projection was called), in order."""
    ran: list[int] = []
    handles = [layer.mlp.down_proj.register_forward_pre_hook(lambda _m, _a, i=i: ran.append(i))
               for i, layer in enumerate(model.model.layers)]
    return ran, handles


def test_check_interrupt_only_inside_the_block_and_only_once_set() -> None:
    event = threading.Event()
    check_interrupt()  # no flag: nothing happens
    with interruptible(event):
        check_interrupt()
        event.set()
        with pytest.raises(ForwardInterrupted):
            check_interrupt()
        with interruptible(None):  # a nested block without a flag (a decode step) runs on
            check_interrupt()
    check_interrupt()  # the flag is this block's only


def test_a_cancelled_slice_stops_between_layers_and_keeps_the_earlier_slices(target: Any) -> None:
    prompt = [(5 * i + 2) % V for i in range(48)]
    pc = PrefixCache(max_entries=4, max_tokens=4096, min_reuse=4)
    engine = SpeculativeDecoder(target, prefix_cache=pc)
    cancel = threading.Event()
    ran, handles = _count_layers(target)
    # The flag goes up while layer 1 of the second 16-token slice runs (as a request arriving would set it).
    calls = {"n": 0}

    def raise_flag(_m: Any, _a: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            cancel.set()

    handles.append(target.model.layers[1].mlp.down_proj.register_forward_pre_hook(raise_flag))
    try:
        res = engine.generate(prompt, config=DecodeConfig(max_new_tokens=0, prefill_chunk=16), cancel=cancel)
    finally:
        for h in handles:
            h.remove()
    assert res.stats.stop_reason == "cancelled"
    # slice 1: every layer; slice 2: layers 0 and 1, then the check before layer 2 stopped it
    assert ran == [*range(LAYERS), 0, 1]
    # the cache kept covers exactly the first slice, in every layer
    cache, reused = pc.take(prompt)
    assert reused == 16 and cache is not None
    assert {int(layer.get_seq_length()) for layer in cache.layers} == {16}
    pc.put(prompt[:16], cache)

    # the next request reuses it and decodes what a decoder that never saw the interruption decodes
    config = DecodeConfig(max_new_tokens=8)
    again = engine.generate(prompt, config=config)
    assert again.stats.reused_tokens == 16
    assert again.tokens == SpeculativeDecoder(target).generate(prompt, config=config).tokens


def test_only_forwards_inside_the_block_check_the_flag(target: Any) -> None:
    """The engine wraps only the prefill's slices: its decode and verify forwards run outside a block."""
    cache = new_cache(target)
    event = threading.Event()
    event.set()
    with torch.no_grad():
        logits = forward(target, [1, 2, 3], cache)  # no interruptible block around it: runs to the end
    assert logits.shape == (3, V)
    with torch.no_grad(), interruptible(event), pytest.raises(ForwardInterrupted):
        forward(target, [4], cache)


def test_crop_layers_shortens_each_layer_by_its_own_length(target: Any) -> None:
    cache = new_cache(target)
    with torch.inference_mode():  # as the engine runs (its cache tensors are inference tensors)
        forward(target, list(range(10)), cache)
        # a forward stopped after layer 0: layer 0 holds 6 more positions than the others
        k = cache.layers[0].keys
        cache.layers[0].update(torch.zeros_like(k[:, :, :6]), torch.zeros_like(k[:, :, :6]))
    assert [int(layer.get_seq_length()) for layer in cache.layers] == [16] + [10] * (LAYERS - 1)
    crop_layers(cache, 10)
    assert [int(layer.get_seq_length()) for layer in cache.layers] == [10] * LAYERS
    crop_layers(cache, 4)
    assert [int(layer.get_seq_length()) for layer in cache.layers] == [4] * LAYERS


def _stop_in_slice(engine: SpeculativeDecoder, target: Any, prompt: list[int], slice_no: int, layer: int,
                   draft: Any = None) -> Any:
    """Run a warm-up (no new tokens, 16-token slices) whose flag goes up while ``layer`` of slice
    ``slice_no`` (counted from 1) runs, as a request arriving then would set it."""
    cancel = threading.Event()
    calls = {"n": 0}

    def raise_flag(_m: Any, _a: Any) -> None:
        calls["n"] += 1
        if calls["n"] == slice_no:
            cancel.set()

    handle = target.model.layers[layer].mlp.down_proj.register_forward_pre_hook(raise_flag)
    try:
        return engine.generate(prompt, config=DecodeConfig(max_new_tokens=0, prefill_chunk=16), cancel=cancel,
                               draft=draft)
    finally:
        handle.remove()


def _request(engine: SpeculativeDecoder, target: Any, prompt: list[int]) -> Any:
    """The request after the stops: checks it decodes what a fresh decoder does; returns its stats."""
    config = DecodeConfig(max_new_tokens=8, prefill_chunk=16)
    res = engine.generate(prompt, config=config)
    assert res.tokens == SpeculativeDecoder(target).generate(prompt, config=config).tokens
    return res.stats


def test_a_stopped_slice_is_finished_from_the_layer_it_stopped_before(target: Any) -> None:
    prompt = [(7 * i + 3) % V for i in range(40)]
    pc = PrefixCache(max_entries=4, max_tokens=4096, min_reuse=4)
    engine = SpeculativeDecoder(target, prefix_cache=pc)
    assert _stop_in_slice(engine, target, prompt, 2, 1).stats.stop_reason == "cancelled"
    ran, handles = _count_layers(target)
    config = DecodeConfig(max_new_tokens=8, prefill_chunk=16)
    try:
        again = engine.generate(prompt, config=config)
    finally:
        for h in handles:
            h.remove()
    assert again.stats.reused_tokens == 16 and again.stats.resumed_tokens == 16
    # slice 2 runs only layers 2 and 3 (0 and 1 ran before the stop), then the last 8 prompt tokens
    # go through every layer, then the decode's forwards
    assert ran[: 2 + LAYERS] == [2, 3, *range(LAYERS)]
    fresh = SpeculativeDecoder(target).generate(prompt, config=config)
    assert again.tokens == fresh.tokens
    # the stopped slice is used once: the same prompt again reuses the stored cache instead
    assert engine.generate(prompt, config=config).stats.resumed_tokens == 0


def test_a_prompt_that_parts_inside_the_slice_takes_only_the_rows_it_shares(target: Any) -> None:
    prompt = [(3 * i + 1) % V for i in range(48)]
    engine = SpeculativeDecoder(target, prefix_cache=PrefixCache(max_entries=4, max_tokens=4096, min_reuse=4))
    _stop_in_slice(engine, target, prompt, 2, 2)
    other = prompt[:21] + [(t + 5) % V for t in prompt[21:]]  # same as the stopped slice for 5 of its rows
    stats = _request(engine, target, other)
    assert stats.reused_tokens == 16 and stats.resumed_tokens == 5


def test_a_prompt_that_parts_before_the_slice_runs_every_layer(target: Any) -> None:
    prompt = [(5 * i + 4) % V for i in range(40)]
    engine = SpeculativeDecoder(target, prefix_cache=PrefixCache(max_entries=4, max_tokens=4096, min_reuse=4))
    _stop_in_slice(engine, target, prompt, 2, 1)
    other = prompt[:10] + [(t + 1) % V for t in prompt[10:]]  # differs inside the slice the cache kept
    assert _request(engine, target, other).resumed_tokens == 0


def test_a_resumed_slice_stopped_again_is_kept_from_its_later_layer(target: Any) -> None:
    prompt = [(11 * i + 6) % V for i in range(40)]
    engine = SpeculativeDecoder(target, prefix_cache=PrefixCache(max_entries=4, max_tokens=4096, min_reuse=4))
    _stop_in_slice(engine, target, prompt, 2, 0)  # slice 2 stops before layer 1
    # the next warm-up finishes it from layer 1 and is stopped again before layer 3 (the hook on layer 2
    # fires first for the resumed slice)
    second = _stop_in_slice(engine, target, prompt, 1, 2)
    assert second.stats.stop_reason == "cancelled" and second.stats.resumed_tokens == 0
    partial = engine._partial
    assert partial is not None and partial.start == 16 and partial.layer == 3
    assert _request(engine, target, prompt).resumed_tokens == 16


def test_resume_gives_the_logits_of_a_whole_forward(target: Any) -> None:
    ids = [(9 * i + 2) % V for i in range(24)]
    whole, part = new_cache(target), new_cache(target)
    event = threading.Event()
    with torch.inference_mode():
        expected = forward(target, ids, whole)
        forward(target, ids[:8], part)
        hook = target.model.layers[1].mlp.down_proj.register_forward_pre_hook(lambda _m, _a: event.set())
        try:
            with interruptible(event), pytest.raises(ForwardInterrupted) as stop:
                forward(target, ids[8:], part)
        finally:
            hook.remove()
        assert stop.value.layer == 2 and stop.value.hidden is not None
        assert [int(layer.get_seq_length()) for layer in part.layers] == [24, 24, 8, 8]
        logits, h = target.dspark_lean.resume(stop.value.hidden, 2, part, keep=0)
    assert [int(layer.get_seq_length()) for layer in part.layers] == [24] * LAYERS
    torch.testing.assert_close(logits[0].float(), expected[8:], rtol=1e-4, atol=1e-4)
    assert h.shape == (1, 16, target.config.hidden_size)


def test_warm_ups_stopped_again_and_again_never_lose_what_was_prefilled(target: Any) -> None:
    """Typing at a file's end: each keystroke's warm-up (the prompt grown by a token) is stopped at some
    layer of some slice. What the prefix cache covers never shrinks, and the request at the end decodes
    what a fresh decoder does."""
    import random

    rng = random.Random(5)
    pc = PrefixCache(max_entries=4, max_tokens=4096, min_reuse=4)
    engine = SpeculativeDecoder(target, prefix_cache=pc)
    prompt = [(13 * i + 7) % V for i in range(120)]
    covered = 0
    for _ in range(14):
        prompt = prompt + [rng.randrange(V)]
        slice_no, layer = rng.randint(1, 3), rng.randrange(LAYERS)
        _stop_in_slice(engine, target, prompt, slice_no, layer)
        now = pc.covered(prompt)
        assert now >= covered
        covered = now
    assert covered > 48  # the stops let the warm-ups get somewhere
    _request(engine, target, prompt)


def test_a_dropped_partial_is_not_resumed(target: Any) -> None:
    """drop_partial (what the service's close calls) forgets the stopped slice: the request prefills it anew."""
    prompt = [(17 * i + 9) % V for i in range(40)]
    engine = SpeculativeDecoder(target, prefix_cache=PrefixCache(max_entries=4, max_tokens=4096, min_reuse=4))
    _stop_in_slice(engine, target, prompt, 2, 2)
    engine.drop_partial()
    res = engine.generate(prompt, config=DecodeConfig(max_new_tokens=4, prefill_chunk=16))
    assert res.stats.reused_tokens == 16 and res.stats.resumed_tokens == 0


class _ReadsFeatures(NgramDraftSource):
    """An n-gram draft that asks for the target's hidden states (as the feature draft does)."""

    wants_features = True

    def set_features(self, start: int, rows: torch.Tensor) -> None:
        pass


def test_a_resumed_slice_stores_the_hidden_states_a_whole_forward_gives(target: Any) -> None:
    """A feature draft reads the target's last hidden states of every prompt row: the rows a resumed slice
    finished are stored as a whole forward computes them."""
    prompt = [(19 * i + 5) % V for i in range(40)]
    pc = PrefixCache(max_entries=4, max_tokens=4096, min_reuse=4)
    engine = SpeculativeDecoder(target, prefix_cache=pc)
    draft = _ReadsFeatures()
    _stop_in_slice(engine, target, prompt, 2, 1, draft=draft)
    res = engine.generate(prompt, config=DecodeConfig(max_new_tokens=1, prefill_chunk=16), draft=draft)
    assert res.stats.resumed_tokens == 16
    _, covered, stored = pc.take_with_features(prompt + res.tokens)
    assert stored is not None and stored[0] == 0 and covered >= 32
    with torch.inference_mode():
        fresh = target(input_ids=torch.tensor([prompt]), output_hidden_states=True).hidden_states[-1][0]
    torch.testing.assert_close(stored[1][16:32], fresh[16:32], rtol=1e-4, atol=1e-4)

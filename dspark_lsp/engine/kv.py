"""Thin, version-tolerant helpers over Hugging Face KV caches.

transformers renamed the forward keyword (``past_key_values`` → ``cache``) and changed the meaning of
``DynamicCache.crop`` (absolute length → negative count to remove) across releases; every engine module
goes through these helpers so the decode loop does not care which release is installed.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers import DynamicCache


def new_cache(model: Any) -> DynamicCache:
    try:
        return DynamicCache(config=model.config)
    except (TypeError, AttributeError):  # older releases take no config; stand-in models have none
        return DynamicCache()


def cache_len(cache: DynamicCache | None) -> int:
    return 0 if cache is None else int(cache.get_seq_length())


def crop(cache: DynamicCache, new_len: int) -> None:
    """Shrink ``cache`` to its first ``new_len`` positions (no-op when already that short)."""
    cur = cache_len(cache)
    if new_len >= cur:
        return
    try:
        cache.crop(new_len - cur)  # newer API: negative = number of tokens to remove
    except ValueError:
        cache.crop(new_len)  # older API: absolute length


_KWARG: dict[type, str] = {}


def _cache_kwarg(model: Any) -> str:
    cls = type(model)
    if cls not in _KWARG:
        params = inspect.signature(cls.forward).parameters
        _KWARG[cls] = "cache" if "cache" in params else "past_key_values"
    return _KWARG[cls]


@torch.inference_mode()
def _run(model: Any, ids: list[int], cache: DynamicCache, hidden: bool) -> Any:
    device = next(model.parameters()).device
    x = torch.tensor([ids], dtype=torch.long, device=device)
    kwargs: dict[str, Any] = {_cache_kwarg(model): cache, "use_cache": True}
    if hidden:  # only when asked: stand-in targets (tests, replays) need not know the keyword
        kwargs["output_hidden_states"] = True
    return model(input_ids=x, **kwargs)


def forward(model: Any, ids: list[int], cache: DynamicCache) -> torch.Tensor:
    """Run ``ids`` through ``model`` on top of ``cache`` (extended in place); returns logits [len(ids), V]."""
    return _run(model, ids, cache, False).logits[0].float()


def forward_hidden(model: Any, ids: list[int], cache: DynamicCache) -> tuple[torch.Tensor, torch.Tensor]:
    """Like :func:`forward`, plus the last hidden states [len(ids), d] the LM head read (the features a
    feature-conditioned draft consumes)."""
    out = _run(model, ids, cache, True)
    return out.logits[0].float(), out.hidden_states[-1][0].float()


def cache_nbytes(cache: DynamicCache | None) -> int:
    """Bytes held by the key/value tensors of ``cache`` (for the memory bound)."""
    if cache is None:
        return 0
    total = 0
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total

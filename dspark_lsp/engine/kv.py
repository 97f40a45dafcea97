"""Thin, version-tolerant helpers over Hugging Face KV caches.

transformers renamed the forward keyword (``past_key_values`` → ``cache``) and changed the meaning of
``DynamicCache.crop`` (absolute length → negative count to remove) across releases; every engine module
goes through these helpers so the decode loop does not care which release is installed.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

try:  # transformers >= 4.56 keeps one layer object per decoder layer
    from transformers.cache_utils import DynamicLayer
except ImportError:  # pragma: no cover - older releases: plain DynamicCache only
    DynamicLayer = None  # type: ignore[misc,assignment]


if DynamicLayer is not None:

    class PreallocatedLayer(DynamicLayer):
        """A KV cache layer that writes into a buffer grown by doubling, instead of concatenating.

        DynamicLayer concatenates every forward's keys onto the whole cache (a copy of the cache per
        layer per token) and crops by slicing; here a forward writes its rows in place at the current
        length, and rollback after a rejected draft only moves the length back. ``keys``/``values`` are
        always views of the first ``length`` positions, so everything reading them sees what it saw.
        """

        def __init__(self) -> None:
            super().__init__()
            self._k: torch.Tensor | None = None
            self._v: torch.Tensor | None = None
            self._len = 0

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
                   ) -> tuple[torch.Tensor, torch.Tensor]:
            n = key_states.shape[-2]
            k, v, past = self.reserve(n, key_states, value_states)
            k[..., past : past + n, :] = key_states
            v[..., past : past + n, :] = value_states
            self.advance(n)
            return k[..., : self._len, :], v[..., : self._len, :]

        def reserve(self, n: int, key_like: torch.Tensor, value_like: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, int]:
            """The key and value buffers with room for ``n`` more positions (grown by doubling), and the
            current length: the caller writes its rows at that length, then calls :meth:`advance`. Only
            the shapes, dtypes and device of ``key_like`` / ``value_like`` are read (a forward that writes
            the buffers itself passes tensors of the final layout, [batch, heads, any, head_dim])."""
            if not self.is_initialized:
                self.lazy_initialization(key_like, value_like)
            need = self._len + n
            if self._k is None or need > self._k.shape[-2]:
                cap = max(256, need, 2 * (0 if self._k is None else self._k.shape[-2]))
                k = key_like.new_empty((*key_like.shape[:-2], cap, key_like.shape[-1]))
                v = value_like.new_empty((*value_like.shape[:-2], cap, value_like.shape[-1]))
                if self._k is not None and self._v is not None and self._len:
                    k[..., : self._len, :] = self._k[..., : self._len, :]
                    v[..., : self._len, :] = self._v[..., : self._len, :]
                self._k, self._v = k, v
            assert self._v is not None
            return self._k, self._v, self._len

        def advance(self, n: int) -> None:
            """Count ``n`` positions written after the current length (see :meth:`reserve`)."""
            assert self._k is not None and self._v is not None
            self._len += n

        # ``keys`` / ``values`` are views of the first ``length`` positions, made when read: a decode
        # forward advances 24 layers and reads none of them (the C++ layer writes the buffers), and two
        # slices per layer were ~1 ms of Python a forward. Assignments (DynamicLayer's own initialisation)
        # land in __dict__ and are what is read until the buffers exist.
        @property  # type: ignore[override]
        def keys(self) -> torch.Tensor | None:
            k = self.__dict__.get("_k")
            return self.__dict__.get("_keys") if k is None else k[..., : self._len, :]

        @keys.setter
        def keys(self, value: torch.Tensor | None) -> None:
            self.__dict__["_keys"] = value

        @property  # type: ignore[override]
        def values(self) -> torch.Tensor | None:
            v = self.__dict__.get("_v")
            return self.__dict__.get("_values") if v is None else v[..., : self._len, :]

        @values.setter
        def values(self, value: torch.Tensor | None) -> None:
            self.__dict__["_values"] = value

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:  # as DynamicLayer: only a negative count (tokens to remove) is defined
                raise ValueError("crop takes a negative count of tokens to remove")
            if tokens_to_remove == 0 or not self.is_initialized or self._k is None or self._v is None:
                return
            self._len = max(0, self._len + tokens_to_remove)

        def get_seq_length(self) -> int:
            return self._len if self._k is not None else 0


def new_cache(model: Any) -> DynamicCache:
    try:
        cache = DynamicCache(config=model.config)
    except (TypeError, AttributeError):  # older releases take no config; stand-in models have none
        return DynamicCache()
    layers = getattr(cache, "layers", None)
    # Full-attention layers only (a sliding-window layer keeps its own rules).
    if DynamicLayer is not None and layers and all(type(layer) is DynamicLayer for layer in layers):
        cache.layers = [PreallocatedLayer() for _ in layers]
    return cache


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


def crop_layers(cache: DynamicCache, new_len: int) -> None:
    """Shrink every layer of ``cache`` to at most ``new_len`` positions, each by its own length: after a
    forward stopped between layers (engine/interrupt.py) the first layers hold more than the rest, and
    :func:`crop`, which reads the length off the first layer, would cut the others short."""
    layers = getattr(cache, "layers", None)
    if layers is None:  # releases before the per-layer cache objects: the lean forward is not used there
        crop(cache, new_len)
        return
    for layer in layers:
        n = int(layer.get_seq_length())
        if n > new_len:
            layer.crop(new_len - n)  # a negative count: tokens to remove from this layer


_KWARG: dict[type, str] = {}
_KEEPS: dict[type, bool] = {}


def _cache_kwarg(model: Any) -> str:
    cls = type(model)
    if cls not in _KWARG:
        params = inspect.signature(cls.forward).parameters
        _KWARG[cls] = "cache" if "cache" in params else "past_key_values"
    return _KWARG[cls]


def _takes_logits_to_keep(model: Any) -> bool:
    cls = type(model)
    if cls not in _KEEPS:
        _KEEPS[cls] = "logits_to_keep" in inspect.signature(cls.forward).parameters
    return _KEEPS[cls]


@dataclass
class TreeRows:
    """Explicit layout for a forward whose rows are not a plain continuation: each row's position id and
    an additive attention mask [1, 1, rows, cached + rows] (see engine.alternates)."""

    positions: list[int]
    mask: torch.Tensor


@torch.inference_mode()
def _run(model: Any, ids: list[int], cache: DynamicCache, hidden: bool, tree: TreeRows | None, keep: int) -> Any:
    device = next(model.parameters()).device
    x = torch.tensor([ids], dtype=torch.long, device=device)
    kwargs: dict[str, Any] = {_cache_kwarg(model): cache, "use_cache": True}
    if keep and _takes_logits_to_keep(model):
        # Only the last ``keep`` rows' logits: a prefill needs one row, and the LM head (151,936 x 896
        # for Qwen2.5-0.5B) is over a quarter of the prefill's arithmetic when run for every row.
        kwargs["logits_to_keep"] = keep
    if hidden:  # only when asked: stand-in targets (tests, replays) need not know the keyword
        kwargs["output_hidden_states"] = True
    if tree is not None:
        # transformers uses a 4-D mask as given (masking_utils: "already prepared, or custom").
        kwargs["attention_mask"] = tree.mask.to(device)
        kwargs["position_ids"] = torch.tensor([tree.positions], dtype=torch.long, device=device)
    return model(input_ids=x, **kwargs)


def forward(
    model: Any, ids: list[int], cache: DynamicCache, tree: TreeRows | None = None, keep: int = 0
) -> torch.Tensor:
    """Run ``ids`` through ``model`` on top of ``cache`` (extended in place); returns logits [len(ids), V],
    or only the last ``keep`` rows when ``keep`` > 0 (models that cannot skip rows compute them all and
    the extra rows are dropped here, so callers always get ``keep`` rows)."""
    logits = _run(model, ids, cache, False, tree, keep).logits[0]
    return (logits[-keep:] if keep else logits).float()


def forward_hidden(
    model: Any, ids: list[int], cache: DynamicCache, tree: TreeRows | None = None, keep: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Like :func:`forward`, plus the last hidden states [len(ids), d] the LM head read (the features a
    feature-conditioned draft consumes; always every row, whatever ``keep`` says of the logits)."""
    out = _run(model, ids, cache, True, tree, keep)
    logits = out.logits[0]
    return (logits[-keep:] if keep else logits).float(), out.hidden_states[-1][0].float()


def model_dtype(model: Any) -> torch.dtype:
    """The dtype attention runs in (packed linears may hide their weights; the embedding never does)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    weight = getattr(emb, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.is_floating_point():
        return weight.dtype
    return torch.float32


def move_entry(cache: DynamicCache, src: int, dst: int) -> None:
    """Copy the key/value entries at position ``src`` to ``dst`` in every layer (an accepted alternate
    moves next to the chain tokens it follows; the caller then crops)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        pairs = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in layers]
    else:  # releases before the per-layer cache objects keep two lists
        pairs = list(zip(getattr(cache, "key_cache", []), getattr(cache, "value_cache", []), strict=True))
    if not pairs:
        raise NotImplementedError("cannot move entries in this KV cache type")
    for keys, values in pairs:
        if isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and keys.dim() == 4:
            keys[:, :, dst] = keys[:, :, src]
            values[:, :, dst] = values[:, :, src]


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

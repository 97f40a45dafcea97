"""A bounded LRU store of target KV caches keyed by the token ids they cover.

Consecutive completion requests in one document share a long prompt prefix (the user typed a few
characters). Instead of prefilling the whole prompt again (~2 s for 256 tokens on a 2-core CPU), the
decoder takes the stored cache with the longest common prefix, crops it to that prefix and prefills only
the rest. Entries are *taken out* while in use (no copies: a cache is megabytes) and put back afterwards.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from dspark_lsp.engine.kv import cache_len, cache_nbytes, crop


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# (first position, rows): the target's last hidden states for positions first.. of the entry's ids, kept
# for a feature-conditioned draft so a reused prefix does not leave it blind.
Features = tuple[int, torch.Tensor]


@dataclass
class _Entry:
    ids: list[int]
    cache: DynamicCache
    features: Features | None = None
    held: int = 0  # held_bytes when stored (taking an entry out is the only way its buffers change)


# Bytes the stored entries may hold, buffers and features included. A cropped entry keeps its whole
# buffer (kv.PreallocatedLayer grows by doubling and crops by moving its length), so the token bound alone
# undercounts: 4 entries of the default target's 2,048-token bound are ~50 MB of keys and values by their
# length, up to twice that by their buffers.
MAX_BYTES = 256 << 20


def held_bytes(cache: DynamicCache, features: Features | None = None) -> int:
    """Bytes an entry keeps alive: the whole storage behind each layer's keys/values (not only the first
    ``length`` positions its views show), plus the stored feature rows; each storage counted once."""
    tensors: list[torch.Tensor] = []
    for layer in getattr(cache, "layers", []):
        # PreallocatedLayer's buffers (its keys/values are views of them), else DynamicLayer's tensors
        tensors += [t for t in (layer.__dict__.get("_k"), layer.__dict__.get("_v")) if isinstance(t, torch.Tensor)]
        tensors += [t for t in (getattr(layer, "keys", None), getattr(layer, "values", None)) if isinstance(t, torch.Tensor)]
    if features is not None:
        tensors.append(features[1])
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


class PrefixCache:
    """LRU of (covered ids, cache). Bounded by entry count, total cached tokens AND bytes held."""

    def __init__(
        self, max_entries: int = 4, max_tokens: int = 8192, min_reuse: int = 8, max_bytes: int = MAX_BYTES
    ) -> None:
        if max_entries < 1 or max_tokens < 1 or max_bytes < 1:
            raise ValueError("prefix cache bounds must be positive")
        self.max_entries = max_entries
        self.max_tokens = max_tokens
        self.max_bytes = max_bytes
        # Reusing a handful of tokens is not worth keeping a cache alive for.
        self.min_reuse = min_reuse
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_key = 0
        self._lock = threading.Lock()

    def take(self, ids: list[int]) -> tuple[DynamicCache | None, int]:
        """Remove and return the entry sharing the longest prefix with ``ids``, cropped to that prefix."""
        cache, n, _ = self.take_with_features(ids)
        return cache, n

    def take_with_features(
        self, ids: list[int], *, keep_others: bool = False
    ) -> tuple[DynamicCache | None, int, Features | None]:
        """As :meth:`take`, plus the entry's stored features cropped to the same prefix (or None).

        ``keep_others``: when the best entry holds tokens past the shared prefix (another prompt's KV),
        return a copy of its prefix and leave it stored; an entry that ``ids`` merely extends is taken as
        usual. A second prompt warmed for the same document (the window after its next slide) would
        otherwise consume the entry the current prompt's requests reuse."""
        with self._lock:
            best_key, best_len = None, 0
            for key, entry in self._entries.items():
                n = common_prefix_len(entry.ids, ids)
                if n > best_len:
                    best_key, best_len = key, n
            if best_key is None or best_len < self.min_reuse:
                return None, 0, None
            if keep_others and best_len < len(self._entries[best_key].ids):
                # Copied under the lock: a stored entry is never in use, and nobody may take it meanwhile.
                stored = self._entries[best_key]
                entry = _Entry(stored.ids, copy.deepcopy(stored.cache), stored.features)
            else:
                entry = self._entries.pop(best_key)
        crop(entry.cache, best_len)
        feats = entry.features
        if feats is not None:
            first, rows = feats
            feats = (first, rows[: max(0, best_len - first)]) if best_len > first else None
        return entry.cache, best_len, feats

    def covered(self, ids: list[int]) -> int:
        """How many leading tokens of ``ids`` the best stored entry already holds (nothing is taken)."""
        with self._lock:
            return max((common_prefix_len(e.ids, ids) for e in self._entries.values()), default=0)

    def put(self, ids: list[int], cache: DynamicCache, features: Features | None = None) -> None:
        if cache_len(cache) != len(ids):
            raise ValueError(f"cache covers {cache_len(cache)} tokens, ids has {len(ids)}")
        if len(ids) > self.max_tokens:
            return
        held = held_bytes(cache, features)
        if held > self.max_bytes:
            return
        with self._lock:
            self._entries[self._next_key] = _Entry(list(ids), cache, features, held)
            self._next_key += 1
            self._evict()

    def _evict(self) -> None:
        while (
            len(self._entries) > self.max_entries
            or self.total_tokens > self.max_tokens
            or self.held_bytes > self.max_bytes
        ):
            self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    @property
    def total_tokens(self) -> int:
        return sum(len(e.ids) for e in self._entries.values())

    @property
    def held_bytes(self) -> int:
        """Bytes the entries keep alive (their whole buffers and features): what max_bytes bounds."""
        return sum(e.held for e in self._entries.values())

    @property
    def nbytes(self) -> int:
        return sum(cache_nbytes(e.cache) for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

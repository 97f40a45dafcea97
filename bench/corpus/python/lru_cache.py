"""A small LRU cache with optional per-entry expiry.

The cache keeps entries in a doubly linked list ordered from most to least
recently used, plus a dict for O(1) lookup.  Entries may carry a time-to-live;
expired entries are dropped lazily when they are touched or when the cache
needs room.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Generic, Iterator, Optional, Tuple, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class CacheError(Exception):
    """Raised when the cache is configured or used incorrectly."""


@dataclass
class _Node(Generic[K, V]):
    key: K
    value: V
    expires_at: Optional[float] = None
    prev: Optional["_Node[K, V]"] = field(default=None, repr=False)
    next: Optional["_Node[K, V]"] = field(default=None, repr=False)

    def is_expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    expirations: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class LRUCache(Generic[K, V]):
    """Least-recently-used cache with a fixed capacity.

    >>> cache = LRUCache(capacity=2)
    >>> cache.put("a", 1)
    >>> cache.put("b", 2)
    >>> cache.get("a")
    1
    >>> cache.put("c", 3)   # evicts "b", the least recently used
    >>> "b" in cache
    False
    """

    def __init__(
        self,
        capacity: int,
        default_ttl: Optional[float] = None,
        on_evict: Optional[Callable[[K, V], None]] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity <= 0:
            raise CacheError(f"capacity must be positive, got {capacity}")
        if default_ttl is not None and default_ttl <= 0:
            raise CacheError("default_ttl must be positive when given")
        self.capacity = capacity
        self.default_ttl = default_ttl
        self.on_evict = on_evict
        self.stats = CacheStats()
        self._clock = clock
        self._map: Dict[K, _Node[K, V]] = {}
        # Sentinel head/tail nodes keep the list operations branch-free.
        self._head: _Node = _Node(key=None, value=None)  # type: ignore[arg-type]
        self._tail: _Node = _Node(key=None, value=None)  # type: ignore[arg-type]
        self._head.next = self._tail
        self._tail.prev = self._head

    # -- linked list helpers -------------------------------------------------

    def _unlink(self, node: _Node[K, V]) -> None:
        assert node.prev is not None and node.next is not None
        node.prev.next = node.next
        node.next.prev = node.prev
        node.prev = node.next = None

    def _push_front(self, node: _Node[K, V]) -> None:
        first = self._head.next
        assert first is not None
        node.prev = self._head
        node.next = first
        first.prev = node
        self._head.next = node

    def _remove(self, node: _Node[K, V], expired: bool = False) -> None:
        self._unlink(node)
        del self._map[node.key]
        if expired:
            self.stats.expirations += 1
        else:
            self.stats.evictions += 1
            if self.on_evict is not None:
                self.on_evict(node.key, node.value)

    # -- public API ------------------------------------------------------------

    def get(self, key: K, default: Optional[V] = None) -> Optional[V]:
        """Return the value for ``key`` and mark it as recently used."""
        node = self._map.get(key)
        if node is None:
            self.stats.misses += 1
            return default
        if node.is_expired(self._clock()):
            self._remove(node, expired=True)
            self.stats.misses += 1
            return default
        self._unlink(node)
        self._push_front(node)
        self.stats.hits += 1
        return node.value

    def put(self, key: K, value: V, ttl: Optional[float] = None) -> None:
        """Insert or replace ``key``; evicts the oldest entry when full."""
        ttl = ttl if ttl is not None else self.default_ttl
        expires_at = self._clock() + ttl if ttl is not None else None
        node = self._map.get(key)
        if node is not None:
            node.value = value
            node.expires_at = expires_at
            self._unlink(node)
            self._push_front(node)
            return
        if len(self._map) >= self.capacity:
            self._make_room()
        node = _Node(key=key, value=value, expires_at=expires_at)
        self._map[key] = node
        self._push_front(node)

    def _make_room(self) -> None:
        # Prefer dropping something that has already expired.
        now = self._clock()
        for node in list(self._map.values()):
            if node.is_expired(now):
                self._remove(node, expired=True)
                return
        oldest = self._tail.prev
        if oldest is None or oldest is self._head:
            raise CacheError("cache is full but has no entries to evict")
        self._remove(oldest)

    def pop(self, key: K) -> V:
        """Remove ``key`` and return its value; raises KeyError if absent."""
        node = self._map.get(key)
        if node is None:
            raise KeyError(key)
        self._unlink(node)
        del self._map[key]
        return node.value

    def purge_expired(self) -> int:
        """Drop every expired entry and return how many were removed."""
        now = self._clock()
        stale = [node for node in self._map.values() if node.is_expired(now)]
        for node in stale:
            self._remove(node, expired=True)
        return len(stale)

    def clear(self) -> None:
        self._map.clear()
        self._head.next = self._tail
        self._tail.prev = self._head

    def items(self) -> Iterator[Tuple[K, V]]:
        """Yield (key, value) pairs from most to least recently used."""
        node = self._head.next
        while node is not None and node is not self._tail:
            yield node.key, node.value
            node = node.next

    def __contains__(self, key: object) -> bool:
        node = self._map.get(key)  # type: ignore[arg-type]
        return node is not None and not node.is_expired(self._clock())

    def __len__(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        keys = [repr(key) for key, _ in self.items()]
        return f"LRUCache(capacity={self.capacity}, keys=[{', '.join(keys)}])"


def memoize(capacity: int = 128) -> Callable[[Callable[..., V]], Callable[..., V]]:
    """Decorator that caches a function's results by positional arguments."""

    def decorator(func: Callable[..., V]) -> Callable[..., V]:
        cache: LRUCache[tuple, V] = LRUCache(capacity)
        missing = object()

        def wrapper(*args):
            result = cache.get(args, missing)  # type: ignore[arg-type]
            if result is missing:
                result = func(*args)
                cache.put(args, result)
            return result

        wrapper.cache = cache  # type: ignore[attr-defined]
        wrapper.__name__ = func.__name__
        wrapper.__doc__ = func.__doc__
        return wrapper

    return decorator


if __name__ == "__main__":
    @memoize(capacity=64)
    def fib(n: int) -> int:
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    print(fib(80))
    print(f"hit rate: {fib.cache.stats.hit_rate:.2%}")

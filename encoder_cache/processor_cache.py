"""Processed media by ``mm_hash``: an LRU bounded in bytes, shared by the API's worker threads.

A hit skips decoding, resizing and patchifying: ingestion then costs one hash of the encoded
bytes and a dictionary lookup.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


V = TypeVar("V", bound=Sized)


@dataclass(frozen=True)
class ProcessorCacheStats:
    hits: int
    misses: int
    evictions: int
    entries: int
    bytes_used: int
    capacity_bytes: int

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class ProcessorCache(Generic[V]):
    """Thread-safe LRU of processed media, bounded by the sum of their ``nbytes``.

    An entry larger than the whole capacity is not stored. ``capacity_bytes = 0`` disables the
    cache.
    """

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError("capacity_bytes must be >= 0")
        self.capacity_bytes = capacity_bytes
        self._entries: OrderedDict[str, V] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0

    def get(self, key: str) -> V | None:
        """The entry for ``key`` (now most recently used), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return value

    def put(self, key: str, value: V) -> None:
        """Store ``value``, evicting least recently used entries to make room."""
        size = value.nbytes
        with self._lock:
            if key in self._entries:
                self._bytes -= self._entries.pop(key).nbytes
            if size > self.capacity_bytes:
                return
            while self._bytes + size > self.capacity_bytes:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.nbytes
                self._evictions += 1
            self._entries[key] = value
            self._bytes += size

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def stats(self) -> ProcessorCacheStats:
        with self._lock:
            return ProcessorCacheStats(
                self._hits,
                self._misses,
                self._evictions,
                len(self._entries),
                self._bytes,
                self.capacity_bytes,
            )

    def check_invariants(self) -> None:
        """Raise AssertionError if the byte count or capacity bound is broken."""
        with self._lock:
            assert self._bytes == sum(v.nbytes for v in self._entries.values())
            assert self._bytes <= self.capacity_bytes

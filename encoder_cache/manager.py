"""Scheduler-side bookkeeping of the encoder cache, in feature tokens.

Each cached item knows which running requests still need it. Referenced items are never
evicted; unreferenced items stay (least recently released first in line) until space is needed.
An item larger than the whole cache is never cached: its request encodes it in the step that
consumes it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class EncoderCacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    uncacheable: int = 0


class EncoderCacheManager:
    """Capacity accounting and reference sets for encoder outputs keyed by ``mm_hash``."""

    def __init__(self, capacity_tokens: int) -> None:
        if capacity_tokens < 0:
            raise ValueError("capacity_tokens must be >= 0")
        self.capacity = capacity_tokens
        self.sizes: dict[str, int] = {}
        self.refs: dict[str, set[str]] = {}
        self.unreferenced: OrderedDict[str, None] = OrderedDict()
        self.used = 0
        self._evicted: list[str] = []
        self.stats = EncoderCacheStats()

    @property
    def free_tokens(self) -> int:
        return self.capacity - self.used

    def __contains__(self, mm_hash: str) -> bool:
        return mm_hash in self.sizes

    def fits_ever(self, num_tokens: int) -> bool:
        return num_tokens <= self.capacity

    def can_allocate(self, num_tokens: int, keep: set[str] | frozenset[str] = frozenset()) -> bool:
        """True if ``num_tokens`` fit now, evicting unreferenced items other than ``keep``."""
        if num_tokens <= self.free_tokens:
            return True
        reclaimable = sum(self.sizes[h] for h in self.unreferenced if h not in keep)
        return num_tokens <= self.free_tokens + reclaimable

    def reference(self, request_id: str, mm_hash: str) -> None:
        """``request_id`` will use the cached item ``mm_hash`` (a hit)."""
        self.refs[mm_hash].add(request_id)
        self.unreferenced.pop(mm_hash, None)
        self.stats.hits += 1

    def allocate(self, request_id: str, mm_hash: str, num_tokens: int) -> None:
        """Reserve space for a newly encoded item referenced by ``request_id``.

        Evicts least recently released unreferenced items as needed; the caller checked
        :meth:`can_allocate`.
        """
        assert mm_hash not in self.sizes
        while self.free_tokens < num_tokens:
            victim, _ = self.unreferenced.popitem(last=False)
            self.used -= self.sizes.pop(victim)
            del self.refs[victim]
            self._evicted.append(victim)
            self.stats.evictions += 1
        self.sizes[mm_hash] = num_tokens
        self.refs[mm_hash] = {request_id}
        self.used += num_tokens
        self.stats.misses += 1

    def release(self, request_id: str, mm_hash: str) -> None:
        """``request_id`` no longer needs ``mm_hash``."""
        users = self.refs.get(mm_hash)
        if users is None or request_id not in users:
            return
        users.discard(request_id)
        if not users:
            self.unreferenced[mm_hash] = None

    def release_all(self, request_id: str, mm_hashes: list[str]) -> None:
        for mm_hash in mm_hashes:
            self.release(request_id, mm_hash)

    def take_evicted(self) -> list[str]:
        """Hashes evicted since the last call (the runner drops their features)."""
        evicted, self._evicted = self._evicted, []
        return evicted

    def check_invariants(self, running_ids: set[str] | None = None) -> None:
        assert self.used == sum(self.sizes.values()) <= self.capacity
        assert set(self.refs) == set(self.sizes)
        for mm_hash, users in self.refs.items():
            assert (not users) == (mm_hash in self.unreferenced), mm_hash
            if running_ids is not None:
                assert users <= running_ids, f"{mm_hash} referenced by gone requests"
        assert set(self.unreferenced) <= set(self.sizes)

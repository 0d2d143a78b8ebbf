"""The processor cache is an LRU bounded in bytes; invariants hold after every operation."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from encoder_cache.processor_cache import ProcessorCache


@dataclass(frozen=True)
class Blob:
    nbytes: int
    tag: str = ""


operations = st.lists(
    st.tuples(st.sampled_from(["put", "get"]), st.integers(0, 15), st.integers(0, 120)),
    max_size=200,
)


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(0, 300), ops=operations)
def test_matches_a_simple_lru_model(capacity, ops):
    cache: ProcessorCache[Blob] = ProcessorCache(capacity)
    model: list[tuple[str, Blob]] = []  # least recently used first
    for op, key_id, size in ops:
        key = f"k{key_id}"
        if op == "put":
            value = Blob(size, f"{key}:{size}")
            cache.put(key, value)
            model = [(k, v) for k, v in model if k != key]
            if size <= capacity:
                while sum(v.nbytes for _, v in model) + size > capacity:
                    model.pop(0)
                model.append((key, value))
        else:
            got = cache.get(key)
            match = [v for k, v in model if k == key]
            assert got == (match[0] if match else None)
            if match:
                model = [(k, v) for k, v in model if k != key] + [(key, match[0])]
        cache.check_invariants()
        assert [k for k, _ in model] == [k for k in cache._entries]
    stats = cache.stats()
    assert stats.bytes_used == sum(v.nbytes for _, v in model) <= capacity
    assert stats.entries == len(model)


def test_hit_rate_and_evictions_are_counted():
    cache: ProcessorCache[Blob] = ProcessorCache(100)
    cache.put("a", Blob(60))
    cache.put("b", Blob(60))  # evicts a
    assert cache.get("a") is None
    assert cache.get("b") == Blob(60)
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.evictions) == (1, 1, 1)
    assert stats.hit_rate == pytest.approx(0.5)


def test_item_larger_than_capacity_is_not_stored_and_evicts_nothing():
    cache: ProcessorCache[Blob] = ProcessorCache(100)
    cache.put("small", Blob(10))
    cache.put("huge", Blob(101))
    assert "huge" not in cache and "small" in cache


def test_concurrent_use_keeps_invariants():
    cache: ProcessorCache[Blob] = ProcessorCache(1000)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for i in range(2000):
                key = f"k{(i * seed) % 37}"
                if cache.get(key) is None:
                    cache.put(key, Blob(10 + (i + seed) % 90))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (3, 5, 7, 11)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    cache.check_invariants()


def test_negative_capacity_is_rejected():
    with pytest.raises(ValueError):
        ProcessorCache(-1)

"""Paged KV blocks with reference counts, a free list, and media-aware prefix caching.

A full block is identified by a chained key: the parent block's key hash, the block's token ids,
and one extra key per media item overlapping the block (its ``mm_hash`` and its offset relative
to the block start). Two prompts with the same placeholder tokens but different images therefore
never share a block. Cached blocks nobody uses stay in the free list, in eviction order, until a
new allocation takes them.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from scheduler.request import Request
from vision.types import MultimodalItem

BlockKey = tuple[int, tuple[int, ...], tuple[tuple[str, int], ...]]


@dataclass
class BlockStats:
    """Prefix-cache counters (tokens looked up and tokens found)."""

    queried_tokens: int = 0
    hit_tokens: int = 0


def revert_to_media_boundary(num_tokens: int, items: list[MultimodalItem], block_size: int) -> int:
    """Cut a cached prefix of ``num_tokens`` that ends inside a media span back to the block
    boundary at or before the span's start (repeatedly, as the cut may land in another span)."""
    changed = True
    while changed and num_tokens > 0:
        changed = False
        for item in items:
            if item.offset < num_tokens < item.offset + item.length:
                num_tokens = (item.offset // block_size) * block_size
                changed = True
    return num_tokens


class KVBlockManager:
    """Owns the KV block pool; requests hold block tables of block ids.

    Invariants (:meth:`check_invariants`): every block is either referenced (ref count > 0,
    not free) or free; a cached key maps to a block whose key it is; the free list has no
    duplicates.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_counts = [0] * num_blocks
        self.block_keys: list[BlockKey | None] = [None] * num_blocks
        # Free blocks, first evicted first. Cached blocks keep their key while free.
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[BlockKey, int] = {}
        self._request_keys: dict[str, list[BlockKey]] = {}
        self._registered: dict[str, int] = {}  # request id -> leading blocks already cached
        self.stats = BlockStats()

    # -- queries -----------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    @property
    def usage(self) -> float:
        """Fraction of blocks referenced by requests."""
        return 1.0 - len(self.free) / self.num_blocks

    def blocks_needed(self, request: Request, num_tokens: int) -> int:
        """Blocks to add so ``request`` can hold ``num_tokens`` tokens."""
        return max(0, -(-num_tokens // self.block_size) - len(request.block_ids))

    # -- prefix cache ------------------------------------------------------------------------
    def full_block_keys(self, request: Request, num_blocks: int) -> list[BlockKey]:
        """Chained keys of the request's first ``num_blocks`` full blocks (memoized)."""
        keys = self._request_keys.setdefault(request.request_id, [])
        if len(keys) >= num_blocks:
            return keys[:num_blocks]
        items = request.mm_items
        bs = self.block_size
        parent = hash(keys[-1]) if keys else 0
        for index in range(len(keys), num_blocks):
            start, end = index * bs, (index + 1) * bs
            extras = tuple(
                (item.mm_hash, item.offset - start)
                for item in items
                if item.offset < end and item.offset + item.length > start
            )
            key = (parent, tuple(request.token_ids(start, end)), extras)
            keys.append(key)
            parent = hash(key)
        return keys

    def find_cached_prefix(self, request: Request) -> list[int]:
        """Blocks holding the longest cached prefix of ``request`` usable as computed KV.

        At least one token is left to compute, and a prefix ending inside a media span is cut
        back to the block boundary at or before the span start.
        """
        if not self.enable_prefix_caching:
            return []
        max_blocks = (request.num_tokens - 1) // self.block_size
        blocks: list[int] = []
        for key in self.full_block_keys(request, max_blocks):
            block = self.cached.get(key)
            if block is None:
                break
            blocks.append(block)
        bs = self.block_size
        hit = revert_to_media_boundary(len(blocks) * bs, request.mm_items, bs)
        return blocks[: hit // bs]

    def record_lookup(self, num_tokens: int, hit_tokens: int) -> None:
        """Count an admitted request's prefix lookup in the hit-rate statistics."""
        self.stats.queried_tokens += num_tokens
        self.stats.hit_tokens += hit_tokens

    # -- allocation --------------------------------------------------------------------------
    def acquire_cached(self, request: Request, blocks: list[int]) -> None:
        """Give ``request`` the cached prefix ``blocks`` (its block table must be empty)."""
        assert not request.block_ids
        for block in blocks:
            if self.ref_counts[block] == 0:
                del self.free[block]
            self.ref_counts[block] += 1
        request.block_ids.extend(blocks)

    def allocate(self, request: Request, num_tokens: int) -> list[int] | None:
        """Extend the request's block table to hold ``num_tokens``; None if not enough blocks."""
        needed = self.blocks_needed(request, num_tokens)
        if needed > len(self.free):
            return None
        new_blocks = []
        for _ in range(needed):
            block, _ = self.free.popitem(last=False)
            key = self.block_keys[block]
            if key is not None:  # evict the cached content
                if self.cached.get(key) == block:
                    del self.cached[key]
                self.block_keys[block] = None
            self.ref_counts[block] = 1
            new_blocks.append(block)
        request.block_ids.extend(new_blocks)
        return new_blocks

    def cache_computed_blocks(self, request: Request) -> None:
        """Register the request's full, computed blocks in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        num_full = min(request.num_computed_tokens, request.num_tokens) // self.block_size
        done = self._registered.get(request.request_id, 0)
        if num_full <= done:
            return
        keys = self.full_block_keys(request, num_full)
        self._registered[request.request_id] = num_full
        for index in range(done, num_full):
            block = request.block_ids[index]
            if self.block_keys[block] is not None:
                continue
            key = keys[index]
            if key in self.cached:  # same content computed twice: keep the first copy
                continue
            self.block_keys[block] = key
            self.cached[key] = block

    def free_request(self, request: Request) -> None:
        """Release the request's blocks; its tail blocks become the first to be evicted."""
        for block in reversed(request.block_ids):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free[block] = None
                if self.block_keys[block] is None:
                    self.free.move_to_end(block, last=False)
        request.block_ids.clear()
        self._registered.pop(request.request_id, None)

    def forget_request(self, request_id: str) -> None:
        """Drop memoized keys of a request that is gone for good."""
        self._request_keys.pop(request_id, None)
        self._registered.pop(request_id, None)

    # -- checks ------------------------------------------------------------------------------
    def check_invariants(self, live_requests: list[Request] | None = None) -> None:
        """Raise AssertionError if the pool's bookkeeping is inconsistent.

        With ``live_requests`` (all requests holding blocks), reference counts must equal the
        number of block tables that contain each block.
        """
        for block in range(self.num_blocks):
            assert self.ref_counts[block] >= 0
            assert (self.ref_counts[block] == 0) == (block in self.free), block
        for key, block in self.cached.items():
            assert self.block_keys[block] == key
        if live_requests is not None:
            counts = [0] * self.num_blocks
            for request in live_requests:
                for block in request.block_ids:
                    counts[block] += 1
            assert counts == self.ref_counts, "reference counts disagree with block tables"

"""The paged KV cache and the attention backend that reads and writes it for one step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from maca_kernels import ops

paddle = ops.paddle
Tensor = Any

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class PagedKVCache:
    """Keys and values of every layer in ``num_blocks * block_size`` slots.

    A token at position ``p`` of a request with block table ``B`` lives in slot
    ``B[p // block_size] * block_size + p % block_size``.
    """

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: str = "float32",
    ) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        shape = [num_blocks * block_size, kv_heads, head_dim]
        self.keys = [paddle.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.values = [paddle.zeros(shape, dtype=dtype) for _ in range(num_layers)]

    @staticmethod
    def blocks_for_budget(
        budget_bytes: int,
        num_layers: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: str = "float32",
    ) -> int:
        """How many blocks fit in ``budget_bytes``."""
        per_block = 2 * num_layers * block_size * kv_heads * head_dim * DTYPE_BYTES[dtype]
        return max(0, budget_bytes // per_block)

    def slots(self, block_table: list[int], start: int, end: int) -> np.ndarray:
        """Cache slots of positions ``[start, end)``."""
        positions = np.arange(start, end)
        blocks = np.asarray(block_table, dtype=np.int64)[positions // self.block_size]
        return blocks * self.block_size + positions % self.block_size


@dataclass(frozen=True)
class ChunkLayout:
    """Where one request's chunk sits in the step's token rows and in the cache."""

    row_start: int
    row_end: int
    past: int  # tokens already in the cache before this chunk
    context_slots: Tensor  # slots of positions [0, past + chunk length)


class PagedAttention:
    """Attention backend for one step: writes the step's keys/values into their slots, then lets
    each chunk attend to its whole context (cached prefix + its own causal part)."""

    def __init__(self, cache: PagedKVCache, chunks: list[ChunkLayout], new_slots: Tensor) -> None:
        self.cache, self.chunks, self.new_slots = cache, chunks, new_slots

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        keys, values = self.cache.keys[layer], self.cache.values[layer]
        keys[self.new_slots] = k.astype(keys.dtype)
        values[self.new_slots] = v.astype(values.dtype)
        return ops.paged_attention(q, keys, values, self.chunks)

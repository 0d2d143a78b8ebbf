"""Frozen configuration of the scheduler and its caches."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerConfig:
    """Step-planning limits.

    Attributes:
        max_num_batched_tokens: tokens computed per step (prefill chunks + decodes), default 2048.
        max_num_seqs: requests running at once (batch slots), default 64.
        max_model_len: longest prompt + output, default 8192.
        max_num_encoder_tokens: vision-encoder output tokens computed per step; None: equal to
            ``max_num_batched_tokens``.
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    max_model_len: int = 8192
    max_num_encoder_tokens: int | None = None

    def __post_init__(self) -> None:
        if min(self.max_num_batched_tokens, self.max_num_seqs, self.max_model_len) < 1:
            raise ValueError("scheduler limits must be positive")
        if self.max_num_encoder_tokens is not None and self.max_num_encoder_tokens < 1:
            raise ValueError("max_num_encoder_tokens must be positive (or None)")

    @property
    def encoder_budget(self) -> int:
        if self.max_num_encoder_tokens is None:
            return self.max_num_batched_tokens
        return self.max_num_encoder_tokens


@dataclass(frozen=True)
class CacheConfig:
    """KV blocks and the encoder cache.

    Attributes:
        block_size: tokens per KV block, default 16.
        num_kv_blocks: blocks in the KV pool (the engine sizes it from a memory budget).
        enable_prefix_caching: reuse KV blocks of identical prefixes (media-aware), default on.
        encoder_cache_tokens: encoder-cache budget in feature tokens; None: the larger of
            ``max_num_batched_tokens`` and the largest media item the model accepts.
    """

    num_kv_blocks: int
    block_size: int = 16
    enable_prefix_caching: bool = True
    encoder_cache_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.num_kv_blocks < 1 or self.block_size < 1:
            raise ValueError("num_kv_blocks and block_size must be positive")

"""3D rope positions ``[3, N]`` (temporal, height, width) of a prompt with media spans."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MediaPlacement:
    """Where one image or whole video sits in the expanded prompt, in LLM tokens.

    Attributes:
        offset: index of the first placeholder token.
        grid: ``(t, h, w)`` after spatial (and, for ERNIE video, temporal) merging; the span is
            ``t * h * w`` tokens in t-major, then row, then column order.
        time_scale: ``None`` (temporal positions step by one) or Qwen2.5-VL's
            ``(seconds_per_grid_t, tokens_per_second)``: temporal index ``i`` is placed at
            ``int(i * seconds_per_grid_t * tokens_per_second)``, evaluated in float32 from left
            to right as the reference does.
    """

    offset: int
    grid: tuple[int, int, int]
    time_scale: tuple[float, float] | None = None

    @property
    def length(self) -> int:
        t, h, w = self.grid
        return t * h * w


def rope_positions(num_tokens: int, placements: list[MediaPlacement]) -> tuple[np.ndarray, int]:
    """Return ``(position_ids [3, N] int64, rope_delta)``.

    Text advances all three axes together by one per token. A media span starts at the current
    position ``cur`` and takes ``cur + (t, h, w index)``; the text after it continues at the
    span's largest position plus one.
    """
    positions = np.empty((3, num_tokens), dtype=np.int64)
    cur = 0
    text_start = 0
    for placement in sorted(placements, key=lambda p: p.offset):
        if placement.offset < text_start or placement.offset + placement.length > num_tokens:
            raise ValueError("media spans overlap or run past the end of the prompt")
        text_len = placement.offset - text_start
        positions[:, text_start : placement.offset] = cur + np.arange(text_len)
        cur += text_len
        block = _media_block(placement.grid, placement.time_scale) + cur
        positions[:, placement.offset : placement.offset + placement.length] = block
        cur = int(block.max()) + 1
        text_start = placement.offset + placement.length
    positions[:, text_start:] = cur + np.arange(num_tokens - text_start)
    rope_delta = int(positions.max()) + 1 - num_tokens if num_tokens else 0
    return positions, rope_delta


def _media_block(grid: tuple[int, int, int], time_scale: tuple[float, float] | None) -> np.ndarray:
    t, h, w = grid
    if time_scale is None:
        t_index = np.arange(t, dtype=np.int64)
    else:
        seconds, rate = (np.float32(v) for v in time_scale)
        t_index = ((np.arange(t, dtype=np.float32) * seconds) * rate).astype(np.int64)
    block = np.empty((3, t, h, w), dtype=np.int64)
    block[0] = t_index[:, None, None]
    block[1] = np.arange(h)[None, :, None]
    block[2] = np.arange(w)[None, None, :]
    return block.reshape(3, t * h * w)


def decode_positions(start: int, count: int, rope_delta: int) -> np.ndarray:
    """Positions ``[3, count]`` of generated tokens at cache lengths ``start..start+count-1``."""
    return np.broadcast_to(np.arange(start, start + count) + rope_delta, (3, count)).copy()

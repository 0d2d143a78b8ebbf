"""Media identity: ``xxh3_128`` of encoded bytes plus processor settings, before decoding."""

from __future__ import annotations

import xxhash


def media_hash(encoded: bytes, settings_fingerprint: str) -> str:
    """Hash of one encoded media item as processed under ``settings_fingerprint`` (hex string)."""
    h = xxhash.xxh3_128()
    h.update(encoded)
    h.update(b"\x00settings\x00")
    h.update(settings_fingerprint.encode())
    return h.hexdigest()


def chunk_hash(frames: bytes, frame_shape: tuple[int, ...], settings_fingerprint: str) -> str:
    """Hash of one temporal chunk of a video, from its sampled frames' decoded pixels.

    Chunks are hashed by content, not by position in the video, so a video that shares frames
    with one seen before (a trimmed copy, the same clip re-sent) reuses those chunks' features.
    """
    h = xxhash.xxh3_128()
    h.update(frames)
    h.update(repr(tuple(frame_shape)).encode())
    h.update(b"\x00settings\x00")
    h.update(settings_fingerprint.encode())
    return h.hexdigest()

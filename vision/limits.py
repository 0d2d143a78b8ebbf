"""Frozen configuration for media loading: where media may come from and how large it may be."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class MediaLimits:
    """Size limits applied before and while decoding.

    Attributes:
        max_image_bytes: largest encoded image accepted (default 20 MiB).
        max_video_bytes: largest encoded video accepted (default 256 MiB).
        max_image_pixels: largest decoded width*height, checked from the header before the pixel
            data is decoded, so decompression bombs are refused cheaply (default 64 Mpx).
        max_aspect_ratio: largest long-side/short-side ratio; the processors refuse ratios above
            200 whatever this says (the models' smart resize limit).
        max_video_frames: largest number of frames sampled from one video (default 768).
    """

    max_image_bytes: int = 20 * 1024 * 1024
    max_video_bytes: int = 256 * 1024 * 1024
    max_image_pixels: int = 64_000_000
    max_aspect_ratio: float = 200.0
    max_video_frames: int = 768


@dataclass(frozen=True)
class MediaAccessPolicy:
    """Where media references may point.

    Attributes:
        allowed_local_root: local files are readable only below this directory (symlinks are
            resolved first); ``None`` refuses every local path (the default).
        allowed_domains: host names whose ``http(s)`` URLs may be fetched; a name also allows its
            subdomains. Empty (the default) refuses every URL.
        url_timeout_s: connect and read timeout for URL fetches.
    """

    allowed_local_root: Path | None = None
    allowed_domains: tuple[str, ...] = field(default_factory=tuple)
    url_timeout_s: float = 10.0

"""Per-family image and video processing: smart resize, patchify into uint8 rows, token counts."""

from __future__ import annotations

import numpy as np

from vision.errors import UnsupportedMedia
from vision.hashing import chunk_hash
from vision.patchify import patch_rows
from vision.processor_config import ProcessorConfig
from vision.resample import resize_to_planar
from vision.types import ProcessedItem, ProcessedMedia


class MediaProcessor:
    """Turns decoded images and frames into the family's encoder inputs.

    Outputs stay uint8; :meth:`normalize` gives the float32 values the reference processors
    produce, for tests and for models that do not fold normalization into their weights.
    """

    def __init__(self, config: ProcessorConfig) -> None:
        self.config = config
        self.fingerprint = config.fingerprint()
        self._mean = np.asarray(config.image_mean, dtype=np.float64).reshape(1, 3, 1)
        self._std = np.asarray(config.image_std, dtype=np.float64).reshape(1, 3, 1)

    # -- images --------------------------------------------------------------------------------
    def image_target_size(self, width: int, height: int) -> tuple[int, int]:
        """``(width, height)`` an image of this size is resized to."""
        h, w = self.config.image_resize.target_size(height, width)
        return w, h

    def process_image(self, pixels: np.ndarray, mm_hash: str) -> ProcessedMedia:
        """Resize (bicubic, equal to Pillow's on uint8) and patchify one RGB image ``[H, W, 3]``.

        An image fills every temporal slot of a patch (Qwen: the frame is repeated).
        """
        cfg = self.config
        size = self.image_target_size(pixels.shape[1], pixels.shape[0])
        planes = resize_to_planar(pixels, *size)
        patches = self._patchify(planes[None], repeat=cfg.temporal_patch_size)
        grid = (1, size[1] // cfg.patch_size, size[0] // cfg.patch_size)
        tokens = grid[1] * grid[2] // (cfg.merge_size**2)
        item = ProcessedItem("image", mm_hash, grid, tokens, patches)
        return ProcessedMedia("image", mm_hash, (item,), grid)

    # -- videos --------------------------------------------------------------------------------
    def process_video(self, frames: np.ndarray, sample_fps: float, mm_hash: str) -> ProcessedMedia:
        """Resize and patchify sampled frames ``[n, H, W, 3]`` uint8 into 2-frame chunks.

        ``sample_fps`` is the rate the frames were sampled at (for temporal positions). An odd
        frame count repeats the last frame.
        """
        cfg = self.config
        if not cfg.supports_video or cfg.video_resize is None:
            raise UnsupportedMedia(f"the {cfg.family} model does not accept video input")
        chunk = 2
        missing = (-len(frames)) % chunk
        if missing:
            frames = np.concatenate([frames, np.repeat(frames[-1:], missing, axis=0)])
        n, height, width, _ = frames.shape
        h, w = cfg.video_resize.target_size(height, width)
        items = []
        per_chunk_t = chunk // cfg.temporal_patch_size
        tokens = per_chunk_t * (h // cfg.patch_size) * (w // cfg.patch_size)
        tokens //= cfg.merge_size**2 * cfg.video_temporal_merge
        for start in range(0, n, chunk):
            raw = np.ascontiguousarray(frames[start : start + chunk])
            planar = np.stack([resize_to_planar(frame, w, h) for frame in raw])
            grid = (per_chunk_t, h // cfg.patch_size, w // cfg.patch_size)
            item_hash = chunk_hash(raw.data, raw.shape, self.fingerprint)
            items.append(ProcessedItem("video", item_hash, grid, tokens, self._patchify(planar)))
        grid_t = n // cfg.temporal_patch_size
        seconds_per_t = cfg.temporal_patch_size / sample_fps if sample_fps > 0 else 1.0
        return ProcessedMedia(
            "video",
            mm_hash,
            tuple(items),
            (grid_t, h // cfg.patch_size, w // cfg.patch_size),
            seconds_per_t,
        )

    # -- shared --------------------------------------------------------------------------------
    def _patchify(self, planar_frames: np.ndarray, repeat: int = 1) -> np.ndarray:
        cfg = self.config
        block = cfg.merge_size if cfg.merge_block_order else 1
        temporal = cfg.temporal_patch_size // repeat
        return patch_rows(planar_frames, cfg.patch_size, temporal, block, repeat=repeat)

    def normalize(self, patches: np.ndarray) -> np.ndarray:
        """float32 ``(patches / 255 - mean) / std`` per channel (the reference's pixel values)."""
        rows = patches.reshape(patches.shape[0], 3, -1).astype(np.float64) / 255.0
        return ((rows - self._mean) / self._std).astype(np.float32).reshape(patches.shape)

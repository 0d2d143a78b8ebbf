"""Cutting planar frames into patch rows in a family's layout."""

from __future__ import annotations

import numba
import numpy as np


def patch_rows_reference(
    frames: np.ndarray, patch: int, temporal_patch: int, block: int
) -> np.ndarray:
    """Readable numpy definition of the layout (used by tests): ``frames [T, H, W, C]`` ->
    rows of ``(C, temporal_patch, patch, patch)``, ordered by temporal group, then by
    ``block x block`` groups of patches in raster order, then by patch inside the group
    (``block = 1``: plain raster order)."""
    t, h, w, c = frames.shape
    gt, gh, gw = t // temporal_patch, h // patch, w // patch
    x = frames.reshape(gt, temporal_patch, gh // block, block, patch, gw // block, block, patch, c)
    x = x.transpose(0, 2, 5, 3, 6, 8, 1, 4, 7)
    return x.reshape(gt * gh * gw, c * temporal_patch * patch * patch)


FAST_PATCH = 14
"""Patch size compiled into the fast kernel as a constant (all supported families use 14)."""


@numba.njit(cache=True, nogil=True)
def _patch_rows(planes, temporal_patch, repeat, block, out):  # pragma: no cover - compiled
    """Scatter each source line into the patch rows it belongs to (sequential reads)."""
    patch = FAST_PATCH
    frames, channels, height, width = planes.shape
    grid_h, grid_w = height // patch, width // patch
    blocks_w = grid_w // block
    temporal = temporal_patch * repeat
    per_group = grid_h * grid_w
    for f in range(frames):
        group, t_in = f // temporal_patch, f % temporal_patch
        for c in range(channels):
            for y in range(grid_h * patch):
                py = y % patch
                by = y // patch
                bh, m1 = by // block, by % block
                line = planes[f, c, y]
                for bx in range(grid_w):
                    bw, m2 = bx // block, bx % block
                    row = group * per_group + ((bh * blocks_w + bw) * block + m1) * block + m2
                    x0 = bx * patch
                    for r in range(repeat):
                        col = ((c * temporal + t_in * repeat + r) * patch + py) * patch
                        for q in range(patch):
                            out[row, col + q] = line[x0 + q]


def patch_rows(
    planes: np.ndarray, patch: int, temporal_patch: int, block: int, repeat: int = 1
) -> np.ndarray:
    """Same layout as :func:`patch_rows_reference`, from planar ``planes [T, C, H, W]`` uint8.

    ``repeat`` > 1 repeats each frame that many times along the temporal axis (an image fills
    all temporal slots of a Qwen patch: pass the image once with ``repeat=2``).
    """
    if patch != FAST_PATCH:
        hwc = np.repeat(planes.transpose(0, 2, 3, 1), repeat, axis=0)
        return patch_rows_reference(hwc, patch, temporal_patch * repeat, block)
    planes = np.ascontiguousarray(planes)
    frames, channels, height, width = planes.shape
    temporal = temporal_patch * repeat
    rows = (frames // temporal_patch) * (height // patch) * (width // patch)
    out = np.empty((rows, channels * temporal * patch * patch), dtype=np.uint8)
    _patch_rows(planes, temporal_patch, repeat, block, out)
    return out

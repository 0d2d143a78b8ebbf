"""The compiled patch kernel must reproduce the readable numpy definition of each layout."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vision.patchify import patch_rows, patch_rows_reference


@settings(max_examples=60, deadline=None)
@given(
    blocks_h=st.integers(1, 4),
    blocks_w=st.integers(1, 4),
    layout=st.sampled_from([(2, 2, 1), (1, 2, 1), (1, 1, 1), (2, 2, 2), (1, 2, 2)]),
    groups=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_kernel_matches_reference_layout(blocks_h, blocks_w, layout, groups, seed):
    temporal_patch, block, repeat = layout
    frames_count = groups * temporal_patch
    h, w = blocks_h * block * 14, blocks_w * block * 14
    frames = np.random.default_rng(seed).integers(0, 256, (frames_count, h, w, 3), dtype=np.uint8)
    planar = frames.transpose(0, 3, 1, 2)
    ours = patch_rows(planar, 14, temporal_patch, block, repeat=repeat)
    expanded = np.repeat(frames, repeat, axis=0)
    expected = patch_rows_reference(expanded, 14, temporal_patch * repeat, block)
    np.testing.assert_array_equal(ours, expected)


def test_qwen_image_rows_hold_both_temporal_copies(astronaut):
    image = astronaut[:56, :84]
    rows = patch_rows(image.transpose(2, 0, 1)[None], 14, 1, 2, repeat=2)
    assert rows.shape == (4 * 6, 3 * 2 * 14 * 14)
    per_row = rows.reshape(-1, 3, 2, 14, 14)
    np.testing.assert_array_equal(per_row[:, :, 0], per_row[:, :, 1])
    # First row is the top-left patch, second its right neighbour (same 2x2 merge block),
    # third the patch below the first.
    np.testing.assert_array_equal(per_row[0, :, 0], image[:14, :14].transpose(2, 0, 1))
    np.testing.assert_array_equal(per_row[1, :, 0], image[:14, 14:28].transpose(2, 0, 1))
    np.testing.assert_array_equal(per_row[2, :, 0], image[14:28, :14].transpose(2, 0, 1))


def test_raster_order_for_block_one(coffee):
    image = coffee[:28, :42]
    rows = patch_rows(image.transpose(2, 0, 1)[None], 14, 1, 1).reshape(-1, 3, 14, 14)
    np.testing.assert_array_equal(rows[1], image[:14, 14:28].transpose(2, 0, 1))
    np.testing.assert_array_equal(rows[3], image[14:28, :14].transpose(2, 0, 1))


@pytest.mark.parametrize("patch", [16, 7])
def test_other_patch_sizes_use_reference(patch):
    frames = np.random.default_rng(1).integers(0, 256, (2, patch * 4, patch * 2, 3), dtype=np.uint8)
    ours = patch_rows(frames.transpose(0, 3, 1, 2), patch, 2, 2)
    np.testing.assert_array_equal(ours, patch_rows_reference(frames, patch, 2, 2))

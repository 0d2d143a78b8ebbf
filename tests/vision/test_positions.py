"""3D positions: text and media rules, and Qwen2.5-VL's float32 time scaling."""

from __future__ import annotations

import numpy as np

from vision.positions import MediaPlacement, decode_positions, rope_positions


def test_text_only_is_arange_on_all_axes():
    positions, delta = rope_positions(5, [])
    np.testing.assert_array_equal(positions, np.tile(np.arange(5), (3, 1)))
    assert delta == 0


def test_image_block_then_text_continues_after_the_largest_position():
    positions, delta = rope_positions(2 + 6 + 2, [MediaPlacement(2, (1, 2, 3))])
    assert positions[:, :2].tolist() == [[0, 1]] * 3
    assert positions[0, 2:8].tolist() == [2] * 6
    assert positions[1, 2:8].tolist() == [2, 2, 2, 3, 3, 3]
    assert positions[2, 2:8].tolist() == [2, 3, 4, 2, 3, 4]
    assert positions[:, 8:].tolist() == [[5, 6]] * 3
    assert delta == 7 - 10


def test_video_time_scaling_truncates_in_float32():
    # A video sampled at 0.27699 fps: grid step 127 lands on 1834 in float32 (the reference's
    # arithmetic) but on 1833 in float64.
    seconds = 2 / 0.27699019494552435
    positions, _ = rope_positions(128, [MediaPlacement(0, (128, 1, 1), (seconds, 2))])
    assert positions[0, 127] == 1834
    expected = ((np.arange(128, dtype=np.float32) * np.float32(seconds)) * np.float32(2)).astype(
        int
    )
    np.testing.assert_array_equal(positions[0], expected)


def test_decode_positions_follow_rope_delta():
    np.testing.assert_array_equal(decode_positions(10, 3, -4), np.tile([6, 7, 8], (3, 1)))

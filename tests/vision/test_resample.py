"""Our bicubic resampler must equal Pillow's ``Image.resize(BICUBIC)`` bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from vision.resample import bicubic_weights, resize_bicubic, resize_to_planar

sizes = st.integers(min_value=1, max_value=160)


def pillow_resize(pixels: np.ndarray, width: int, height: int) -> np.ndarray:
    return np.asarray(Image.fromarray(pixels).resize((width, height), Image.Resampling.BICUBIC))


@settings(max_examples=200, deadline=None)
@given(h=sizes, w=sizes, out_h=sizes, out_w=sizes, seed=st.integers(0, 2**32 - 1))
def test_random_sizes_equal_pillow(h, w, out_h, out_w, seed):
    pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    np.testing.assert_array_equal(
        resize_bicubic(pixels, out_w, out_h), pillow_resize(pixels, out_w, out_h)
    )


@settings(max_examples=40, deadline=None)
@given(h=sizes, w=sizes, scale=st.floats(0.05, 4.0), seed=st.integers(0, 2**32 - 1))
def test_strong_down_and_upscaling_equal_pillow(h, w, scale, seed):
    pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    out_w, out_h = max(1, round(w * scale)), max(1, round(h * scale))
    np.testing.assert_array_equal(
        resize_bicubic(pixels, out_w, out_h), pillow_resize(pixels, out_w, out_h)
    )


def test_extreme_values_clamp_like_pillow():
    # A checkerboard of 0/255 makes bicubic overshoot below 0 and above 255.
    board = (np.indices((64, 64)).sum(axis=0) % 2 * 255).astype(np.uint8)
    pixels = np.repeat(board[:, :, None], 3, axis=2)
    for size in ((97, 101), (31, 17), (64, 200)):
        np.testing.assert_array_equal(resize_bicubic(pixels, *size), pillow_resize(pixels, *size))


def test_real_photo_to_model_size(astronaut):
    ours = resize_to_planar(astronaut, 532, 504)
    np.testing.assert_array_equal(ours.transpose(1, 2, 0), pillow_resize(astronaut, 532, 504))


def test_same_size_is_identity_and_planar():
    pixels = np.random.default_rng(0).integers(0, 256, (28, 56, 3), dtype=np.uint8)
    planar = resize_to_planar(pixels, 56, 28)
    assert planar.shape == (3, 28, 56)
    np.testing.assert_array_equal(planar.transpose(1, 2, 0), pixels)


def test_weights_sum_to_one_in_fixed_point():
    for in_size, out_size in ((1280, 1288), (960, 952), (4000, 300), (10, 280)):
        bounds, weights = bicubic_weights(in_size, out_size)
        sums = weights.sum(axis=1)
        # Each row of weights is normalized to 1.0 before rounding to 22-bit fixed point.
        assert np.all(np.abs(sums - (1 << 22)) <= weights.shape[1])
        assert np.all(bounds[:, 0] >= 0) and np.all(bounds.sum(axis=1) <= in_size)

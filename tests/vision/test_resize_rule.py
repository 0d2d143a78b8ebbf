"""Each family's smart resize equals its reference implementation's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vision.errors import InvalidMediaRequest
from vision.released_configs import released_processor_config


def reference_smart_resize(family: str):
    import paddleformers  # noqa: F401  (before transformers' processors)

    if family in ("qwen2_vl", "qwen2_5_vl"):
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
    elif family == "paddleocr_vl":
        from paddleformers.transformers.paddleocr_vl.image_processor import smart_resize
    else:
        from paddleformers.transformers.ernie4_5_moe_vl.image_processor import smart_resize
    return smart_resize


@pytest.mark.parametrize("family", ["qwen2_vl", "paddleocr_vl", "ernie4_5_vl"])
@settings(max_examples=300, deadline=None)
@given(height=st.integers(1, 6000), width=st.integers(1, 6000))
def test_image_target_size_equals_reference(family, height, width):
    rule = released_processor_config(family).image_resize
    reference = reference_smart_resize(family)
    try:
        expected = reference(height, width, 28, rule.min_pixels, rule.max_pixels)
    except ValueError:
        with pytest.raises(InvalidMediaRequest):
            rule.target_size(height, width)
        return
    if family == "ernie4_5_vl" and max(height, width) / min(height, width) > 200:
        # ERNIE's reference silently squashes extreme aspect ratios; we refuse them (400).
        with pytest.raises(InvalidMediaRequest):
            rule.target_size(height, width)
        return
    assert rule.target_size(height, width) == tuple(expected)


@pytest.mark.parametrize(
    ("family", "size", "expected"),
    [
        ("qwen2_vl", (960, 1280), (952, 1288)),
        ("qwen2_vl", (10, 300), (28, 308)),
        ("paddleocr_vl", (10, 300), (84, 1848)),
        ("ernie4_5_vl", (3000, 4000), (1904, 2520)),
    ],
)
def test_known_sizes(family, size, expected):
    assert released_processor_config(family).image_resize.target_size(*size) == expected

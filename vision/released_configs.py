"""The processing-relevant parts of the released checkpoints' ``config.json`` and
``preprocessor_config.json`` for each family (used by tests, benchmarks and ``make-tiny``)."""

from __future__ import annotations

from typing import Any

from vision.processor_config import CLIP_MEAN, CLIP_STD, ProcessorConfig

RELEASED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "qwen2_vl": (
        {
            "model_type": "qwen2_vl",
            "image_token_id": 151655,
            "video_token_id": 151656,
            "vision_start_token_id": 151652,
            "vision_end_token_id": 151653,
            "vision_config": {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        },
        {
            "min_pixels": 3136,
            "max_pixels": 12845056,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": list(CLIP_MEAN),
            "image_std": list(CLIP_STD),
        },
    ),
    "qwen2_5_vl": (
        {
            "model_type": "qwen2_5_vl",
            "image_token_id": 151655,
            "video_token_id": 151656,
            "vision_start_token_id": 151652,
            "vision_end_token_id": 151653,
            "vision_config": {
                "patch_size": 14,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "tokens_per_second": 2,
            },
        },
        {
            "min_pixels": 3136,
            "max_pixels": 12845056,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": list(CLIP_MEAN),
            "image_std": list(CLIP_STD),
        },
    ),
    "paddleocr_vl": (
        {
            "model_type": "paddleocr_vl",
            "image_token_id": 100295,
            "vision_start_token_id": 101305,
            "vision_end_token_id": 101306,
            "vision_config": {"patch_size": 14, "spatial_merge_size": 2},
        },
        {
            "min_pixels": 112896,
            "max_pixels": 1003520,
            "patch_size": 14,
            "temporal_patch_size": 1,
            "merge_size": 2,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
        },
    ),
    "ernie4_5_vl": (
        {
            "model_type": "ernie4_5_moe_vl",
            "im_patch_id": 100295,
            "image_start_token_id": 101304,
            "image_end_token_id": 101305,
            "video_start_token_id": 101306,
            "video_end_token_id": 101307,
            "video_token_id": 103367,
            "spatial_conv_size": 2,
            "temporal_conv_size": 2,
            "vision_config": {"patch_size": 14, "spatial_merge_size": 2},
        },
        {
            "min_pixels": 56 * 56,
            "max_pixels": 28 * 28 * 6177,
            "patch_size": 14,
            "merge_size": 2,
            "image_mean": list(CLIP_MEAN),
            "image_std": list(CLIP_STD),
        },
    ),
}

FAMILIES = tuple(RELEASED)


def released_processor_config(family: str) -> ProcessorConfig:
    """The processor settings of ``family``'s released checkpoint."""
    config, preprocessor = RELEASED[family]
    return ProcessorConfig.from_dicts(config, preprocessor)

"""``vlm-server bench model``: our models against paddleformers' on the same inputs.

Random weights at the released dimensions (``--quick``: the make-tiny dimensions), the same CPU
settings for both (maca_kernels' platform setup runs before paddle is imported). Timed: the
vision encoder on a page-sized image, and the whole prefill (vision + language model) of an
OCR prompt with that image.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np

from maca_kernels.ops import paddle
from runner.make_tiny import SPECS
from runner.models import build_model
from vision.processor import MediaProcessor
from vision.processor_config import ProcessorConfig
from vision.prompt import expand_prompt

PADDLEOCR_VL_RELEASED = {
    "architectures": ["PaddleOCRVLForConditionalGeneration"],
    "model_type": "paddleocr_vl",
    "vocab_size": 103424,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 18,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000,
    "rope_scaling": {"mrope_section": [16, 24, 24], "rope_type": "default", "type": "default"},
    "max_position_embeddings": 131072,
    "use_bias": False,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "image_token_id": 100295,
    "video_token_id": 101307,
    "vision_start_token_id": 101305,
    "vision_end_token_id": 101306,
    "vision_config": {
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "num_channels": 3,
        "image_size": 384,
        "patch_size": 14,
        "hidden_act": "gelu_pytorch_tanh",
        "layer_norm_eps": 1e-6,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "tokens_per_second": 2,
    },
}
PAGE_SIZE = (560, 392)  # height, width: 40 x 28 patches, 280 image tokens


def _tiny_config() -> dict[str, Any]:
    config = copy.deepcopy(SPECS["paddleocr_vl"].config)
    ids = {"<unk>": 0, "<s>": 1, "</s>": 2, "<|IMAGE_PLACEHOLDER|>": 5, "<|video_pad|>": 8}
    ids.update({"<|IMAGE_START|>": 6, "<|IMAGE_END|>": 7})
    for key, value in list(config.items()):
        if isinstance(value, str) and value in ids:
            config[key] = ids[value]
    config["vocab_size"] = 1024
    return config


def _reference_model(config: dict[str, Any]):
    from benchmarks.model_reference import import_paddleformers

    import_paddleformers()
    from paddleformers.transformers.paddleocr_vl.configuration import PaddleOCRVLConfig
    from paddleformers.transformers.paddleocr_vl.modeling import (
        PaddleOCRVLForConditionalGeneration,
    )

    cfg = PaddleOCRVLConfig(**config)
    cfg.fuse_rms_norm = False
    cfg.vision_config.fuse_rms_norm = False
    model = PaddleOCRVLForConditionalGeneration(cfg)
    model.eval()
    return model


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def run(quick: bool = False, repeat: int = 1) -> dict[str, Any]:
    config = _tiny_config() if quick else PADDLEOCR_VL_RELEASED
    processor_config = ProcessorConfig.from_dicts(config, SPECS["paddleocr_vl"].preprocessor)
    processor = MediaProcessor(processor_config)
    page = np.random.default_rng(0).integers(0, 256, (*PAGE_SIZE, 3), dtype=np.uint8)
    media = processor.process_image(page, "page")
    patches = media.items[0].patches
    grid = media.grid_thw
    ids = [1, 11, 12, config["vision_start_token_id"], config["image_token_id"]]
    ids += [config["vision_end_token_id"], 13, 14]
    ids, mm = expand_prompt(ids, [media], processor_config)

    ours = build_model(config)
    ours.fold_normalization(processor_config.image_mean, processor_config.image_std)
    reference = _reference_model(config)
    pixels = paddle.to_tensor(processor.normalize(patches).reshape(-1, 3, 14, 14))
    grid_t = paddle.to_tensor([list(grid)], dtype="int64")
    ids_t = paddle.to_tensor(ids)
    positions = paddle.to_tensor(mm.position_ids)
    patches_t = paddle.to_tensor(patches)

    def ours_vision():
        return ours.encode_images(patches_t, [grid])

    def ours_prefill():
        return ours(ids_t, positions, ours.encode_images(patches_t, [grid]))

    def reference_vision():
        from benchmarks.model_reference import paddleocr_vl_features

        return paddleocr_vl_features(reference, pixels, grid_t)

    def reference_prefill():
        return reference(
            input_ids=ids_t.unsqueeze(0),
            pixel_values=pixels,
            image_grid_thw=grid_t,
            return_dict=True,
        ).logits

    with paddle.no_grad():
        times = {
            "ours_vision_s": _best(ours_vision, repeat),
            "reference_vision_s": _best(reference_vision, repeat),
            "ours_prefill_s": _best(ours_prefill, repeat),
            "reference_prefill_s": _best(reference_prefill, repeat),
        }
    result: dict[str, Any] = {k: round(v, 4) for k, v in times.items()}
    result["vision_speedup"] = round(times["reference_vision_s"] / times["ours_vision_s"], 2)
    result["prefill_speedup"] = round(times["reference_prefill_s"] / times["ours_prefill_s"], 2)
    result["image_tokens"] = media.num_tokens
    result["prompt_tokens"] = len(ids)
    result["dimensions"] = "tiny" if quick else "released"
    result["decode_step"] = "not measured yet: needs the paged-KV runner (runner issue)"
    return result

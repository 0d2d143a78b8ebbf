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
from runner.models import build_model
from runner.tiny_specs import SPECS
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


def _tiny_config(arch: str = "paddleocr_vl") -> dict[str, Any]:
    """make-tiny's config for ``arch`` with special tokens numbered in declaration order."""
    spec = SPECS[arch]
    ids = {token: i for i, token in enumerate(spec.special_tokens)}
    config = copy.deepcopy(spec.config)
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


def _page(processor: MediaProcessor):
    page = np.random.default_rng(0).integers(0, 256, (*PAGE_SIZE, 3), dtype=np.uint8)
    return processor.process_image(page, "page")


def paddleocr_vl(quick: bool, repeat: int) -> dict[str, float]:
    """Vision encoder, whole prefill and one cached decode step of PaddleOCR-VL."""
    from runner.models.layers import ContiguousKVCache

    config = _tiny_config() if quick else PADDLEOCR_VL_RELEASED
    processor_config = ProcessorConfig.from_dicts(config, SPECS["paddleocr_vl"].preprocessor)
    processor = MediaProcessor(processor_config)
    media = _page(processor)
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
    step_position = paddle.to_tensor(np.full((3, 1), len(ids) + mm.rope_delta, dtype=np.int64))

    def ours_decode_step():
        cache = ContiguousKVCache()
        x = ours.embed(ids_t)
        x = paddle.scatter(
            x,
            (ids_t == config["image_token_id"]).nonzero().flatten(),
            ours.encode_images(patches_t, [grid]),
        )
        ours.decode(x, positions, cache)
        start = time.perf_counter()
        ours.logits(ours.decode(ours.embed(ids_t[-1:]), step_position, cache))
        return time.perf_counter() - start

    def reference_generate(tokens: int):
        return reference.generate(
            input_ids=ids_t.unsqueeze(0),
            pixel_values=pixels,
            image_grid_thw=grid_t,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            decode_strategy="greedy_search",
            use_cache=True,
        )

    from benchmarks.model_reference import paddleocr_vl_features

    with paddle.no_grad():
        result = {
            "ours_vision_s": _best(lambda: ours.encode_images(patches_t, [grid]), repeat),
            "reference_vision_s": _best(
                lambda: paddleocr_vl_features(reference, pixels, grid_t), repeat
            ),
            "ours_prefill_s": _best(
                lambda: ours(ids_t, positions, ours.encode_images(patches_t, [grid])), repeat
            ),
            "reference_prefill_s": _best(
                lambda: reference(
                    input_ids=ids_t.unsqueeze(0),
                    pixel_values=pixels,
                    image_grid_thw=grid_t,
                    return_dict=True,
                ),
                repeat,
            ),
            "ours_decode_step_s": min(ours_decode_step() for _ in range(repeat)),
        }
        one = _best(lambda: reference_generate(1), repeat)
        two = _best(lambda: reference_generate(2), repeat)
        result["reference_decode_step_s"] = max(two - one, 1e-9)
    result["image_tokens"] = media.num_tokens
    result["prompt_tokens"] = len(ids)
    return result


def qwen2_5_vl_vision(quick: bool, repeat: int) -> dict[str, float]:
    """Qwen2.5-VL's windowed ViT + merger on the page image."""
    from benchmarks.model_reference import import_paddleformers
    from runner.models.qwen2_vl import QwenVisionTransformer, QwenVLConfig

    if quick:
        config = _tiny_config("qwen2_5_vl")
    else:
        config = {
            **_tiny_config("qwen2_5_vl"),
            "hidden_size": 3584,
            "vision_config": {
                "depth": 32,
                "hidden_act": "silu",
                "hidden_size": 1280,
                "intermediate_size": 3420,
                "num_heads": 16,
                "in_chans": 3,
                "out_hidden_size": 3584,
                "patch_size": 14,
                "spatial_merge_size": 2,
                "window_size": 112,
                "fullatt_block_indexes": [7, 15, 23, 31],
                "tokens_per_second": 2,
                "temporal_patch_size": 2,
            },
        }
    processor_config = ProcessorConfig.from_dicts(config, SPECS["qwen2_5_vl"].preprocessor)
    processor = MediaProcessor(processor_config)
    media = _page(processor)
    patches = media.items[0].patches
    ours = QwenVisionTransformer(QwenVLConfig.from_dict(config))
    ours.eval()
    ours.patch_embed.proj.fold_normalization(
        processor_config.image_mean, processor_config.image_std
    )
    import_paddleformers()
    from paddleformers.transformers.qwen2_5_vl.configuration import Qwen2_5_VLVisionConfig
    from paddleformers.transformers.qwen2_5_vl.modeling import (
        Qwen2_5_VisionTransformerPretrainedModel,
    )

    vision_config = Qwen2_5_VLVisionConfig(**config["vision_config"])
    vision_config.fuse_rms_norm = False
    reference = Qwen2_5_VisionTransformerPretrainedModel(vision_config)
    reference.eval()
    pixels = paddle.to_tensor(processor.normalize(patches))
    grid_t = paddle.to_tensor([list(media.grid_thw)], dtype="int64")
    patches_t = paddle.to_tensor(patches)
    with paddle.no_grad():
        return {
            "ours_vision_s": _best(lambda: ours(patches_t, [media.grid_thw]), repeat),
            "reference_vision_s": _best(lambda: reference(pixels, grid_thw=grid_t), repeat),
        }


def ernie4_5_vl_vision(quick: bool, repeat: int) -> dict[str, float]:
    """ERNIE-4.5-VL's DFNRope ViT on the page image (the resampler is not timed)."""
    from benchmarks.model_reference import patch_paddleformers_ernie_for_cpu
    from runner.models.ernie45_vl import DFNRopeVisionTransformer, Ernie45VLConfig

    vision = {
        "depth": 32,
        "embed_dim": 1280,
        "hidden_size": 1280,
        "hidden_act": "quick_gelu",
        "mlp_ratio": 4,
        "num_heads": 16,
        "in_channels": 3,
        "patch_size": 14,
        "spatial_merge_size": 2,
    }
    config = _tiny_config("ernie4_5_vl")
    if not quick:
        config["vision_config"] = vision
        config["pixel_hidden_size"] = vision["hidden_size"]
    processor_config = ProcessorConfig.from_dicts(
        {"model_type": "ernie4_5_moe_vl"}, SPECS["ernie4_5_vl"].preprocessor
    )
    processor = MediaProcessor(processor_config)
    media = _page(processor)
    patches = media.items[0].patches
    ours = DFNRopeVisionTransformer(Ernie45VLConfig.from_dict(config))
    ours.eval()
    ours.patch_embed.proj.fold_normalization(
        processor_config.image_mean, processor_config.image_std
    )
    patch_paddleformers_ernie_for_cpu()
    from paddleformers.transformers.ernie4_5_moe_vl.model.configuration import (
        Ernie4_5_VLMoeConfig,
    )
    from paddleformers.transformers.ernie4_5_moe_vl.model.dfnrope.modeling import (
        DFNRopeVisionTransformerPretrainedModel,
    )

    full_config = Ernie4_5_VLMoeConfig(**config)
    full_config.fuse_rms_norm = False
    reference = DFNRopeVisionTransformerPretrainedModel(config=full_config)
    reference.eval()
    pixels = paddle.to_tensor(processor.normalize(patches))
    grid_t = paddle.to_tensor([list(media.grid_thw)], dtype="int64")
    patches_t = paddle.to_tensor(patches)
    with paddle.no_grad():
        return {
            "ours_vision_s": _best(lambda: ours(patches_t, [media.grid_thw]), repeat),
            "reference_vision_s": _best(lambda: reference.extract_feature(pixels, grid_t), repeat),
        }


def run(quick: bool = False, repeat: int = 1) -> dict[str, Any]:
    """Every family's figures; ``speedup`` keys are reference time / our time."""
    result: dict[str, Any] = {"dimensions": "tiny" if quick else "released", "page": PAGE_SIZE}
    for family, fn in (
        ("paddleocr_vl", paddleocr_vl),
        ("qwen2_5_vl", qwen2_5_vl_vision),
        ("ernie4_5_vl", ernie4_5_vl_vision),
    ):
        figures = fn(quick, repeat)
        for stage in ("vision", "prefill", "decode_step"):
            ours, ref = figures.get(f"ours_{stage}_s"), figures.get(f"reference_{stage}_s")
            if ours and ref:
                figures[f"{stage}_speedup"] = round(ref / ours, 2)
        result[family] = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}
    return result

"""Model families and the registry from ``config.json`` to model class."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.loader import CheckpointError, load_weights, resolve_model_dir
from runner.models.ernie45_vl import Ernie45VLConfig, Ernie45VLForConditionalGeneration
from runner.models.paddleocr_vl import PaddleOCRVLConfig, PaddleOCRVLForConditionalGeneration
from runner.models.qwen2_vl import QwenVLConfig, QwenVLForConditionalGeneration
from vision.processor_config import ProcessorConfig

# model_type -> (config class, model class)
REGISTRY: dict[str, tuple[Any, Any]] = {
    "paddleocr_vl": (PaddleOCRVLConfig, PaddleOCRVLForConditionalGeneration),
    "qwen2_vl": (QwenVLConfig, QwenVLForConditionalGeneration),
    "qwen2_5_vl": (QwenVLConfig, QwenVLForConditionalGeneration),
    "ernie4_5_moe_vl": (Ernie45VLConfig, Ernie45VLForConditionalGeneration),
}
ARCHITECTURES = {
    "PaddleOCRVLForConditionalGeneration": "paddleocr_vl",
    "Qwen2VLForConditionalGeneration": "qwen2_vl",
    "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
    "Ernie4_5_VLMoeForConditionalGeneration": "ernie4_5_moe_vl",
}


def model_type_of(config: dict[str, Any]) -> str:
    """The registry key for a ``config.json``: its ``model_type``, else its architecture."""
    model_type = config.get("model_type")
    if model_type in REGISTRY:
        return model_type
    for arch in config.get("architectures") or []:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    raise CheckpointError(
        f"unsupported model (model_type {model_type!r}, architectures "
        f"{config.get('architectures')}); supported: {', '.join(sorted(REGISTRY))}"
    )


def build_model(config: dict[str, Any], dtype: str = "float32") -> Any:
    """A randomly initialized model for a parsed ``config.json``."""
    from maca_kernels.ops import paddle

    config_cls, model_cls = REGISTRY[model_type_of(config)]
    previous = paddle.get_default_dtype()
    paddle.set_default_dtype(dtype)
    try:
        model = model_cls(config_cls.from_dict(config))
    finally:
        paddle.set_default_dtype(previous)
    model.eval()
    return model


DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def default_dtype(config: dict[str, Any], on_accelerator: bool) -> str:
    """The dtype policy: float32 on the CPU; the checkpoint's ``torch_dtype`` (bf16/fp16/fp32)
    on accelerators."""
    if not on_accelerator:
        return "float32"
    stored = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    return DTYPES.get(str(stored).replace("torch.", ""), "bfloat16")


def load_model(path: str | Path, dtype: str | None = None, progress: bool = True) -> Any:
    """Build the model of the local checkpoint at ``path`` and load its weights.

    ``dtype`` None applies :func:`default_dtype` for the detected platform. The pixel
    normalization of the checkpoint's ``preprocessor_config.json`` is folded into the patch
    embedding, so the model takes uint8 patches.
    """
    from maca_kernels import detect_platform

    directory = resolve_model_dir(path)
    config = json.loads((directory / "config.json").read_text())
    dtype = dtype or default_dtype(config, detect_platform().is_accelerator)
    model = build_model(config, dtype)
    load_weights(
        model, directory, model.checkpoint_name, model.optional_weights(), progress=progress
    )
    processor = ProcessorConfig.from_checkpoint(directory)
    model.fold_normalization(processor.image_mean, processor.image_std)
    return model

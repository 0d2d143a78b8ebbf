"""Tiny checkpoints written by make-tiny, and paddleformers' reference models loaded from them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runner.make_tiny import make_tiny


@pytest.fixture(scope="session")
def tiny_ocr_dir(tmp_path_factory) -> Path:
    return make_tiny("paddleocr_vl", tmp_path_factory.mktemp("tiny") / "paddleocr_vl", seed=0)


@pytest.fixture(scope="session")
def reference_ocr_model(tiny_ocr_dir, tmp_path_factory):
    """paddleformers' PaddleOCR-VL loaded from (a copy of) the make-tiny directory."""
    from benchmarks.model_reference import import_paddleformers

    import_paddleformers()
    from paddleformers.transformers.paddleocr_vl.modeling import (
        PaddleOCRVLForConditionalGeneration,
    )

    copy = tmp_path_factory.mktemp("pf") / "paddleocr_vl"
    shutil.copytree(tiny_ocr_dir, copy)  # from_pretrained writes metadata into the directory
    model = PaddleOCRVLForConditionalGeneration.from_pretrained(
        str(copy), dtype="float32", convert_from_hf=True
    )
    model.config.fuse_rms_norm = False
    model.config.vision_config.fuse_rms_norm = False
    model.eval()
    return model


@pytest.fixture(scope="session")
def tiny_qwen25_dir(tmp_path_factory) -> Path:
    return make_tiny("qwen2_5_vl", tmp_path_factory.mktemp("tiny") / "qwen2_5_vl", seed=0)


@pytest.fixture(scope="session")
def reference_qwen25_model(tiny_qwen25_dir, tmp_path_factory):
    """paddleformers' Qwen2.5-VL loaded from (a copy of) the make-tiny directory."""
    import json

    from benchmarks.model_reference import import_paddleformers

    import_paddleformers()
    from paddleformers.transformers.qwen2_5_vl.configuration import Qwen2_5_VLConfig
    from paddleformers.transformers.qwen2_5_vl.modeling import Qwen2_5_VLForConditionalGeneration

    copy = tmp_path_factory.mktemp("pf") / "qwen2_5_vl"
    shutil.copytree(tiny_qwen25_dir, copy)
    config = Qwen2_5_VLConfig(**json.loads((copy / "config.json").read_text()))
    for part in (config, config.vision_config, config.text_config):
        part.fuse_rms_norm = False
        part.fuse_swiglu = False
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        str(copy), config=config, dtype="float32"
    )
    model.eval()
    return model


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory) -> Path:
    return make_tiny("qwen2_vl", tmp_path_factory.mktemp("tiny") / "qwen2_vl", seed=0)


@pytest.fixture(scope="session")
def tiny_ernie_dir(tmp_path_factory) -> Path:
    return make_tiny("ernie4_5_vl", tmp_path_factory.mktemp("tiny") / "ernie4_5_vl", seed=0)


@pytest.fixture(scope="session")
def reference_ernie_model(tiny_ernie_dir, tmp_path_factory):
    """paddleformers' ERNIE-4.5-VL (CPU-patched, see benchmarks.model_reference) loaded from a
    copy of the make-tiny directory."""
    import json

    from benchmarks.model_reference import patch_paddleformers_ernie_for_cpu

    patch_paddleformers_ernie_for_cpu()
    from paddleformers.transformers.ernie4_5_moe_vl.model.configuration import (
        Ernie4_5_VLMoeConfig,
    )
    from paddleformers.transformers.ernie4_5_moe_vl.model.modeling_moe_vl import (
        Ernie4_5_VLMoeForConditionalGeneration,
    )

    copy = tmp_path_factory.mktemp("pf") / "ernie4_5_vl"
    shutil.copytree(tiny_ernie_dir, copy)
    config = Ernie4_5_VLMoeConfig(**json.loads((copy / "config.json").read_text()))
    config.fuse_rms_norm = False
    model = Ernie4_5_VLMoeForConditionalGeneration.from_pretrained(
        str(copy), config=config, dtype="float32"
    )
    model.eval()
    return model

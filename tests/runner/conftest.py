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

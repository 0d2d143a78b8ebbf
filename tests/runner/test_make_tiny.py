"""make-tiny writes checkpoints the ecosystem's own loaders accept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from runner.make_tiny import make_tiny
from tests.runner.test_loader import read_all


def test_transformers_loads_config_tokenizer_and_processor(tiny_ocr_dir):
    import paddleformers  # noqa: F401  (before transformers' processors)
    from transformers import AutoConfig, AutoProcessor, AutoTokenizer

    config = AutoConfig.from_pretrained(str(tiny_ocr_dir))
    assert config.model_type == "paddleocr_vl"
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_ocr_dir))
    processor = AutoProcessor.from_pretrained(str(tiny_ocr_dir))
    assert type(processor).__name__ == "PaddleOCRVLProcessor"
    raw = json.loads((tiny_ocr_dir / "config.json").read_text())
    assert tokenizer.convert_tokens_to_ids("<|IMAGE_PLACEHOLDER|>") == raw["image_token_id"]
    assert tokenizer.convert_tokens_to_ids("<|IMAGE_START|>") == raw["vision_start_token_id"]
    assert raw["vocab_size"] == len(tokenizer)


def test_chat_template_renders_the_image_placeholders(tiny_ocr_dir):
    import paddleformers  # noqa: F401
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_ocr_dir))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "OCR:"}]}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|begin_of_sentence|>User: <|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>OCR:\n"
        "Assistant:\n"
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text  # byte-level BPE round trip


def test_same_seed_same_weights_other_seed_different(tmp_path, tiny_ocr_dir):
    again = make_tiny("paddleocr_vl", tmp_path / "again", seed=0)
    other = make_tiny("paddleocr_vl", tmp_path / "other", seed=1)
    first, second, third = read_all(tiny_ocr_dir), read_all(again), read_all(other)
    name = "model.layers.0.self_attn.q_proj.weight"
    np.testing.assert_array_equal(first[name].numpy(), second[name].numpy())
    assert not np.array_equal(first[name].numpy(), third[name].numpy())


def test_cli(tmp_path):
    exe = Path(sys.executable).parent / "vlm-server"
    out = tmp_path / "cli"
    done = subprocess.run(
        [str(exe), "make-tiny", "--arch", "paddleocr_vl", "--out", str(out), "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "random" in done.stdout
    assert {p.name for p in out.iterdir()} >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "preprocessor_config.json",
        "generation_config.json",
    }


def test_qwen_checkpoints_load_in_transformers(tiny_qwen2_dir, tiny_qwen25_dir):
    """AutoConfig and AutoTokenizer load both Qwen families and the chat template renders the
    placeholders. (transformers' Qwen AutoProcessor needs torchvision for its video processor,
    which this environment does not have.)"""
    import paddleformers  # noqa: F401
    from transformers import AutoConfig, AutoTokenizer

    content = [{"type": "image"}, {"type": "video"}, {"type": "text", "text": "Describe."}]
    for directory, model_type in ((tiny_qwen2_dir, "qwen2_vl"), (tiny_qwen25_dir, "qwen2_5_vl")):
        assert AutoConfig.from_pretrained(str(directory)).model_type == model_type
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
        assert text.endswith(
            "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|vision_start|>"
            "<|video_pad|><|vision_end|>Describe.<|im_end|>\n<|im_start|>assistant\n"
        )
        raw = json.loads((directory / "config.json").read_text())
        assert tokenizer.convert_tokens_to_ids("<|image_pad|>") == raw["image_token_id"]
        assert tokenizer.convert_tokens_to_ids("<|video_pad|>") == raw["video_token_id"]


def test_ernie_checkpoint_loads_in_the_ecosystem(tiny_ernie_dir):
    """ERNIE-4.5-VL's released layout (model_type ``ernie4_5_moe_vl``) is paddleformers'; the
    tokenizer and chat template load with transformers."""
    import paddleformers  # noqa: F401
    from paddleformers.transformers.ernie4_5_moe_vl.model.configuration import (
        Ernie4_5_VLMoeConfig,
    )
    from transformers import AutoTokenizer

    raw = json.loads((tiny_ernie_dir / "config.json").read_text())
    assert Ernie4_5_VLMoeConfig(**raw).im_patch_id == raw["im_patch_id"]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_ernie_dir))
    content = [{"type": "image"}, {"type": "video"}, {"type": "text", "text": "Describe."}]
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    assert text == (
        "<|begin_of_sentence|>User: Picture 1:<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>"
        "Video 1:<|VIDEO_START|><|VIDEO_PLACEHOLDER|><|VIDEO_END|>Describe.\nAssistant: "
    )
    assert tokenizer.convert_tokens_to_ids("<|IMAGE_PLACEHOLDER|>") == raw["im_patch_id"]

"""Our PaddleOCR-VL against paddleformers', both loaded from the same make-tiny directory."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.model_reference import paddleocr_vl_features
from maca_kernels.ops import paddle
from runner.models import load_model
from vision.processor import MediaProcessor
from vision.processor_config import ProcessorConfig
from vision.prompt import expand_prompt

TOL = 1e-4


@pytest.fixture(scope="module")
def ours(tiny_ocr_dir):
    return load_model(tiny_ocr_dir, progress=False)


@pytest.fixture(scope="module")
def processor(tiny_ocr_dir):
    return MediaProcessor(ProcessorConfig.from_checkpoint(tiny_ocr_dir))


@pytest.fixture(scope="module")
def media(processor, astronaut, coffee):
    # two real photos of different sizes and aspect ratios
    return [
        processor.process_image(astronaut[:300, :420], "a"),
        processor.process_image(coffee[:200, :500], "b"),
    ]


def reference_features(model, processor, media):
    patches = np.concatenate([m.items[0].patches for m in media])
    pixels = paddle.to_tensor(processor.normalize(patches).reshape(-1, 3, 14, 14))
    grid = paddle.to_tensor([list(m.grid_thw) for m in media], dtype="int64")
    features = paddleocr_vl_features(model, pixels, grid)
    if isinstance(features, (list, tuple)):
        features = paddle.concat(features)
    return features.numpy().reshape(-1, features.shape[-1])


def our_features(model, media):
    patches = paddle.to_tensor(np.concatenate([m.items[0].patches for m in media]))
    return model.encode_images(patches, [m.grid_thw for m in media]).numpy()


def test_vision_features_match(ours, reference_ocr_model, processor, media):
    with paddle.no_grad():
        got = our_features(ours, media)
        expected = reference_features(reference_ocr_model, processor, media)
    assert got.shape == expected.shape == (sum(m.num_tokens for m in media), 64)
    assert np.abs(got - expected).max() <= TOL


def prompt_ids(tiny_ocr_dir, text: str, images: int) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_ocr_dir))
    content = [{"type": "image"}] * images + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


@pytest.mark.parametrize("images", [0, 1, 2])
def test_logits_match(ours, reference_ocr_model, processor, media, tiny_ocr_dir, images):
    ids, mm = expand_prompt(
        prompt_ids(tiny_ocr_dir, "Read the text in the picture.", images),
        media[:images],
        processor.config,
    )
    with paddle.no_grad():
        features = paddle.to_tensor(our_features(ours, media[:images])) if images else None
        got = ours(paddle.to_tensor(ids), paddle.to_tensor(mm.position_ids), features).numpy()
        kwargs = {"input_ids": paddle.to_tensor([ids])}
        if images:
            patches = np.concatenate([m.items[0].patches for m in media[:images]])
            kwargs["pixel_values"] = paddle.to_tensor(
                processor.normalize(patches).reshape(-1, 3, 14, 14)
            )
            kwargs["image_grid_thw"] = paddle.to_tensor(
                [list(m.grid_thw) for m in media[:images]], dtype="int64"
            )
            # paddleformers' own rope index handles one image per sequence; pass ours (checked
            # against its Qwen2.5-VL rule in tests/vision) so several images are compared too.
            kwargs["position_ids"] = paddle.to_tensor(mm.position_ids[:, None, :])
        expected = reference_ocr_model(**kwargs, return_dict=True).logits.numpy()[0]
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= TOL


def test_cached_decoding_matches_full_recompute(ours, processor, media, tiny_ocr_dir):
    """Prefill, then decode three tokens with the contiguous KV cache: the logits equal those of
    the whole sequence computed at once."""
    from runner.models.layers import ContiguousKVCache, FullSequenceAttention

    ids, mm = expand_prompt(prompt_ids(tiny_ocr_dir, "OCR:", 1), media[:1], processor.config)
    extra = [11, 12, 13]
    with paddle.no_grad():
        features = paddle.to_tensor(our_features(ours, media[:1]))
        full_ids = paddle.to_tensor(ids + extra)
        n = len(ids)
        positions = np.concatenate(
            [mm.position_ids, np.tile(np.arange(n, n + 3) + mm.rope_delta, (3, 1))], axis=1
        )
        x = ours.embed(full_ids)
        mask = (full_ids == ours.config.image_token_id).nonzero().flatten()
        x = paddle.scatter(x, mask, features)
        whole = ours.logits(
            ours.decode(x, paddle.to_tensor(positions), FullSequenceAttention([0, n + 3]))
        ).numpy()
        cache = ContiguousKVCache()
        steps = [ours.logits(ours.decode(x[:n], paddle.to_tensor(positions[:, :n]), cache))]
        for i in range(3):
            pos = paddle.to_tensor(positions[:, n + i : n + i + 1])
            steps.append(ours.logits(ours.decode(x[n + i : n + i + 1], pos, cache)))
        cached = paddle.concat(steps).numpy()
    assert cache.length == n + 3
    assert np.abs(cached - whole).max() <= 1e-4

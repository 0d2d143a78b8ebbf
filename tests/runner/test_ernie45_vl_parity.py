"""Our ERNIE-4.5-VL against paddleformers' (run on the CPU with its GPU-only kernels replaced by
plain math, see benchmarks.model_reference), both loaded from the same make-tiny directory."""

from __future__ import annotations

import numpy as np
import pytest

from maca_kernels.ops import paddle
from runner.models import load_model
from runner.models.ernie45_vl import ernie_3d_cos_sin
from vision.processor import MediaProcessor
from vision.processor_config import ProcessorConfig
from vision.prompt import expand_prompt

TOL = 1e-4


@pytest.fixture(scope="module")
def ours(tiny_ernie_dir):
    return load_model(tiny_ernie_dir, progress=False)


@pytest.fixture(scope="module")
def processor(tiny_ernie_dir):
    return MediaProcessor(ProcessorConfig.from_checkpoint(tiny_ernie_dir))


@pytest.fixture(scope="module")
def media(processor, astronaut, coffee):
    config = processor.config
    small = type(config.video_resize)(28, 28 * 28 * 4, 28 * 28 * 12)
    video_processor = MediaProcessor(type(config)(**{**config.__dict__, "video_resize": small}))
    frames = np.stack([coffee[i * 6 : i * 6 + 120, i * 9 : i * 9 + 170] for i in range(4)])
    return [
        processor.process_image(astronaut[:120, :160], "a"),
        processor.process_image(coffee[:90, :200], "b"),
        video_processor.process_video(frames, 2.0, "v"),
    ]


def rows(items):
    return np.concatenate([item.patches for m in items for item in m.items])


def test_3d_rope_slots():
    positions = paddle.to_tensor(np.array([[5], [7], [11]], dtype="int64"))  # t, h, w
    cos, sin = ernie_3d_cos_sin(positions, 16, 10000.0, 2)
    inv = 1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16)
    expected = np.array([7, 11, 7, 11, 7, 11, 5, 5]) * inv  # h even, w odd, last 2 slots t
    np.testing.assert_allclose(cos.numpy()[0], np.cos(expected), atol=1e-6)
    np.testing.assert_allclose(sin.numpy()[0], np.sin(expected), atol=1e-6)


def reference_features(model, processor, media):
    pixels = paddle.to_tensor(processor.normalize(rows(media)))
    grid = paddle.to_tensor([list(m.grid_thw) for m in media], dtype="int64")
    vit = model.vision_model(pixels, grid)
    return model.model.resampler_model(vit, None, None, None, grid).numpy()


def test_vision_features_match(ours, reference_ernie_model, processor, media):
    with paddle.no_grad():
        got = ours.encode_images(
            paddle.to_tensor(rows(media)), [item.grid_thw for m in media for item in m.items]
        ).numpy()
        expected = reference_features(reference_ernie_model, processor, media)
    assert got.shape == expected.shape == (sum(m.num_tokens for m in media), 64)
    assert np.abs(got - expected).max() <= TOL


@pytest.mark.parametrize("with_media", [False, True])
def test_logits_match(ours, reference_ernie_model, processor, media, tiny_ernie_dir, with_media):
    import paddleformers  # noqa: F401
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_ernie_dir))
    content = [{"type": "text", "text": "Compare these."}]
    if with_media:
        content = [{"type": "image"}, {"type": "text", "text": "and"}, {"type": "image"}]
        content += [{"type": "video"}, {"type": "text", "text": "What changed?"}]
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=True, add_generation_prompt=True
    )
    ids = list(ids if isinstance(ids, list) else ids["input_ids"])
    used = media if with_media else []
    expanded, mm = expand_prompt(ids, used, processor.config)
    cfg = ours.config
    with paddle.no_grad():
        features = None
        if used:
            features = ours.encode_images(
                paddle.to_tensor(rows(used)), [item.grid_thw for m in used for item in m.items]
            )
        got = ours(paddle.to_tensor(expanded), paddle.to_tensor(mm.position_ids), features)
        # paddleformers uses the image placeholder id for video patches too, and types the four
        # start/end markers as vision tokens (they go to the vision experts).
        patch = processor.config.image_token_id
        ref_ids = [patch if t == processor.config.video_token_id else t for t in expanded]
        types = ours.is_vision_token(paddle.to_tensor(expanded)).astype("int64").numpy().tolist()
        kwargs = {}
        if used:
            from types import SimpleNamespace

            mean = np.repeat(processor.config.image_mean, 196)[None].astype("float32")
            std = np.repeat(processor.config.image_std, 196)[None].astype("float32")
            reference_ernie_model.add_image_preprocess(
                SimpleNamespace(
                    rescale_factor=1 / 255,
                    image_mean_tensor=paddle.to_tensor(mean),
                    image_std_tensor=paddle.to_tensor(std),
                )
            )
            kwargs = {
                "images": paddle.to_tensor(rows(used)),
                "grid_thw": paddle.to_tensor([list(m.grid_thw) for m in used], dtype="int64"),
            }
        try:
            expected = reference_ernie_model(
                input_ids=paddle.to_tensor([ref_ids]),
                position_ids=paddle.to_tensor(mm.position_ids.T[None]),
                token_type_ids=paddle.to_tensor([types + [0]]),
                return_dict=True,
                use_cache=False,
                **kwargs,
            ).logits.numpy()[0]
        finally:
            reference_ernie_model.add_image_preprocess(None)
    assert got.shape == expected.shape
    assert cfg.tie_word_embeddings
    assert np.abs(got.numpy() - expected).max() <= TOL

"""Our Qwen2.5-VL against paddleformers', both loaded from the same make-tiny directory; Qwen2-VL
(which paddleformers lacks) component by component."""

from __future__ import annotations

import numpy as np
import pytest

from maca_kernels.ops import paddle
from runner.models import load_model
from runner.models.qwen2_vl import block_rope_positions, window_partition
from vision.processor import MediaProcessor
from vision.processor_config import ProcessorConfig
from vision.prompt import expand_prompt

TOL = 1e-4


@pytest.fixture(scope="module")
def ours(tiny_qwen25_dir):
    return load_model(tiny_qwen25_dir, progress=False)


@pytest.fixture(scope="module")
def processor(tiny_qwen25_dir):
    config = ProcessorConfig.from_checkpoint(tiny_qwen25_dir)
    return MediaProcessor(config)


@pytest.fixture(scope="module")
def media(processor, astronaut, coffee):
    frames = np.stack([coffee[i * 8 : i * 8 + 140, i * 10 : i * 10 + 196] for i in range(4)])
    return [
        processor.process_image(astronaut[:150, :210], "a"),  # partial windows at the edges
        processor.process_image(coffee[:100, :100], "b"),
        processor.process_video(frames, 2.0, "v"),  # 2 temporal chunks
    ]


def rows(items):
    return np.concatenate([item.patches for m in items for item in m.items])


def test_window_partition_examples():
    # 6x10 patches = 3x5 merged tokens, windows of 2x2 merged tokens
    order, cu = window_partition([(1, 6, 10)], 2)
    assert order == [0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12, 13, 14]
    assert cu == [0, 16, 32, 40, 48, 56, 60]
    order, cu = window_partition([(2, 4, 6)], 2)
    assert order == [0, 1, 3, 4, 2, 5, 6, 7, 9, 10, 8, 11]
    assert cu == [0, 16, 24, 40, 48]


def test_rope_positions_follow_merge_block_order():
    row, col = block_rope_positions([(1, 4, 4)], 2)
    assert row.numpy().tolist()[:8] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert col.numpy().tolist()[:8] == [0, 1, 0, 1, 2, 3, 2, 3]


def test_vision_features_match(ours, reference_qwen25_model, processor, media):
    images, video = media[:2], media[2]
    with paddle.no_grad():
        got = ours.encode_images(paddle.to_tensor(rows(images)), [m.grid_thw for m in images])
        pixels = paddle.to_tensor(processor.normalize(rows(images)))
        grid = paddle.to_tensor([list(m.grid_thw) for m in images], dtype="int64")
        expected = paddle.concat(reference_qwen25_model.model.get_image_features(pixels, grid))
        assert np.abs(got.numpy() - expected.numpy()).max() <= TOL
        # a video: our per-chunk items encode to the reference's whole-video features
        chunks = ours.encode_images(
            paddle.to_tensor(rows([video])), [item.grid_thw for item in video.items]
        )
        whole = ours.encode_images(paddle.to_tensor(rows([video])), [video.grid_thw])
        reference = reference_qwen25_model.model.get_video_features(
            paddle.to_tensor(processor.normalize(rows([video]))),
            paddle.to_tensor([list(video.grid_thw)], dtype="int64"),
        )
        reference = paddle.concat(reference).numpy()
    assert np.abs(chunks.numpy() - reference).max() <= TOL
    assert np.abs(whole.numpy() - reference).max() <= TOL


def test_logits_match_with_images_and_video(
    ours, reference_qwen25_model, processor, media, tiny_qwen25_dir
):
    import paddleformers  # noqa: F401
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen25_dir))
    content = [{"type": "image"}, {"type": "text", "text": "Compare"}, {"type": "image"}]
    content += [{"type": "video"}, {"type": "text", "text": "what changes?"}]
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=True, add_generation_prompt=True
    )
    ids = list(ids if isinstance(ids, list) else ids["input_ids"])
    expanded, mm = expand_prompt(ids, media, processor.config)
    images, video = media[:2], media[2]
    with paddle.no_grad():
        features = ours.encode_images(
            paddle.to_tensor(rows(media)), [item.grid_thw for m in media for item in m.items]
        )
        got = ours(paddle.to_tensor(expanded), paddle.to_tensor(mm.position_ids), features)
        expected = reference_qwen25_model(
            input_ids=paddle.to_tensor([expanded]),
            pixel_values=paddle.to_tensor(processor.normalize(rows(images))),
            image_grid_thw=paddle.to_tensor([list(m.grid_thw) for m in images], dtype="int64"),
            pixel_values_videos=paddle.to_tensor(processor.normalize(rows([video]))),
            video_grid_thw=paddle.to_tensor([list(video.grid_thw)], dtype="int64"),
            second_per_grid_ts=paddle.to_tensor([video.seconds_per_grid_t]),
            return_dict=True,
        )
    assert np.abs(got.numpy() - expected.logits.numpy()[0]).max() <= TOL
    assert int(expected.rope_deltas.numpy().ravel()[0]) == mm.rope_delta


def test_text_only_logits_match(ours, reference_qwen25_model, tiny_qwen25_dir):
    import paddleformers  # noqa: F401
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen25_dir))
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Read the sign, please."}],
        tokenize=True,
        add_generation_prompt=True,
    )
    ids = list(ids if isinstance(ids, list) else ids["input_ids"])
    positions = np.tile(np.arange(len(ids)), (3, 1))
    with paddle.no_grad():
        got = ours(paddle.to_tensor(ids), paddle.to_tensor(positions)).numpy()
        expected = reference_qwen25_model(input_ids=paddle.to_tensor([ids]), return_dict=True)
    assert np.abs(got - expected.logits.numpy()[0]).max() <= TOL

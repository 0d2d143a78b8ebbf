"""3D rope positions parity: ``expand_prompt`` against the references' ``get_rope_index``.

Prompts mix text, several images and videos processed by our ``MediaProcessor`` from real
photographs. Our prompt holds one placeholder per media item wrapped in the family's
vision-start/end tokens; the expanded ids (which keep those markers around each placeholder run)
are what the reference sees, so both sides number the same sequence:

* Qwen2-VL / Qwen2.5-VL: paddleformers ``Qwen2_5_VLModel.get_rope_index`` (Qwen2-VL has no
  paddleformers model: its positions are 2.5's with one temporal step per grid step), with
  ``second_per_grid_ts`` = our ``ProcessedMedia.seconds_per_grid_t``;
* PaddleOCR-VL: ``PaddleOCRVLForConditionalGeneration.get_rope_index``, one image per prompt
  (the reference numbers only the first image of a sequence);
* ERNIE-4.5-VL: ``Ernie4_5_VLMoeForConditionalGeneration.get_rope_index`` and the ERNIE
  processor's own ``position_ids`` (plus its ids, pixels and token types).

Every expansion is also checked for internal consistency: token types, item spans and the
placeholder ids agree.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests import reference
from vision.processor import MediaProcessor
from vision.prompt import expand_prompt
from vision.released_configs import released_processor_config
from vision.types import IMAGE, TEXT, VIDEO, MultimodalInputs, ProcessedMedia
from vision.video import qwen_frame_indices

HYPOTHESIS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# (height, width) of the test images: small, so prompts stay a few hundred tokens
IMAGE_SIZES = [(56, 84), (112, 140), (200, 150), (90, 200), (60, 60)]
# (frames, height, width) of the test videos (Qwen upscales frames to >= 128 * 28 * 28 pixels)
VIDEO_SHAPES = [(4, 56, 84), (2, 60, 60), (5, 70, 100)]
SAMPLE_FPS = [1.0, 2.0, 4.0]
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field")


# -- media ---------------------------------------------------------------------------------------
@cache
def _photo(index: int) -> np.ndarray:
    from skimage import data

    return np.ascontiguousarray(getattr(data, PHOTOS[index % len(PHOTOS)])()[:, :, :3])


@cache
def image_pixels(index: int) -> np.ndarray:
    height, width = IMAGE_SIZES[index]
    photo = _photo(index)
    y, x = 17 * index, 23 * index
    return np.ascontiguousarray(photo[y : y + height, x : x + width])


@cache
def video_frames(index: int) -> np.ndarray:
    count, height, width = VIDEO_SHAPES[index]
    photo = _photo(index + 2)
    return np.stack([photo[5 * i : 5 * i + height, 7 * i : 7 * i + width] for i in range(count)])


@cache
def processor(family: str) -> MediaProcessor:
    return MediaProcessor(released_processor_config(family))


@cache
def image_media(family: str, index: int) -> ProcessedMedia:
    return processor(family).process_image(image_pixels(index), f"img{index}")


@cache
def video_media(family: str, index: int, fps: float) -> ProcessedMedia:
    return processor(family).process_video(video_frames(index), fps, f"vid{index}@{fps}")


# -- prompts -------------------------------------------------------------------------------------
def _markers(family: str) -> dict[str, tuple[int, int]]:
    """(start, end) tokens around a placeholder, per modality."""
    cfg = reference.released_model_config(family)
    if family == "ernie4_5_vl":
        return {
            "image": (cfg["image_start_token_id"], cfg["image_end_token_id"]),
            "video": (cfg["video_start_token_id"], cfg["video_end_token_id"]),
        }
    pair = (cfg["vision_start_token_id"], cfg["vision_end_token_id"])
    return {"image": pair, "video": pair}


def build_prompt(family: str, layout: list) -> tuple[list[int], list[ProcessedMedia]]:
    """``layout``: ``("text", [ids])``, ``("image", index)`` or ``("video", index, fps)``."""
    config = released_processor_config(family)
    markers = _markers(family)
    ids: list[int] = []
    media: list[ProcessedMedia] = []
    for part in layout:
        if part[0] == "text":
            ids.extend(part[1])
            continue
        start, end = markers[part[0]]
        if part[0] == "image":
            media.append(image_media(family, part[1]))
            placeholder = config.image_token_id
        else:
            media.append(video_media(family, part[1], part[2]))
            placeholder = config.video_token_id
        ids.extend([start, placeholder, end])
    return ids, media


def _grids(media: list[ProcessedMedia], modality: str) -> list[tuple[int, int, int]]:
    return [m.grid_thw for m in media if m.modality == modality]


def check_consistency(
    family: str, ids: list[int], mm: MultimodalInputs, media: list[ProcessedMedia]
) -> None:
    """Token types, item spans, placeholder ids and positions agree with each other."""
    config = released_processor_config(family)
    placeholder = {"image": config.image_token_id, "video": config.video_token_id}
    kind = {"image": IMAGE, "video": VIDEO}
    n = len(ids)
    assert mm.position_ids.shape == (3, n) and mm.position_ids.dtype == np.int64
    assert mm.token_type_ids.shape == (n,)
    assert mm.rope_delta == int(mm.position_ids.max()) + 1 - n
    expected_items = [item for m in media for item in m.items]
    assert len(mm.items) == len(expected_items)
    covered = np.zeros(n, dtype=bool)
    previous_end = 0
    for item, source in zip(mm.items, expected_items, strict=True):
        assert item.offset >= previous_end, "spans overlap or are out of order"
        previous_end = item.end
        assert item.modality == source.modality and item.grid_thw == source.grid_thw
        assert item.mm_hash == source.mm_hash
        assert item.length == source.num_tokens
        t, h, w = item.grid_thw
        merge = config.merge_size**2
        if item.modality == "video":
            merge *= config.video_temporal_merge
        assert item.length == t * h * w // merge
        span = slice(item.offset, item.end)
        assert all(token == placeholder[item.modality] for token in ids[span])
        assert (mm.token_type_ids[span] == kind[item.modality]).all()
        covered[span] = True
    assert (mm.token_type_ids[~covered] == TEXT).all()
    placeholders = np.isin(np.asarray(ids), [p for p in placeholder.values() if p is not None])
    assert np.array_equal(placeholders, covered), "placeholder ids outside the item spans"
    # each video's chunks are contiguous, as one span
    cursor = 0
    for m in media:
        spans = mm.items[cursor : cursor + len(m.items)]
        cursor += len(m.items)
        for a, b in zip(spans, spans[1:], strict=False):
            assert b.offset == a.end
    assert mm.token_type_ids.sum() > 0 or not media


# -- Qwen2-VL / Qwen2.5-VL -----------------------------------------------------------------------
def _compare_qwen(family: str, layout: list) -> None:
    tokens, media = build_prompt(family, layout)
    ids, mm = expand_prompt(tokens, media, released_processor_config(family))
    check_consistency(family, ids, mm, media)
    videos = [m for m in media if m.modality == "video"]
    expected, delta = reference.qwen25_rope_index(
        ids,
        _grids(media, "image"),
        _grids(media, "video"),
        [m.seconds_per_grid_t for m in videos],
        family=family,
    )
    differ = np.nonzero((expected != mm.position_ids).any(axis=0))[0]
    assert differ.size == 0, (
        f"{family}: {differ.size} of {len(ids)} positions differ, first at {differ[0]}: "
        f"ours {mm.position_ids[:, differ[0]].tolist()}, "
        f"reference {expected[:, differ[0]].tolist()}"
        f" (seconds per grid step {[m.seconds_per_grid_t for m in videos]})"
    )
    assert mm.rope_delta == delta


def _text(*ids: int) -> tuple:
    return ("text", list(ids))


@pytest.mark.parametrize("family", reference.QWEN_FAMILIES)
@pytest.mark.parametrize("fps", SAMPLE_FPS)
def test_qwen_mixed_prompt(family: str, fps: float) -> None:
    layout = [
        _text(1, 2, 3),
        ("image", 0),
        _text(4),
        ("video", 0, fps),
        _text(5, 6),
        ("image", 1),
        ("image", 2),
        ("video", 2, fps),
        ("video", 1, fps),
        _text(7, 8, 9),
        ("image", 3),
    ]
    _compare_qwen(family, layout)


@pytest.mark.parametrize("family", reference.QWEN_FAMILIES)
def test_qwen_media_only_and_text_only(family: str) -> None:
    _compare_qwen(family, [("image", 4)])
    _compare_qwen(family, [("video", 0, 2.0)])
    tokens = [11, 12, 13]
    ids, mm = expand_prompt(tokens, [], released_processor_config(family))
    assert ids == tokens
    assert mm.position_ids.tolist() == [[0, 1, 2]] * 3 and mm.rope_delta == 0
    assert mm.token_type_ids.tolist() == [TEXT] * 3 and mm.items == []


def _compare_qwen25_video(count: int, sample_fps: float, label: str) -> None:
    """One video of ``count`` frames sampled at ``sample_fps``, between text tokens."""
    family = "qwen2_5_vl"
    config = released_processor_config(family)
    frames = np.repeat(image_pixels(4)[None, :28, :28], count, axis=0)
    media = processor(family).process_video(frames, sample_fps, "v")
    start, end = _markers(family)["video"]
    tokens = [1, 2, start, config.video_token_id, end, 3]
    ids, mm = expand_prompt(tokens, [media], config)
    check_consistency(family, ids, mm, [media])
    expected, delta = reference.qwen25_rope_index(
        ids, [], [media.grid_thw], [media.seconds_per_grid_t]
    )
    differ = np.nonzero(expected[0] != mm.position_ids[0])[0]
    assert differ.size == 0, (
        f"{label}: {count} frames, sample_fps {sample_fps!r}, seconds_per_grid_t "
        f"{media.seconds_per_grid_t!r}: {differ.size} temporal positions differ; first at token "
        f"{differ[0]}: ours t={int(mm.position_ids[0, differ[0]])}, reference "
        f"t={int(expected[0, differ[0]])}"
    )
    assert np.array_equal(expected, mm.position_ids)
    assert mm.rope_delta == delta


@pytest.mark.parametrize(
    ("total", "video_fps"),
    [(198, 30.0), (625, 30.0), (954, 24.0), (300, 30.0)],
    ids=["198f@30", "625f@30", "954f@24", "300f@30"],
)
def test_qwen25_video_time_positions_for_real_sampling_rates(total: int, video_fps: float):
    """Qwen2.5-VL video t positions ``int(i * seconds_per_grid_t * tokens_per_second)`` for the
    sampling rate our ingestion computes (frames sampled / duration) for common videos. The
    reference multiplies in float32 (a paddle float32 tensor times int64 indices) and truncates,
    so the result depends on that rounding: in float64, 198 frames at 30 fps (12 frames sampled,
    1.1 s per grid step) put grid step 5 at t=10 (5 * 2.1999999999999997) where the reference
    has 11."""
    count = len(qwen_frame_indices(total, video_fps, 2.0, 4, 768))
    sample_fps = count / (total / video_fps)  # what MediaIngestor.video passes
    _compare_qwen25_video(count, sample_fps, f"{total} frames at {video_fps} fps")


@pytest.mark.parametrize("sample_fps", [0.12, 1.04, 2.08, 4.16, 2.6, 3.7])
def test_qwen25_video_time_positions_on_exact_products(sample_fps: float):
    """Rates where some ``i * 2 / fps * 2`` is an integer in exact arithmetic: float32 and
    float64 truncate to different sides there (e.g. fps 1.04, step 13: reference 50)."""
    _compare_qwen25_video(60, sample_fps, f"fps {sample_fps}")


@HYPOTHESIS
@given(
    count=st.integers(1, 40),
    centi_fps=st.integers(10, 1000),
)
def test_qwen25_video_time_positions_random_rates(count: int, centi_fps: int):
    _compare_qwen25_video(count, centi_fps / 100, "random rate")


def _layouts(n_images: int, n_videos: int, with_video: bool) -> st.SearchStrategy:
    text = st.lists(st.integers(1, 5000), min_size=0, max_size=4).map(lambda ids: ("text", ids))
    image = st.integers(0, n_images - 1).map(lambda i: ("image", i))
    parts = [text, image]
    if with_video:
        video = st.tuples(
            st.just("video"), st.integers(0, n_videos - 1), st.sampled_from(SAMPLE_FPS)
        )
        parts.append(video)
    return st.lists(st.one_of(*parts), min_size=1, max_size=7).filter(
        lambda layout: any(part[0] != "text" for part in layout)
    )


@pytest.mark.parametrize("family", reference.QWEN_FAMILIES)
@HYPOTHESIS
@given(layout=_layouts(len(IMAGE_SIZES), len(VIDEO_SHAPES), with_video=True))
def test_qwen_random_layouts(family: str, layout: list) -> None:
    _compare_qwen(family, layout)


# -- PaddleOCR-VL --------------------------------------------------------------------------------
def _compare_paddleocr(prefix: list[int], image: int, suffix: list[int]) -> None:
    family = "paddleocr_vl"
    tokens, media = build_prompt(family, [("text", prefix), ("image", image), ("text", suffix)])
    ids, mm = expand_prompt(tokens, media, released_processor_config(family))
    check_consistency(family, ids, mm, media)
    # the reference supports exactly one image per sequence (it takes the grid of row i and the
    # first placeholder run only), so PaddleOCR-VL prompts here hold one image
    expected, delta = reference.paddleocr_rope_index(ids, media[0].grid_thw)
    assert np.array_equal(expected, mm.position_ids)
    assert mm.rope_delta == delta


@pytest.mark.parametrize("image", range(len(IMAGE_SIZES)))
def test_paddleocr_single_image(image: int) -> None:
    bos = 100273
    _compare_paddleocr([bos, 5, 6, 7], image, [8, 9])


@HYPOTHESIS
@given(
    prefix=st.lists(st.integers(1, 5000), max_size=6),
    image=st.integers(0, len(IMAGE_SIZES) - 1),
    suffix=st.lists(st.integers(1, 5000), max_size=6),
)
def test_paddleocr_random_layouts(prefix: list[int], image: int, suffix: list[int]) -> None:
    _compare_paddleocr(prefix, image, suffix)


# -- ERNIE-4.5-VL --------------------------------------------------------------------------------
def _compare_ernie(layout: list) -> None:
    family = "ernie4_5_vl"
    config = released_processor_config(family)
    tokens, media = build_prompt(family, layout)
    ids, mm = expand_prompt(tokens, media, config)
    check_consistency(family, ids, mm, media)
    expected, delta = reference.ernie_rope_index(
        ids, _grids(media, "image"), _grids(media, "video")
    )
    differ = np.nonzero((expected != mm.position_ids).any(axis=0))[0]
    assert differ.size == 0, (
        f"{differ.size} of {len(ids)} positions differ, first at {differ[0]}: "
        f"ours {mm.position_ids[:, differ[0]].tolist()}, "
        f"reference {expected[:, differ[0]].tolist()}"
    )
    assert mm.rope_delta == delta


@pytest.mark.parametrize("fps", SAMPLE_FPS)
def test_ernie_mixed_prompt(fps: float) -> None:
    layout = [
        _text(1, 2, 3),
        ("image", 0),
        _text(4),
        ("video", 0, fps),
        _text(5, 6),
        ("image", 1),
        ("image", 2),
        ("video", 2, fps),
        ("video", 1, fps),
        _text(7, 8, 9),
        ("image", 3),
    ]
    _compare_ernie(layout)


@HYPOTHESIS
@given(layout=_layouts(len(IMAGE_SIZES), len(VIDEO_SHAPES), with_video=True))
def test_ernie_random_layouts(layout: list) -> None:
    _compare_ernie(layout)


def _ernie_processor_case(layout: list):
    """Our expansion and the ERNIE processor's output for the same prompt: the processor gets
    the text (one character per token) with its image/video markers, PIL images and the frames
    padded to an even count (as its video loader pads them)."""
    family = "ernie4_5_vl"
    config = released_processor_config(family)
    text = ""
    tokens: list[int] = []
    images: list[Image.Image] = []
    videos: list[np.ndarray] = []
    media: list[ProcessedMedia] = []
    markers = _markers(family)
    for part in layout:
        if part[0] == "text":
            text += part[1]
            tokens.extend(ord(c) for c in part[1])
        elif part[0] == "image":
            text += reference.ERNIE_IMAGE_TEXT
            tokens.extend([markers["image"][0], config.image_token_id, markers["image"][1]])
            images.append(Image.fromarray(image_pixels(part[1])))
            media.append(image_media(family, part[1]))
        else:
            text += reference.ERNIE_VIDEO_TEXT
            tokens.extend([markers["video"][0], config.video_token_id, markers["video"][1]])
            frames = video_frames(part[1])
            if len(frames) % 2:
                frames = np.concatenate([frames, frames[-1:]])
            videos.append(frames)
            media.append(video_media(family, part[1], 2.0))
    ids, mm = expand_prompt(tokens, media, config)
    check_consistency(family, ids, mm, media)
    return ids, mm, media, reference.ernie_process(text, images, videos)


ERNIE_PROCESSOR_LAYOUT = [
    ("text", "abc"),
    ("image", 0),
    ("text", "d"),
    ("video", 0),
    ("text", "ef"),
    ("image", 2),
    ("video", 2),
    ("text", "g"),
]


def test_ernie_matches_processor_positions_ids_and_pixels() -> None:
    """Positions, ids (the processor also uses the image placeholder id for video tokens),
    grids and uint8 pixels equal the ERNIE processor's."""
    config = released_processor_config("ernie4_5_vl")
    ids, mm, media, out = _ernie_processor_case(ERNIE_PROCESSOR_LAYOUT)
    ours_ids = np.asarray(ids)
    ours_ids[ours_ids == config.video_token_id] = config.image_token_id
    assert np.array_equal(out["input_ids"], ours_ids)
    assert np.array_equal(out["position_ids"], mm.position_ids)
    assert np.array_equal(out["grid_thw"], np.asarray([m.grid_thw for m in media]))
    ours_pixels = np.concatenate([item.patches for item in mm.items])
    assert out["images"].dtype == np.uint8
    assert np.array_equal(out["images"], ours_pixels)


def test_ernie_token_types_match_processor_outside_markers() -> None:
    """Token types agree with the processor's on every text and media token. (The processor
    also types the four start/end markers as image tokens, for modality-routed MoE; ours are
    text, like transformers' ``mm_token_type_ids``: that routing type is not compared here.)"""
    _, mm, _, out = _ernie_processor_case(ERNIE_PROCESSOR_LAYOUT)
    cfg = reference.released_model_config("ernie4_5_vl")
    marker_ids = [
        cfg["image_start_token_id"],
        cfg["image_end_token_id"],
        cfg["video_start_token_id"],
        cfg["video_end_token_id"],
    ]
    markers = np.isin(out["input_ids"], marker_ids)
    media_count = sum(part[0] != "text" for part in ERNIE_PROCESSOR_LAYOUT)
    assert markers.sum() == 2 * media_count
    assert np.array_equal(out["token_type_ids"][~markers], mm.token_type_ids[~markers])
